// sub_entries and with_prefix (core/io/npz.hpp) at the edges of a name: an entry named the
// prefix alone, or the prefix and its dot with nothing after, is no part's entry.
#include <string>

#include "helpers.hpp"

using namespace xgrad;

TEST_CASE("sub_entries: '<prefix>' and '<prefix>.' alone are not sub-entries, as torch's load_state_dict under a prefix",
          "[entries][adversarial]") {
    // torch 1.13: a module with submodule "model" loading {"model.weight", "model.bias", "model.",
    // "model"} strict=False lists "model." (and "model") as unexpected: not the submodule's.
    const NamedTensors all{{"model", tensor(1.0)},        {"model.", tensor(2.0)},    {"model.weight", tensor(3.0)},
                           {"model..x", tensor(4.0)},     {"modelx.bias", tensor(5.0)}, {"model.bias", tensor(6.0)}};
    const NamedTensors sub = sub_entries(all, "model");
    REQUIRE(sub.size() == 3);
    CHECK(sub[0].first == "weight");
    CHECK(sub[1].first == ".x");  // a name of its own: the part refuses it if it has no such entry
    CHECK(sub[2].first == "bias");
    CHECK(sub[0].second.is_same(all[2].second));
}

TEST_CASE("with_prefix refuses an entry with an empty name, which sub_entries would not give back",
          "[entries][adversarial]") {
    const NamedTensors part{{"weight", tensor(1.0)}, {"", tensor(2.0)}};
    REQUIRE_THROWS_WITH(with_prefix("model", part),
                        Catch::Contains("with_prefix: entry 1 has an empty name") && Catch::Contains("'model.'"));
    // Every name that is not empty comes back through sub_entries, in order, the same tensors.
    const NamedTensors kept{{"weight", tensor(1.0)}, {".", tensor(2.0)}, {"a.b", tensor(3.0)}};
    const NamedTensors back = sub_entries(with_prefix("model", kept), "model");
    REQUIRE(back.size() == kept.size());
    for (std::size_t i = 0; i < kept.size(); ++i) {
        CHECK(back[i].first == kept[i].first);
        CHECK(back[i].second.is_same(kept[i].second));
    }
}
