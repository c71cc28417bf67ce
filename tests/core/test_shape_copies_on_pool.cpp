// The copies of reshape, permute, transpose, split, concat and slice, and slice's gradient, on
// tensors large enough that they are split over the pool: every element lands where the
// row-major index arithmetic says, in every dtype (a bool's raw bytes kept as they are), on 1,
// 2 and 3 threads.
#include "core/bool_bytes.hpp"
#include "core/runtime/parallel.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

// 165,846 elements: enough for a copy to be split over the pool on any thread count, and rows
// of 131, which the chunks' boundaries cut in the middle.
const Shape kShape{6, 211, 131};

std::vector<std::size_t> strides_of(const Shape& s) {
    std::vector<std::size_t> st(s.size(), 1);
    for (std::size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
    return st;
}

std::size_t numel_of(const Shape& s) {
    std::size_t n = 1;
    for (auto d : s) n *= d;
    return n;
}

// For each element of a result of shape `out`, the flat index in the input it must come from;
// `source` maps the result's multi-index to the input's.
template <class Source> std::vector<std::size_t> expected_sources(const Shape& out, const Shape& in, Source source) {
    const auto in_st = strides_of(in);
    std::vector<std::size_t> idx(out.size(), 0), src;
    src.reserve(numel_of(out));
    for (std::size_t i = 0, n = numel_of(out); i < n; ++i) {
        const std::vector<std::size_t> at = source(idx);
        std::size_t flat = 0;
        for (std::size_t d = 0; d < in.size(); ++d) flat += at[d] * in_st[d];
        src.push_back(flat);
        for (std::size_t d = out.size(); d-- > 0;) {
            if (++idx[d] < out[d]) break;
            idx[d] = 0;
        }
    }
    return src;
}

// The input in each dtype, element i holding a value that names i (bool and bfloat16 by a
// pattern of i): float64 and int64 the index itself, float32 too (exact below 2^24).
double pattern(Dtype d, std::size_t i) {
    if (d == kBFloat16) return static_cast<double>(i % 251);  // integers to 256 are exact in bfloat16
    return static_cast<double>(i);
}
std::uint8_t bool_byte(std::size_t i) { return i % 3 == 0 ? 0 : (i % 3 == 1 ? 1 : 255); }

Tensor input(Dtype d) {
    const std::size_t n = numel_of(kShape);
    if (d == kBool) {
        Tensor t = zeros(kShape, kBool);
        auto* bytes = reinterpret_cast<std::uint8_t*>(t.mutable_data_ptr<bool>());
        for (std::size_t i = 0; i < n; ++i) bytes[i] = bool_byte(i);
        return t;
    }
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = pattern(d, i);
    return from_vector(v, kShape, kFloat64).to(d);
}

// Whether y holds, element by element, the input's element at `sources`.
void check_holds(const Tensor& y, Dtype d, const std::vector<std::size_t>& sources, const std::string& what) {
    INFO(what << " in " << dtype_name(d));
    REQUIRE(y.dtype() == d);
    REQUIRE(y.numel() == sources.size());
    std::size_t wrong = 0, first = sources.size();
    if (d == kBool) {
        const std::uint8_t* bytes = bool_bytes(y);
        for (std::size_t i = 0; i < sources.size(); ++i)
            if (bytes[i] != bool_byte(sources[i]) && wrong++ == 0) first = i;
    } else {
        const std::vector<double> v = y.to(kFloat64).to_vector<double>();
        for (std::size_t i = 0; i < sources.size(); ++i)
            if (v[i] != pattern(d, sources[i]) && wrong++ == 0) first = i;
    }
    INFO("first wrong element " << first);
    CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("child: big shape copies land where the index arithmetic says", "[.shape-copies-child]") {
    INFO("threads " << num_threads());
    for (Dtype d : {kFloat64, kFloat32, kInt64, kBool, kBFloat16}) {
        const Tensor x = input(d);
        const std::vector<std::size_t> same = expected_sources(kShape, kShape, [](auto i) { return i; });

        check_holds(x.reshape({211, 6, 131}), d, same, "reshape");
        check_holds(x.reshape({-1}), d, same, "flatten");

        for (const std::vector<long>& perm : std::vector<std::vector<long>>{{0, 1, 2}, {2, 0, 1}, {0, 2, 1}, {1, 0, 2}, {2, 1, 0}}) {
            Shape out(3);
            for (std::size_t k = 0; k < 3; ++k) out[k] = kShape[static_cast<std::size_t>(perm[k])];
            const auto src = expected_sources(out, kShape, [&](const std::vector<std::size_t>& o) {
                std::vector<std::size_t> at(3);
                for (std::size_t k = 0; k < 3; ++k) at[static_cast<std::size_t>(perm[k])] = o[k];
                return at;
            });
            check_holds(x.permute({perm[0], perm[1], perm[2]}), d, src,
                        fmt::format("permute({}, {}, {})", perm[0], perm[1], perm[2]));
        }
        {
            Shape out{kShape[2], kShape[1], kShape[0]};
            const auto src = expected_sources(out, kShape, [](auto o) { return std::vector<std::size_t>{o[2], o[1], o[0]}; });
            check_holds(x.transpose(0, 2), d, src, "transpose(0, 2)");
        }

        for (long axis = 0; axis < 3; ++axis) {
            const std::size_t ax = static_cast<std::size_t>(axis), n = kShape[ax];
            for (long step : {1L, 3L}) {
                const long start = 1, end = static_cast<long>(n) - 1;
                Shape out = kShape;
                out[ax] = static_cast<std::size_t>((end - start - 1) / step + 1);
                const auto src = expected_sources(out, kShape, [&](std::vector<std::size_t> o) {
                    o[ax] = static_cast<std::size_t>(start) + o[ax] * static_cast<std::size_t>(step);
                    return o;
                });
                check_holds(slice(x, axis, start, end, step), d, src, fmt::format("slice axis {} step {}", axis, step));
            }
            // Uneven pieces, each checked, and joined back into x.
            const long first = static_cast<long>(n) / 3;
            const std::vector<Tensor> pieces = split(x, IntList{first, static_cast<long>(n) - first}, axis);
            REQUIRE(pieces.size() == 2);
            for (std::size_t p = 0; p < 2; ++p) {
                Shape out = kShape;
                out[ax] = p == 0 ? static_cast<std::size_t>(first) : n - static_cast<std::size_t>(first);
                const auto src = expected_sources(out, kShape, [&](std::vector<std::size_t> o) {
                    if (p == 1) o[ax] += static_cast<std::size_t>(first);
                    return o;
                });
                check_holds(pieces[p], d, src, fmt::format("split axis {} piece {}", axis, p));
            }
            check_holds(concat(pieces, axis), d, same, fmt::format("concat axis {}", axis));
        }
    }

    // slice's gradient: the output's gradient scattered into zeros at the kept positions.
    for (long axis = 0; axis < 3; ++axis) {
        const std::size_t ax = static_cast<std::size_t>(axis), n = kShape[ax];
        const long start = 2, step = 3, end = static_cast<long>(n);
        Tensor x = zeros(kShape, kFloat64).requires_grad_();
        const Tensor y = slice(x, axis, start, end, step);
        std::vector<double> g(y.numel());
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<double>(i + 1);
        y.backward(from_vector(g, y.shape(), kFloat64));
        const std::vector<double> got = x.grad().to_vector<double>();
        std::vector<double> want(got.size(), 0.0);
        const auto src = expected_sources(y.shape(), kShape, [&](std::vector<std::size_t> o) {
            o[ax] = static_cast<std::size_t>(start) + o[ax] * static_cast<std::size_t>(step);
            return o;
        });
        for (std::size_t i = 0; i < src.size(); ++i) want[src[i]] = g[i];
        INFO("slice gradient along axis " << axis);
        CHECK(got == want);
    }
}

TEST_CASE("big shape copies are the same on 1 2 and 3 threads", "[shape][threads]") {
    check_child_passes_on("[.shape-copies-child]", {1, 2, 3});
}
