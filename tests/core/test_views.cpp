// Views share their base's storage, as torch's: every view op, every writer through a view, the
// layout accessors, and the autograd of views (a view's gradient edge, in-place ops on views
// rebasing their base's history as torch's CopySlices). Expected values are torch 1.13's, from
// the same lines run in Python (quoted beside each).
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "core/autograd_function.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::indexing;

namespace {

Tensor zeros23() { return zeros({2, 3}); }

}  // namespace

TEST_CASE("the issue's ten porting lines give torch's results", "[views]") {
    // x = torch.zeros(2, 3); r = x[0]; r.fill_(5)
    {
        Tensor x = zeros23();
        Tensor r = x[0];
        r.fill_(5);
        CHECK(vals(x) == std::vector<double>{5, 5, 5, 0, 0, 0});
    }
    {
        Tensor x = zeros23();
        auto r = x[0];
        r.fill_(5);
        CHECK(vals(x) == std::vector<double>{5, 5, 5, 0, 0, 0});
    }
    {
        Tensor x = zeros23();
        x.view({-1}).add_(1);
        CHECK(vals(x) == std::vector<double>{1, 1, 1, 1, 1, 1});
    }
    {
        Tensor x = ones({2, 3});
        x.transpose(0, 1).mul_(0);
        CHECK(vals(x) == std::vector<double>{0, 0, 0, 0, 0, 0});
    }
    {
        Tensor x = zeros23();
        x.narrow(1, 0, 1).fill_(7);
        CHECK(vals(x) == std::vector<double>{7, 0, 0, 7, 0, 0});
    }
    {
        Tensor x = zeros23();
        x.split(1, 0)[0].fill_(3);
        CHECK(vals(x) == std::vector<double>{3, 3, 3, 0, 0, 0});
    }
    {
        Tensor x = zeros23();
        x.select(0, 1).fill_(9);
        CHECK(vals(x) == std::vector<double>{0, 0, 0, 9, 9, 9});
    }
    {
        Tensor x = zeros23();
        Tensor y = x.reshape({3, 2});
        y += 1;
        CHECK(vals(x) == std::vector<double>{1, 1, 1, 1, 1, 1});
    }
    {
        Tensor x = zeros23();
        x.unsqueeze(0).fill_(4);
        CHECK(vals(x) == std::vector<double>{4, 4, 4, 4, 4, 4});
    }
    {
        Tensor x = zeros23();
        for (Tensor row : unbind(x, 0)) row.fill_(2);
        CHECK(vals(x) == std::vector<double>{2, 2, 2, 2, 2, 2});
    }
}

TEST_CASE("every view op shares its base's storage and reads its values", "[views]") {
    const Tensor x = arange(24, kFloat64).reshape({2, 3, 4});
    CHECK(x.is_view());  // reshape of arange's result
    auto shares = [&](const Tensor& v) {
        CHECK(v.is_alias_of(x));
        CHECK(v.is_view());
    };
    shares(x.transpose(0, 2));
    shares(x.permute({2, 0, 1}));
    shares(x.narrow(2, 1, 2));
    shares(x.select(1, 2));
    shares(x[1]);
    shares(x.index({Slice(), 0, None, Ellipsis}));
    shares(x.split(2, 2)[1]);
    shares(x.chunk(3, 1)[2]);
    shares(x.unbind(1)[0]);
    shares(x.unsqueeze(1));
    shares(x.reshape({6, 4}).squeeze());
    shares(x.select(0, 0).unsqueeze(0).squeeze(0));
    shares(x.expand({5, 2, 3, 4}));
    shares(x.diagonal(0, 1, 2));
    shares(x.unfold(2, 2, 1));
    shares(x.as_strided({2, 2}, {1, 4}, 3));
    shares(x.flatten(1));
    shares(x.view({4, -1}));
    shares(x[0].t());
    CHECK(x.detach().is_alias_of(x));
    // torch: x.transpose(0, 2).contiguous().flatten()[:5]
    CHECK(vals(x.transpose(0, 2).contiguous().flatten().narrow(0, 0, 5)) == std::vector<double>{0, 12, 4, 16, 8});
    CHECK(vals(x.narrow(2, 1, 2)[1][2]) == std::vector<double>{21, 22});
    CHECK(vals(x.diagonal(1, 1, 2)) == std::vector<double>{1, 6, 11, 13, 18, 23});  // x.diagonal(1, 1, 2).flatten()
    CHECK(vals(x[1][0].unfold(0, 3, 1)) == std::vector<double>{12, 13, 14, 13, 14, 15});
    CHECK(vals(x.as_strided({2, 2}, {1, 4}, 3)) == std::vector<double>{3, 7, 4, 8});
    CHECK(vals(x.expand({2, 2, 3, 4})[1][1][2]) == std::vector<double>{20, 21, 22, 23});
    // What every op reads: a non-contiguous view, as its values.
    CHECK(vals(x.transpose(0, 2).sum({2})) == vals(x.sum({0}).t().contiguous().reshape({4, 3})));
}

TEST_CASE("the layout accessors: contiguity, strides, storage offset, base", "[views]") {
    const Tensor x = zeros({2, 3});
    CHECK(x.is_contiguous());
    CHECK_FALSE(x.is_view());
    CHECK_FALSE(x._base().defined());
    CHECK(x.strides() == std::vector<std::int64_t>{3, 1});
    const Tensor t = x.transpose(0, 1);
    CHECK_FALSE(t.is_contiguous());
    CHECK(t.strides() == std::vector<std::int64_t>{1, 3});
    CHECK(t._base().is_same(x));
    CHECK(t.t()._base().is_same(x));  // a view of a view has the first base
    const Tensor c = t.contiguous();
    CHECK(c.is_contiguous());
    CHECK_FALSE(c.is_alias_of(x));
    CHECK(x.contiguous().is_same(x));  // contiguous: the tensor itself
    const Tensor s = x[1].narrow(0, 1, 2);
    CHECK(s.storage_offset() == 4);
    CHECK(s.stride(0) == 1);
    CHECK(s.is_contiguous());
    CHECK(x.expand({4, 2, 3}).strides() == std::vector<std::int64_t>{0, 3, 1});
    CHECK(x.unsqueeze(0).strides() == std::vector<std::int64_t>{6, 3, 1});  // torch: (6, 3, 1)
    CHECK(x.narrow(1, 0, 1).is_contiguous() == false);
    CHECK(x.narrow(1, 0, 1).squeeze(1).strides() == std::vector<std::int64_t>{3});
    // view needs compatible strides; reshape copies when they are not.
    CHECK_THROWS_WITH(t.view({6}), Catch::StartsWith("view: the shape (3, 2) cannot be viewed as (6,)"));
    const Tensor flat = t.reshape({6});
    CHECK_FALSE(flat.is_alias_of(x));
    CHECK(t.reshape({3, 2}).is_alias_of(x));
}

TEST_CASE("writes through every kind of view land in the base, and the base's in the views", "[views]") {
    Tensor x = zeros({3, 4}, kFloat64);
    x[0][1] = 5.0;                                  // rvalue assignment through a view of a view
    x.index({Slice(1, 3), 2}) = tensor({7.0, 8.0}, kFloat64);
    x.t()[3].copy_(tensor({1.0, 2.0, 3.0}, kFloat64));
    x.narrow(0, 2, 1).index_put_({0, 0}, 4.0);
    x.select(1, 0).masked_fill_(tensor({false, true, false}), -1.0);
    x[2].narrow(0, 1, 1).zero_();
    x.flatten()[-1].add_(10.0);  // x[2][3] was 3
    {
        Tensor r = x[1];
        r.data_ptr<double>()[1] = 9.0;  // a pointer into the base at the view's offset
    }
    x.transpose(0, 1)[1].set_data(tensor({-2.0, 9.0, -3.0}, kFloat64));
    // torch, the same lines: x.tolist()
    CHECK(vals(x) == std::vector<double>{0, -2, 0, 1, -1, 9, 7, 2, 4, -3, 8, 13});
    // The other way: a write to the base shows in every view taken before.
    Tensor v = x.t();
    Tensor row = x[2];
    x.fill_(1.0);
    CHECK(vals(v) == std::vector<double>(12, 1.0));
    CHECK(vals(row) == std::vector<double>(4, 1.0));
    x.mutable_data_ptr<double>()[8] = 6.0;
    CHECK(vals(row)[0] == 6.0);
    CHECK(vals(v)[2] == 6.0);
    // A view kept after its base handle is gone keeps the storage.
    Tensor kept;
    {
        Tensor base = arange(6, kFloat64);
        kept = base.narrow(0, 2, 2);
    }
    kept.mul_(10.0);
    CHECK(vals(kept) == std::vector<double>{20, 30});
    CHECK(vals(kept._base()) == std::vector<double>{0, 1, 20, 30, 4, 5});
}

TEST_CASE("one version counter per storage: a write through a view is seen by ops that saved another", "[views]") {
    const Tensor w = param({2, 3}, -1.0, 1.0, 3);
    Tensor x = zeros({2, 3}, kFloat64);
    const Tensor saved = x.t();
    Tensor y = (saved * w.t()).sum();  // mul saves both operands
    const auto v0 = x.version();
    x[0][0].fill_(1.0);
    CHECK(x.version() == v0 + 1);
    CHECK(saved.version() == x.version());
    CHECK_THROWS_WITH(y.backward(), Catch::Contains("was modified in place after it was saved"));
}

TEST_CASE("autograd of views: gradients flow back strided, in-place ops on views rebase the base", "[views][grad]") {
    SECTION("the issue's CopySlices line") {
        // x = torch.ones(2, 3, requires_grad=True); a = x * 1; a.transpose(0, 1)[0].mul_(2); a.sum().backward()
        const Tensor x = ones({2, 3}, kFloat64).requires_grad_();
        Tensor a = x * 1;
        a.transpose(0, 1)[0].mul_(2);
        CHECK(vals(a) == std::vector<double>{2, 1, 1, 2, 1, 1});
        a.sum().backward();
        CHECK(vals(x.grad()) == std::vector<double>{2, 1, 1, 2, 1, 1});
        CHECK(a.op_name() == "mul_");
    }
    SECTION("a view taken before the write reads the new history") {
        // x = torch.arange(6.).reshape(2, 3).requires_grad_(); a = x * 1; v = a[0]; a[0].mul_(3); (v * v).sum().backward()
        const Tensor x = arange(6, kFloat64).reshape({2, 3}).detach().requires_grad_();
        Tensor a = x * 1;
        Tensor v = a[0];
        a[0].mul_(3);
        CHECK(vals(v) == std::vector<double>{0, 3, 6});
        (v * v).sum().backward();
        CHECK(vals(x.grad()) == std::vector<double>{0, 18, 36, 0, 0, 0});  // d(9 x^2)/dx
    }
    SECTION("ops that read the base before the write keep their gradient") {
        // x = torch.ones(2, 2, requires_grad=True); a = x * 2; s = a.sum(); a[1].zero_(); (s + a.sum()).backward()
        const Tensor x = ones({2, 2}, kFloat64).requires_grad_();
        Tensor a = x * 2;
        Tensor s = a.sum();
        a[1].zero_();
        (s + a.sum()).backward();
        CHECK(vals(x.grad()) == std::vector<double>{4, 4, 2, 2});
    }
    SECTION("a view of a base that does not require grad, written with one that does") {
        // b = torch.zeros(2, 3); w = torch.ones(3, requires_grad=True); b[1].copy_(w * 2); (b * b).sum().backward()
        const Tensor w = ones({3}, kFloat64).requires_grad_();
        Tensor b = zeros({2, 3}, kFloat64);
        Tensor r = b[0];
        b[1].copy_(w * 2);
        CHECK(b.requires_grad());
        CHECK(r.requires_grad());  // torch: True (its grad_fn is regenerated)
        (b * b).sum().backward();
        CHECK(vals(w.grad()) == std::vector<double>{8, 8, 8});
    }
    SECTION("hooks and retain_grad on a view") {
        const Tensor x = param({2, 3}, -1.0, 1.0, 5);
        Tensor t = x.t();
        t.retain_grad();
        (t * t).sum().backward();
        CHECK(max_abs_diff(t.grad(), (x * 2).t()) == 0.0);
    }
}

TEST_CASE("gradcheck and gradgradcheck through every view op in float64", "[views][gradcheck]") {
    const Tensor x = param({3, 4}, -1.0, 1.0, 7);
    const Tensor y = param({2, 3, 4}, -1.0, 1.0, 8);
    // A non-uniform use of the view, so that every element's gradient differs.
    auto through = [](auto view) {
        return GradcheckFn([view](const std::vector<Tensor>& in) {
            Tensor v = view(in[0]);
            return v * v + v;
        });
    };
    const std::vector<std::pair<const char*, GradcheckFn>> cases = {
        {"view", through([](const Tensor& a) { return a.view({4, 3}); })},
        {"reshape of a transpose (copy)", through([](const Tensor& a) { return a.t().reshape({12}); })},
        {"transpose", through([](const Tensor& a) { return a.transpose(0, 1); })},
        {"t", through([](const Tensor& a) { return a.t(); })},
        {"narrow", through([](const Tensor& a) { return a.narrow(1, 1, 2); })},
        {"select", through([](const Tensor& a) { return a.select(1, 2); })},
        {"index", through([](const Tensor& a) { return a.index({Slice(0, 3, 2), None, -1}); })},
        {"split", through([](const Tensor& a) { return a.split(3, 1)[1]; })},
        {"unsqueeze squeeze", through([](const Tensor& a) { return a.unsqueeze(2).squeeze(2); })},
        {"expand", through([](const Tensor& a) { return a.expand({2, 3, 4}); })},
        {"diagonal", through([](const Tensor& a) { return a.diagonal(1); })},
        {"unfold (overlapping windows)", through([](const Tensor& a) { return a.unfold(1, 2, 1); })},
        {"as_strided (overlapping)", through([](const Tensor& a) { return a.as_strided({3, 3}, {1, 2}, 1); })},
        {"as_strided of a view", through([](const Tensor& a) { return a.t().as_strided({2, 2}, {4, 1}, 5); })},
        {"flatten of a permute", through([](const Tensor& a) { return a.t().flatten(); })},
        {"view of view of view", through([](const Tensor& a) { return a.t()[1].unsqueeze(0).expand({2, 3}); })},
    };
    for (const auto& [name, f] : cases) {
        REQUIRE_GRADCHECK(f, {x}, name);
        REQUIRE_GRADGRADCHECK(f, {x}, name);
    }
    const GradcheckFn permute3 = through([](const Tensor& a) { return a.permute({2, 0, 1}).narrow(0, 1, 2); });
    REQUIRE_GRADCHECK(permute3, {y}, "permute");
    REQUIRE_GRADGRADCHECK(permute3, {y}, "permute");
}

TEST_CASE("gradcheck and gradgradcheck through in-place writes on views", "[views][gradcheck]") {
    const Tensor x = param({3, 4}, -1.0, 1.0, 9);
    const Tensor w = param({3}, 0.5, 1.5, 10);
    const std::vector<std::pair<const char*, GradcheckFn>> cases = {
        {"mul_ on a transposed row", [](const std::vector<Tensor>& in) {
             Tensor a = in[0] * 1;
             a.t()[1].mul_(in[1]);
             return a * a;
         }},
        {"copy_ into a column", [](const std::vector<Tensor>& in) {
             Tensor a = in[0] * 2.0;  // exp would save its output, which the write changes (torch refuses)
             a.select(1, 2).copy_(in[1] * in[1]);
             return a * a;
         }},
        {"add_ into a strided slice, read through another view", [](const std::vector<Tensor>& in) {
             Tensor a = in[0] * 1;
             Tensor b = a.narrow(1, 0, 2);
             a.index({Slice(0, 3, 2), Slice(1, 4, 2)}).add_(a.index({Slice(0, 3, 2), Slice(0, 3, 2)}));
             return b * a.sum();
         }},
        {"index_put_ and masked_fill_ on views", [](const std::vector<Tensor>& in) {
             Tensor a = sin(in[0]);
             a[0].index_put_({Slice(1, 3)}, in[1].narrow(0, 0, 2));
             a.t()[3].masked_fill_(tensor({true, false, true}), 0.5);
             return a * a;
         }},
        {"a base that does not require grad", [](const std::vector<Tensor>& in) {
             Tensor b = zeros({3, 3}, kFloat64);
             b.diagonal().copy_(in[1]);
             return b.matmul(b) + b;
         }},
    };
    for (const auto& [name, f] : cases) {
        REQUIRE_GRADCHECK(f, {x, w}, name);
        REQUIRE_GRADGRADCHECK(f, {x, w}, name);
    }
}

TEST_CASE("views refuse what torch refuses: leaves, overlapping writes, out-of-bounds strides", "[views][adversarial]") {
    const Tensor leaf = ones({2, 3}, kFloat64).requires_grad_();
    CHECK_THROWS_WITH(leaf[0].fill_(1.0),
                      Catch::StartsWith("fill_: a view of a leaf Variable that requires grad is being used"));
    CHECK_THROWS_WITH(leaf.t().add_(1.0), Catch::Contains("shares the storage of a leaf of shape (2, 3)"));
    {
        NoGradGuard no_grad;
        leaf[0].fill_(3.0);  // allowed, as torch.no_grad()
    }
    CHECK(vals(leaf) == std::vector<double>{3, 3, 3, 1, 1, 1});
    CHECK(leaf.version() == 1);
    // A view made under no_grad of a tensor that requires grad, written with grad on.
    const Tensor a = leaf * 2;
    Tensor v;
    {
        NoGradGuard no_grad;
        v = a[0];
    }
    CHECK_THROWS_WITH(v.mul_(2.0), Catch::Contains("made while gradients were off"));
    // Several views from one call (split, chunk, unbind) of a tensor that requires grad.
    CHECK_THROWS_WITH(a.split(1, 0)[0].mul_(2.0), Catch::Contains("one of several views one call returned"));
    CHECK_THROWS_WITH(unbind(a, 1)[2].zero_(), Catch::Contains("one of several views"));
    {
        Tensor b = a * 1;
        Tensor piece = b.chunk(2, 1)[0];
        b.add_(1.0);
        CHECK_THROWS_WITH(piece * 2, Catch::Contains("used after its base"));
    }
    // Overlapping writes: torch's internal-overlap refusal, for every writer.
    Tensor x = zeros({1, 3});
    const Tensor e = x.expand({2, 3});
    CHECK_THROWS_WITH(e.fill_(1), Catch::Contains("more than one element of the written-to tensor"));
    CHECK_THROWS_WITH(e.add_(1), Catch::Contains("refers to a single memory location"));
    CHECK_THROWS_WITH(e.index_put_({0}, 2.0), Catch::Contains("single memory location"));
    CHECK_THROWS_WITH(x.as_strided({2, 2}, {1, 1}).copy_(ones({2, 2})), Catch::Contains("single memory location"));
    CHECK(vals(x) == std::vector<double>{0, 0, 0});
    // as_strided stays inside the storage: negative, huge and overflowing geometry refused.
    const Tensor s = arange(6, kFloat64);
    CHECK_THROWS_WITH(s.as_strided({2}, {1}, -1), Catch::Contains("must not be negative"));
    CHECK_THROWS_WITH(s.as_strided({2, 3}, {3, 1}, 1), Catch::Contains("reaches position 6 of a storage of 6"));
    CHECK_THROWS_WITH(s.as_strided({2}, {-1}), Catch::Contains("negative"));
    CHECK_THROWS_WITH(s.as_strided({3}, {INT64_MAX / 2}), Catch::Contains("as_strided"));
    CHECK_THROWS_WITH(s.as_strided({2}, {1}, 7), Catch::Contains("storage of 6"));
    CHECK_THROWS_WITH(s.as_strided({2, 2}, {1}), Catch::Contains("2 sizes but 1 strides"));
    CHECK(s.as_strided({0, 5}, {100, 100}, 6).numel() == 0);  // empty: nothing is read
    CHECK(vals(s.narrow(0, 4, 2).as_strided({3}, {1}, 0)) == std::vector<double>{0, 1, 2});  // offsets are the storage's
}

TEST_CASE("advanced indexing copies, as torch: a write into the result stays in it", "[views]") {
    Tensor x = zeros({2, 3});
    Tensor picked = x.index({from_vector(std::vector<std::int64_t>{1}, {1})});
    CHECK_FALSE(picked.is_alias_of(x));
    picked.fill_(5);
    CHECK_THROWS_WITH(x.index({x >= 0}) = 7.0, Catch::Contains("would write into a copy"));
    CHECK(vals(x) == std::vector<double>(6, 0.0));
    x.index_put_({x == 0}, 2.0);
    CHECK(vals(x) == std::vector<double>(6, 2.0));
    // The index tensor is read when indexing, not later.
    Tensor i = from_vector(std::vector<std::int64_t>{0}, {1});
    Tensor r = x.index({Slice(), i});
    i.fill_(2);
    x.fill_(0);
    CHECK(vals(r) == std::vector<double>{2, 2});
}

TEST_CASE("zero-size, 0-d and empty views, and views read from threads and under NoGradGuard", "[views][adversarial]") {
    const Tensor x = arange(12, kFloat64).reshape({3, 4});
    CHECK(x.narrow(0, 3, 0).numel() == 0);
    CHECK(x.narrow(0, 3, 0).sum().item<double>() == 0.0);
    CHECK(x[1][2].dim() == 0);
    CHECK(x[1][2].item<double>() == 6.0);
    CHECK(x[1][2].unsqueeze(0).expand({3}).sum().item<double>() == 18.0);
    CHECK(x.index({Slice(5, 9)}).shape() == Shape{0, 4});
    Tensor z = zeros({0, 3});
    CHECK(z.t().is_contiguous());
    z.t().fill_(1);  // nothing to write
    CHECK(x.unfold(1, 4, 4).shape() == Shape{3, 1, 4});
    CHECK(x.diagonal(7).numel() == 0);
    // Views read from several threads at once, while nothing writes.
    const Tensor big = arange(1 << 16, kFloat32).reshape({256, 256});
    const Tensor tr = big.t();
    std::vector<double> sums(4);
    std::vector<std::thread> threads;
    for (std::size_t k = 0; k < sums.size(); ++k)
        threads.emplace_back([&, k] { sums[k] = (tr[static_cast<long>(k)] * 1.0).sum().item<double>(); });
    for (auto& t : threads) t.join();
    for (std::size_t k = 0; k < sums.size(); ++k) CHECK(sums[k] == 256.0 * 255.0 / 2 * 256 + 256.0 * k);
    // Under NoGradGuard a view of a tensor that requires grad records nothing.
    const Tensor p = param({2, 2}, -1.0, 1.0, 4);
    {
        NoGradGuard no_grad;
        CHECK_FALSE(p.t().requires_grad());
    }
    CHECK(p.t().requires_grad());
}

TEST_CASE("save, to_vector, printing and clone of a view read its values, not its storage", "[views]") {
    const Tensor x = arange(6, kFloat64).reshape({2, 3});
    const Tensor t = x.t();
    CHECK(t.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
    CHECK(to_string(t).rfind("tensor([[0.0000, 3.0000],", 0) == 0);
    const Tensor c = t.clone();
    CHECK(c.is_contiguous());
    CHECK(vals(c) == vals(t));
    const std::string path =
        (std::filesystem::temp_directory_path() / ("xgrad_view_" + std::to_string(::getpid()) + ".npz")).string();
    save_npz(path, {{"t", t}, {"row", x[1]}});
    const auto loaded = load_npz(path);
    std::filesystem::remove(path);
    CHECK(vals(find_entry(loaded, "t")) == std::vector<double>{0, 3, 1, 4, 2, 5});
    CHECK(find_entry(loaded, "t").shape() == Shape{3, 2});
    CHECK(vals(find_entry(loaded, "row")) == std::vector<double>{3, 4, 5});
}

TEST_CASE("a matmul of a transposed or sliced operand equals the product of its copy", "[views]") {
    const Tensor a = param({5, 4}, -1.0, 1.0, 11);
    const Tensor b = param({6, 5}, -1.0, 1.0, 12);
    CHECK(max_abs_diff(matmul(a.t(), b.t()), matmul(a.t().contiguous(), b.t().contiguous())) == 0.0);
    CHECK(max_abs_diff(matmul(b.narrow(1, 1, 3), a.narrow(0, 0, 3)),
                       matmul(b.narrow(1, 1, 3).contiguous(), a.narrow(0, 0, 3).contiguous())) == 0.0);
}

namespace {
// x *= 2 in place, as a custom op that marks its input dirty.
struct DoubleInPlace : autograd::Function<DoubleInPlace> {
    static constexpr const char* name = "DoubleInPlace";
    static Tensor forward(autograd::AutogradContext* ctx, Tensor x) {
        x *= 2.0;
        ctx->mark_dirty({x});
        return x;
    }
    static autograd::variable_list backward(autograd::AutogradContext*, autograd::variable_list g) {
        return {g[0] * 2.0};
    }
};
}  // namespace

TEST_CASE("a custom Function's mark_dirty on a view rebases its base, as torch's", "[views][custom]") {
    // torch: b = a * 1; D.apply(b[0]); (b * b).sum().backward() with D doubling in place
    const Tensor a = ones({2, 3}, kFloat64).requires_grad_();
    Tensor b = a * 1;
    Tensor row = b[0];
    DoubleInPlace::apply(row);
    CHECK(vals(b) == std::vector<double>{2, 2, 2, 1, 1, 1});
    (b * b).sum().backward();
    CHECK(vals(a.grad()) == std::vector<double>{8, 8, 8, 2, 2, 2});
    const GradcheckFn f = [](const std::vector<Tensor>& in) {
        Tensor c = in[0] * in[0];
        DoubleInPlace::apply(c.t()[1]);
        return c * in[0];
    };
    REQUIRE_GRADCHECK(f, {param({2, 3}, -1.0, 1.0, 13)}, "mark_dirty on a view");
    REQUIRE_GRADGRADCHECK(f, {param({2, 3}, -1.0, 1.0, 13)}, "mark_dirty on a view");
    // A view of a leaf that requires grad is refused, as a leaf is.
    CHECK_THROWS_WITH(DoubleInPlace::apply(a[0]), Catch::Contains("a view of shape (3,) of a leaf that requires grad"));
}

TEST_CASE("an in-place op whose operand is a view of the tensor written: values as torch, saved operands refused", "[views][adversarial]") {
    // torch: a = x * 1; a[1].mul_(a[0]); (a * a).sum().backward() -> "modified by an inplace operation"
    for (int form = 0; form < 4; ++form) {
        INFO("form " << form);
        const Tensor x = arange(6, kFloat64).reshape({2, 3}).detach().requires_grad_();
        Tensor a = x * 1;
        if (form == 0) a[1].mul_(a[0]);
        if (form == 1) a.mul_(a[0]);
        if (form == 2) a[0].mul_(a[0]);
        if (form == 3) a[1].div_(a[0][2]);
        CHECK_THROWS_WITH((a * a).sum().backward(), Catch::Contains("was modified in place after it was saved"));
    }
    // Operands that nothing saves are read before the write and keep their gradient.
    const Tensor x = arange(6, kFloat64).reshape({2, 3}).detach().requires_grad_();
    Tensor a = x * 1;
    a[1].add_(a[0]);
    a.t()[0].copy_(a.t()[2]);
    CHECK(vals(a) == std::vector<double>{2, 1, 2, 7, 5, 7});  // torch: a.flatten().tolist()
    (a * a).sum().backward();
    CHECK(vals(x.grad()) == std::vector<double>{0, 12, 36, 0, 10, 28});
}

TEST_CASE("a gradient set to a view is accumulated through it, as torch's", "[views][grad]") {
    // Gradients that live in one flat buffer: p.grad = buf[1:3]
    Tensor p = ones({2}, kFloat64).requires_grad_();
    Tensor buf = zeros({4}, kFloat64);
    p.set_grad(buf.narrow(0, 1, 2));
    (p * 3.0).sum().backward();
    (p * 2.0).sum().backward();
    CHECK(vals(buf) == std::vector<double>{0, 5, 5, 0});
    CHECK(p.grad().is_alias_of(buf));
    // A transposed one.
    Tensor w = ones({2, 3}, kFloat64).requires_grad_();
    Tensor g = zeros({3, 2}, kFloat64);
    w.set_grad(g.t());
    (w * arange(6, kFloat64).reshape({2, 3})).sum().backward();
    CHECK(vals(g) == std::vector<double>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("writes through views of one tensor from several threads count every version", "[views][threads]") {
    Tensor x = zeros({8, 16}, kFloat64);
    std::vector<std::thread> threads;
    for (long k = 0; k < 8; ++k)
        threads.emplace_back([&x, k] {
            Tensor row = x[k];
            for (int i = 0; i < 200; ++i) row.add_(1.0);
        });
    for (auto& t : threads) t.join();
    CHECK(x.version() == 1600);
    CHECK(vals(x) == std::vector<double>(128, 200.0));
    // Recorded in-place ops on views of one non-leaf from several threads, then one backward.
    const Tensor w = ones({8, 4}, kFloat64).requires_grad_();
    Tensor a = w * 1;
    threads.clear();
    for (long k = 0; k < 8; ++k)
        threads.emplace_back([&a, k] { a[k].mul_(static_cast<double>(k + 1)); });
    for (auto& t : threads) t.join();
    a.sum().backward();
    std::vector<double> want;
    for (int k = 0; k < 8; ++k) want.insert(want.end(), 4, k + 1.0);
    CHECK(vals(w.grad()) == want);
}
