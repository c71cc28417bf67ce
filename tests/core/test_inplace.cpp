// In-place ops in the graph (add_, mul_, copy_, index_put_, the compound operators...) with
// torch's rules, and writes through t[i] and index() that land in t. Reference values are
// PyTorch 1.13's, from the same lines run in Python (quoted beside each).
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::indexing;

namespace {

// f(inputs) = op applied in place to a clone of inputs[0]: what torch's gradcheck of an
// in-place op checks.
template <class Op> GradcheckFn on_clone(Op op) {
    return [op](const std::vector<Tensor>& in) {
        Tensor y = in[0].clone();
        op(y, in);
        return y;
    };
}

// Both gradient checks of an in-place op.
template <class Op> void check_both(const char* name, const std::vector<Tensor>& inputs, Op op) {
    INFO(name);
    REQUIRE_GRADCHECK(on_clone(op), inputs, name);
    REQUIRE_GRADGRADCHECK(on_clone(op), inputs, name);
}

const Tensor kWeights = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}, {7.0, 8.0, 9.0}}, kFloat64);

}  // namespace

TEST_CASE("every in-place op passes gradcheck and gradgradcheck in float64", "[inplace][gradcheck]") {
    const Tensor x = param({2, 3}, -2.0, 2.0, 1);
    const Tensor o = param({3}, 0.5, 2.0, 2);  // broadcast over rows, away from 0 (div)
    check_both("add_", {x, o}, [](const Tensor& y, const auto& in) { y.add_(in[1]); });
    check_both("add_ alpha", {x, o}, [](const Tensor& y, const auto& in) { y.add_(in[1], -2.5); });
    check_both("add_ scalar", {x}, [](const Tensor& y, const auto&) { y.add_(1.5); });
    check_both("sub_", {x, o}, [](const Tensor& y, const auto& in) { y.sub_(in[1]); });
    check_both("sub_ alpha", {x, o}, [](const Tensor& y, const auto& in) { y.sub_(in[1], 0.5); });
    check_both("sub_ scalar", {x}, [](const Tensor& y, const auto&) { y.sub_(3); });
    check_both("mul_", {x, o}, [](const Tensor& y, const auto& in) { y.mul_(in[1]); });
    check_both("mul_ twice by itself", {x}, [](const Tensor& y, const auto&) { y.mul_(y).mul_(y); });
    check_both("mul_ scalar", {x}, [](const Tensor& y, const auto&) { y.mul_(-1.5); });
    check_both("div_", {x, o}, [](const Tensor& y, const auto& in) { y.div_(in[1]); });
    check_both("div_ scalar", {x}, [](const Tensor& y, const auto&) { y.div_(4); });
    check_both("clamp_", {x}, [](const Tensor& y, const auto&) { y.mul_(y).clamp_(0.3, 2.5); });
    check_both("copy_", {x, o}, [](const Tensor& y, const auto& in) { y.copy_(in[1] * in[1]); });
    check_both("zero_", {x}, [](const Tensor& y, const auto& in) { y.mul_(in[0]).zero_().add_(in[0] * in[0]); });
    check_both("fill_", {x, o}, [](const Tensor& y, const auto& in) { y.fill_(0.5).mul_(in[1]); });
    check_both("compound operators", {x, o}, [](const Tensor& y, const auto& in) {
        y += in[1];
        y *= in[1];
        y -= in[0] * 0.5;
        y /= in[1];
    });
    check_both("index_put_", {x, param({2}, -1.0, 1.0, 3)},
               [](const Tensor& y, const auto& in) { y.index_put_({Slice(), Slice(1, None)}, in[1] * in[1]); });
}

// These go through masked_fill and index (t[i]) forward, whose gradients are formulas of their
// own files (ops_select.cpp, ops_index.cpp): they pass once those are converted.
TEST_CASE("masked_fill_ and writes through t[i] pass gradgradcheck", "[inplace][gradcheck][gradgrad]") {
    const Tensor x = param({2, 3}, -2.0, 2.0, 1);
    check_both("masked_fill_", {x}, [](const Tensor& y, const auto& in) {
        y.mul_(in[0]).masked_fill_(tensor({{1.0, 0.0, 0.0}, {0.0, 1.0, 0.0}}) > 0.5, 2.0);
    });
    check_both("t[i] writes", {param({3, 2}, -1.0, 1.0, 4), param({2}, -1.0, 1.0, 5)},
               [](const Tensor& y, const auto& in) {
                   y[0].mul_(in[1]);
                   y[1][0] = in[1].sum();
                   y.index({Slice(), 1}) += in[0].index({Slice(), 0});
               });
}

TEST_CASE("an in-place op on a tensor another op saved is refused at backward, as torch", "[inplace][version]") {
    // torch: b = a*1; z = b*b; b.add_(1); (z+b).sum().backward() → RuntimeError "one of the
    // variables needed for gradient computation has been modified by an inplace operation".
    Tensor a = tensor({1.5, -2.0}, kFloat64).requires_grad_();
    Tensor b = a * 1;
    Tensor z = b * b;
    b.add_(1);
    CHECK(b.op_name() == "add_");
    CHECK_THROWS_WITH((z + b).sum().backward(),
                      Catch::Contains("modified in place after it was saved for backward by 'mul'"));
}

TEST_CASE("an in-place op on a tensor no op saved keeps both gradient paths, as torch", "[inplace]") {
    // torch: b = a*1; z = b*2; b.add_(1); (z+b).sum().backward() → a.grad = [3., 3.]
    Tensor a = tensor({1.5, -2.0}, kFloat64).requires_grad_();
    Tensor b = a * 1;
    Tensor z = b * 2;
    const auto v0 = b.version();
    b.add_(1);
    CHECK(b.version() == v0 + 1);
    CHECK_THAT(vals(b), approx({2.5, -1.0}));
    (z + b).sum().backward();
    CHECK_THAT(vals(a.grad()), approx({3.0, 3.0}));
}

TEST_CASE("mul_ by an operand that requires grad gives it a gradient, as torch", "[inplace]") {
    // torch: y = x.clone(); y.mul_(w); (y * [1, 2, 3]).sum().backward()
    //   x.grad = [[0.5, -2, 6], [3, 0.5, -6]], w.grad = [[1, 4, 9], [4, 10, 18]]
    Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, kFloat64).requires_grad_();
    Tensor w = tensor({{0.5, -1.0, 2.0}, {3.0, 0.25, -2.0}}, kFloat64).requires_grad_();
    Tensor y = x.clone();
    y.mul_(w);
    (y * tensor({1.0, 2.0, 3.0}, kFloat64)).sum().backward();
    CHECK_THAT(vals(x.grad()), approx({0.5, -2.0, 6.0, 3.0, 0.5, -6.0}));
    CHECK_THAT(vals(w.grad()), approx({1.0, 4.0, 9.0, 4.0, 10.0, 18.0}));
}

TEST_CASE("a tensor without grad written in place from one with grad joins the graph, as torch", "[inplace]") {
    Tensor w = tensor({2.0, 3.0}, kFloat64).requires_grad_();
    Tensor acc = zeros({2}, kFloat64);
    acc += w;
    acc *= w;  // acc = w²
    CHECK(acc.requires_grad());
    CHECK_FALSE(acc.is_leaf());
    acc.sum().backward();
    CHECK_THAT(vals(w.grad()), approx({4.0, 6.0}));
}

TEST_CASE("the other in-place ops give torch's gradients", "[inplace]") {
    const Tensor wt = kWeights.index({Slice(0, 2)});
    Tensor x = tensor({{1.0, -2.0, 3.0}, {0.5, 5.0, -6.0}}, kFloat64).requires_grad_();
    Tensor o = tensor({2.0, 4.0, -0.5}, kFloat64).requires_grad_();
    SECTION("sub_ with alpha, then div_") {
        // torch: y = x.clone(); y.sub_(o, alpha=2.5); y.div_(o); (y*wt).sum().backward()
        Tensor y = x.clone();
        y.sub_(o, 2.5);
        y.div_(o);
        (y * wt).sum().backward();
        CHECK_THAT(vals(x.grad()), approx({0.5, 0.5, -6.0, 2.0, 1.25, -12.0}));
        CHECK_THAT(vals(o.grad()), approx({-0.75, -1.3125, 108.0}));
    }
    SECTION("copy_: zero to the old values, all to the source") {
        // torch: y.copy_(o) → x.grad = zeros, o.grad = [5, 7, 9]
        Tensor y = x.clone();
        y.copy_(o);
        (y * wt).sum().backward();
        CHECK_THAT(vals(x.grad()), approx({0, 0, 0, 0, 0, 0}));
        CHECK_THAT(vals(o.grad()), approx({5.0, 7.0, 9.0}));
    }
    SECTION("masked_fill_ then clamp_") {
        // torch: y.masked_fill_(m, -1.0); y.clamp_(-1.5, 4.0)
        //   y = [[-1, -1.5, 3], [0.5, 4, -1]], x.grad = [[0, 0, 3], [4, 0, 0]]
        Tensor m = tensor({{1.0, 0.0, 0.0}, {0.0, 0.0, 1.0}}) > 0.5;
        Tensor y = x.clone();
        y.masked_fill_(m, -1.0);
        y.clamp_(-1.5, 4.0);
        CHECK_THAT(vals(y), approx({-1.0, -1.5, 3.0, 0.5, 4.0, -1.0}));
        (y * wt).sum().backward();
        CHECK_THAT(vals(x.grad()), approx({0, 0, 3, 4, 0, 0}));
    }
}

TEST_CASE("index_put_ on a clone gives gradients to the tensor and to the value, as torch", "[inplace][indexing]") {
    Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}, {7.0, 8.0, 9.0}}, kFloat64).requires_grad_();
    SECTION("a value broadcast over the rows it fills") {
        // torch: y = x.clone(); y[0:2, 1:] = v; (y*wt).sum().backward()
        //   x.grad = [[1, 0, 0], [4, 0, 0], [7, 8, 9]], v.grad = [7, 9]
        Tensor v = tensor({10.0, 20.0}, kFloat64).requires_grad_();
        Tensor y = x.clone();
        y.index_put_({Slice(0, 2), Slice(1, None)}, v);
        CHECK(y.op_name() == "index_put_");
        (y * kWeights).sum().backward();
        CHECK_THAT(vals(x.grad()), approx({1, 0, 0, 4, 0, 0, 7, 8, 9}));
        CHECK_THAT(vals(v.grad()), approx({7.0, 9.0}));
    }
    SECTION("a 0-d value, through y[i] = v") {
        // torch: y = x.clone(); y[:, 0] = s → x.grad = [[0, 2, 3], [0, 5, 6], [0, 8, 9]], s.grad = 12
        Tensor s = full({}, 3.0, kFloat64).requires_grad_();
        Tensor y = x.clone();
        y.index({Slice(), 0}) = s;
        (y * kWeights).sum().backward();
        CHECK_THAT(vals(x.grad()), approx({0, 2, 3, 0, 5, 6, 0, 8, 9}));
        CHECK(s.grad().item<double>() == 12.0);
    }
    SECTION("a float32 value into a float64 tensor gets a float32 gradient") {
        Tensor v = tensor({1.0, 2.0, 3.0}).requires_grad_();
        Tensor y = x.clone();
        y.index_put_({1}, v);
        (y * kWeights).sum().backward();
        CHECK(v.grad().dtype() == kFloat32);
        CHECK_THAT(vals(v.grad()), approx({4.0, 5.0, 6.0}));
    }
}

TEST_CASE("a leaf that requires grad is refused, as torch", "[inplace][errors]") {
    // torch: "a leaf Variable that requires grad is being used in an in-place operation."
    //        l[0].mul_(2): "a view of a leaf Variable that requires grad is being used in an in-place operation."
    Tensor l = ones({2, 2}, kFloat64).requires_grad_();
    const auto leaf = Catch::Contains("a leaf Variable that requires grad is being used in an in-place operation");
    CHECK_THROWS_WITH(l.add_(1), leaf && Catch::Contains("add_"));
    CHECK_THROWS_WITH(l.copy_(zeros({2, 2}, kFloat64)), leaf && Catch::Contains("copy_"));
    CHECK_THROWS_WITH(l.zero_(), leaf);
    CHECK_THROWS_WITH(l.index_put_({0}, 5.0), leaf && Catch::Contains("index_put_"));
    CHECK_THROWS_WITH(l *= 2, leaf && Catch::Contains("mul_"));
    const auto view = Catch::Contains("a view of a leaf Variable that requires grad");
    CHECK_THROWS_WITH(l[0].mul_(2), view && Catch::Contains("mul_"));
    CHECK_THROWS_WITH(l[0][1] = 5, view);
    CHECK_THROWS_WITH(l.index({Slice(), 0}) = zeros({2}, kFloat64), view);
    CHECK_THAT(vals(l), approx({1, 1, 1, 1}));  // nothing written
    CHECK(l.is_leaf());
    CHECK(l.version() == 0);
    {
        NoGradGuard no_grad;  // an optimiser's step
        l.mul_(2);
        l[0][1] = 5;
    }
    CHECK_THAT(vals(l), approx({2, 5, 2, 2}));
    CHECK(l.is_leaf());
    CHECK(l.requires_grad());
}

TEST_CASE("a refused in-place op changes nothing", "[inplace][errors]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y = x * 2;
    const auto v0 = y.version();
    CHECK_THROWS_WITH(y.add_(zeros({3}, kFloat64)), Catch::Contains("add_") && Catch::Contains("(3,)"));
    CHECK_THROWS_WITH(y.copy_(zeros({3}, kFloat64)), Catch::Contains("copy_") && Catch::Contains("(3,)"));
    CHECK_THROWS_WITH(y.index_put_({Slice()}, zeros({3}, kFloat64)), Catch::Contains("index_put_"));
    CHECK(y.version() == v0);
    CHECK(y.op_name() == "mul");
    y.sum().backward();
    CHECK_THAT(vals(x.grad()), approx({2.0, 2.0}));
    Tensor counts = zeros({2}, kInt64);
    CHECK_THROWS_WITH(counts.mul_(x), Catch::Contains("mul_") && Catch::Contains("can't be cast"));
    CHECK_THROWS_WITH(Tensor().add_(1), Catch::Contains("undefined"));
}

TEST_CASE("copy_ and fill_ cast as torch's, the others as can_cast allows", "[inplace]") {
    Tensor counts = zeros({3}, kInt64);
    counts.copy_(tensor({1.5, -2.5, 3.0}));  // truncates, as torch's copy_
    CHECK(counts.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, -2, 3});
    counts.fill_(7);
    CHECK(counts.to_vector<std::int64_t>() == std::vector<std::int64_t>{7, 7, 7});
    Tensor big = zeros({1}, kInt64);
    big.fill_(std::int64_t{1} << 60);  // all 64 bits
    CHECK(big.item<std::int64_t>() == std::int64_t{1} << 60);
    Tensor f = zeros({2, 2});
    f.copy_(tensor({1.0, 2.0}, kFloat64));  // broadcast over rows, cast to float32
    CHECK(f.dtype() == kFloat32);
    CHECK_THAT(vals(f), approx({1, 2, 1, 2}));
    f.zero_();
    CHECK_THAT(vals(f), approx({0, 0, 0, 0}));
    Tensor m = zeros({2}, kBool);
    m.fill_(true);
    CHECK(m.to_vector<bool>() == std::vector<bool>{true, true});
}

TEST_CASE("without a graph an in-place op writes into the tensor's own storage", "[inplace]") {
    Tensor t = tensor({1.0, 2.0, 3.0});
    const float* storage = t.const_data_ptr<float>();
    const Tensor alias = t;
    t.mul_(2).add_(tensor({1.0, 1.0, 1.0}), 0.5).clamp_(std::nullopt, 4.0);
    CHECK(t.const_data_ptr<float>() == storage);
    CHECK_THAT(vals(alias), approx({2.5, 4.0, 4.0}));
    CHECK(t.version() == 3);
    CHECK(t.is_leaf());
    CHECK_FALSE(t.requires_grad());
}

TEST_CASE("assigning to a temporary writes into the tensor it stands for, as LibTorch", "[inplace]") {
    Tensor p = tensor({1.0, 2.0}).requires_grad_();
    (p * p).sum().backward();
    const Tensor g = p.grad();
    p.grad() = tensor({0.5, 0.25});  // LibTorch's rvalue operator=: copy_ into the gradient
    CHECK_THAT(vals(g), approx({0.5, 0.25}));
    p.grad() = 0;
    CHECK_THAT(vals(p.grad()), approx({0.0, 0.0}));
    Tensor q = tensor({1.0});
    CHECK_THROWS_WITH(q.grad() = tensor({1.0}), Catch::Contains("undefined") && Catch::Contains("set_grad"));
    // A named tensor rebinds, as in LibTorch.
    Tensor a = tensor({1.0});
    const Tensor before = a;
    a = tensor({2.0});
    CHECK(before.item<float>() == 1.0f);
}

// --- writes through the views t[i] and index() (no write may vanish) -----------------------------

TEST_CASE("every write through t[i] or index() lands in t", "[inplace][indexing][views]") {
    Tensor t = zeros({2, 3});
    const Tensor alias = t;
    t[0][1] = tensor({5.0});  // a (1,) value into a 0-d part: torch's setitem drops the leading 1
    CHECK(alias.index({0, 1}).item<float>() == 5.0f);
    t[1][2] = 7;
    CHECK(alias.index({1, 2}).item<float>() == 7.0f);
    t.index({0}) = tensor({1.0, 2.0, 3.0});
    CHECK_THAT(vals(alias), approx({1, 2, 3, 0, 0, 7}));
    t.index({Slice(), 0}) = tensor({-1.0, -2.0});
    CHECK_THAT(vals(alias), approx({-1, 2, 3, -2, 0, 7}));
    t[0].mul_(2);
    CHECK_THAT(vals(alias), approx({-2, 4, 6, -2, 0, 7}));
    t[0].index_put_({1}, 5);
    CHECK_THAT(vals(alias), approx({-2, 5, 6, -2, 0, 7}));
    t[0] += 1;
    t[1] -= tensor({1.0, 1.0, 1.0});
    t[1][0] *= 3;
    t.index({Slice(), 2}) /= 2;
    CHECK_THAT(vals(alias), approx({-1, 6, 3.5, -9, -1, 3}));
    t[1].zero_();
    t[0].index({Slice(0, 2)}).fill_(8);
    t[0][2].copy_(full({}, 4.0));
    CHECK_THAT(vals(alias), approx({8, 8, 4, 0, 0, 0}));
    t[0] = t[1];  // one view into another
    CHECK_THAT(vals(alias), approx({0, 0, 0, 0, 0, 0}));
}

TEST_CASE("a write through t[i] bumps t's version and refuses a stale graph", "[inplace][views][version]") {
    Tensor w = tensor({1.0, 2.0}).requires_grad_();
    Tensor t = ones({2, 2});
    Tensor y = matmul(t, w);  // saves t
    const auto v0 = t.version();
    t[0][0] = 3;
    CHECK(t.version() > v0);
    CHECK_THROWS_WITH(y.sum().backward(), Catch::Contains("modified in place"));
}

TEST_CASE("writes through t[i] are recorded in the graph, as torch's views", "[inplace][views]") {
    // torch: y = x.clone(); y[0].mul_(2); y[1][2] = 0.5; y[2] += y[1]; (y*wt).sum().backward()
    //   y = [[2, 4, 6], [4, 5, 0.5], [11, 13, 9.5]], x.grad = [[2, 4, 6], [11, 13, 0], [7, 8, 9]]
    Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}, {7.0, 8.0, 9.0}}, kFloat64).requires_grad_();
    Tensor y = x.clone();
    y[0].mul_(2);
    y[1][2] = 0.5;
    y[2] += y[1];
    CHECK_THAT(vals(y), approx({2, 4, 6, 4, 5, 0.5, 11, 13, 9.5}));
    (y * kWeights).sum().backward();
    CHECK_THAT(vals(x.grad()), approx({2, 4, 6, 11, 13, 0, 7, 8, 9}));
}

TEST_CASE("a write through t[i] passes gradcheck", "[inplace][views][gradcheck]") {
    REQUIRE_GRADCHECK(on_clone([](const Tensor& y, const auto& in) {
                          y[0].mul_(in[1]);
                          y[1][0] = in[1].sum();
                          y.index({Slice(), 1}) += in[0].index({Slice(), 0});
                      }),
                      {param({3, 2}, -1.0, 1.0, 4), param({2}, -1.0, 1.0, 5)}, "t[i] writes");
}

TEST_CASE("a held t[i] is a view: it reads t's writes and writes into t, whatever its declared type", "[inplace][views]") {
    Tensor t = tensor({{1.0, 2.0}, {3.0, 4.0}});
    auto r = t[0];
    t.mul_(10);  // a write to t after r was taken shows in r, as torch's view
    CHECK_THAT(vals(r), approx({10, 20}));
    r.add_(1);
    CHECK_THAT(vals(t), approx({11, 21, 30, 40}));
    r.copy_(tensor({0.0, 0.0}));
    CHECK_THAT(vals(t), approx({0, 0, 30, 40}));
    Tensor row = t[1];  // declared a Tensor: the same view
    row.mul_(0);
    CHECK_THAT(vals(t), approx({0, 0, 0, 0}));
}
