// The plain-loop paths of the elementwise ops, their gradients' reductions, sum/mean and
// relu (core/broadcast.hpp), checked against xtensor's generic path: values bit for bit,
// reductions bit for bit against their contract (core/broadcast.hpp) and to within rounding
// of xtensor's own order; every broadcast form they take, the forms they must leave to the generic path, empty and size-1
// axes, NaN and inf, float64, and results that do not depend on the thread count.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <sstream>
#include <string>

#include "core/broadcast.hpp"
#include "core/node.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

// Equal bits, or both NaN (a NaN's payload is not promised).
template <class T> bool same(T a, T b) {
    if (std::isnan(a) && std::isnan(b)) return true;
    return std::memcmp(&a, &b, sizeof a) == 0;
}

// Index of the first element where the two differ, or -1.
template <class T> long first_difference(const xt::xarray<T>& got, const xt::xarray<T>& want) {
    if (!std::equal(got.shape().begin(), got.shape().end(), want.shape().begin(), want.shape().end())) return -2;
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!same(got.data()[i], want.data()[i])) return static_cast<long>(i);
    return -1;
}

// The two arrays hold the same bits (NaN as NaN); otherwise reports the first difference.
#define CHECK_SAME(got, want)                                                                        \
    do {                                                                                             \
        const auto g_ = (got);                                                                       \
        const auto w_ = (want);                                                                      \
        const long at_ = first_difference(g_, w_);                                                   \
        std::ostringstream d_;                                                                       \
        if (at_ >= 0) d_ << std::hexfloat << g_.data()[at_] << " vs " << w_.data()[at_];            \
        INFO("first difference at flat index " << at_ << ": " << d_.str());                        \
        CHECK(at_ == -1);                                                                            \
    } while (0)

// The generic reduction the fast path replaces: xtensor's sum over the broadcast axes.
template <class T> xt::xarray<T> generic_sum_to(const xt::xarray<T>& g, const Shape& shape) {
    const std::size_t lead = g.dimension() - shape.size();
    std::vector<std::size_t> axes;
    for (std::size_t i = 0; i < g.dimension(); ++i)
        if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) axes.push_back(i);
    if (g.size() == 0) return xt::zeros<T>(shape);
    xt::xarray<T> r = xt::sum(g, axes, xt::evaluation_strategy::immediate);
    r.reshape(shape);
    return r;
}

// The fast reductions' contract: each element of `shape` is the sum, in increasing flat order
// of g, of the elements of g that broadcasting reads it into, accumulated in acc_t<T> and
// rounded once; a full operand is g itself. Also returns the sums of magnitudes, to bound rounding against xtensor.
template <class T> std::pair<xt::xarray<T>, xt::xarray<double>> contract_sum_to(const xt::xarray<T>& g, const Shape& shape) {
    const std::size_t rank = g.dimension();
    Shape p(rank - shape.size(), 1);
    p.insert(p.end(), shape.begin(), shape.end());
    std::vector<std::size_t> stride(rank, 0);
    for (std::size_t d = rank, s = 1; d-- > 0; s *= p[d]) stride[d] = p[d] == 1 ? 0 : s;
    std::vector<acc_t<T>> acc(checked_numel("test", shape), 0);
    std::vector<double> mag(acc.size(), 0);
    for (std::size_t i = 0; i < g.size(); ++i) {
        std::size_t rest = i, at = 0;
        for (std::size_t d = rank; d-- > 0;) {
            at += rest % g.shape()[d] * stride[d];
            rest /= g.shape()[d];
        }
        acc[at] += g.data()[i];
        mag[at] += std::abs(static_cast<double>(g.data()[i]));
    }
    xt::xarray<T> sum = xt::xarray<T>::from_shape(shape);
    xt::xarray<double> bound = xt::xarray<double>::from_shape(shape);
    // A full operand is not summed at all: its gradient keeps a -0 (0 + -0 would be +0).
    const bool full = acc.size() == g.size();
    for (std::size_t i = 0; i < acc.size(); ++i) {
        sum.data()[i] = full ? g.data()[i] : static_cast<T>(acc[i]);
        bound.data()[i] = mag[i];
    }
    return {sum, bound};
}

// got equals the contract bit for bit when the fast path ran, and xtensor's generic sum to within its rounding (it
// sums float in float, in its own order): (terms + 2)·eps·Σ|terms| per element, the classic bound
// of a float sum; NaN and inf alike.
#define CHECK_REDUCED(got, g, shape, fast)                                                               \
    do {                                                                                             \
        using T_ = typename std::decay_t<decltype(g)>::value_type;                                   \
        const auto got_ = (got);                                                                     \
        const auto contract_ = contract_sum_to<T_>((g), (shape));                                    \
        if (fast) CHECK_SAME(got_, contract_.first);                                                 \
        const xt::xarray<T_> generic_ = generic_sum_to<T_>((g), (shape));                            \
        const double terms_ = 2.0 + double((g).size()) / double(std::max<std::size_t>(got_.size(), 1)); \
        long far_ = -1;                                                                              \
        for (std::size_t i_ = 0; i_ < got_.size() && far_ < 0; ++i_) {                               \
            const double a_ = got_.data()[i_], b_ = generic_.data()[i_];                             \
            const bool ok_ = std::isfinite(a_) && std::isfinite(b_)                                  \
                                 ? std::abs(a_ - b_) <= terms_ * std::numeric_limits<T_>::epsilon() * contract_.second.data()[i_] \
                                 : same(got_.data()[i_], generic_.data()[i_]);                       \
            if (!ok_) far_ = static_cast<long>(i_);                                                  \
        }                                                                                            \
        INFO("farther than rounding from xtensor's sum at flat index " << far_);                    \
        CHECK(far_ == -1);                                                                           \
    } while (0)

// Values in [-2, 2) with, when `specials`, NaN, ±inf, ±0 and a denormal sprinkled in.
Tensor values_for(const Shape& shape, Dtype d, std::uint64_t seed, bool specials) {
    Generator gen(seed);
    Tensor t = uniform(shape, -2.0, 2.0, d, gen);
    if (!specials || t.numel() == 0) return t;
    const double sp[] = {std::numeric_limits<double>::quiet_NaN(), INFINITY, -INFINITY, 0.0, -0.0, 1e-310};
    std::vector<double> v = t.to_vector<double>();
    for (std::size_t i = 0; i < v.size(); i += 7) v[i] = sp[(i / 7 + seed) % 6];
    return from_vector(v, shape, d);
}

enum class Op { add, sub, mul, div };
const char* name(Op op) { return op == Op::add ? "add" : op == Op::sub ? "sub" : op == Op::mul ? "mul" : "div"; }

Tensor apply(Op op, const Tensor& a, const Tensor& b) {
    switch (op) {
        case Op::add: return a + b;
        case Op::sub: return a - b;
        case Op::mul: return a * b;
        default: return a / b;
    }
}

// y = a op b and both gradients under an upstream gradient w, against xtensor's generic
// expressions and reduction.
template <class T> void check_against_generic(Op op, const Shape& sa, const Shape& sb, bool specials) {
    const Dtype d = dtype_of<T>();
    Tensor a = values_for(sa, d, 1, specials).requires_grad_();
    Tensor b = values_for(sb, d, 2, specials).requires_grad_();
    Tensor y = apply(op, a, b);
    Tensor w = values_for(y.shape(), d, 3, false);
    (y * w).sum().backward();

    const auto& xa = values<T>(a);
    const auto& xb = values<T>(b);
    const auto& g = values<T>(w);  // the gradient reaching y is w, exactly (1·w)
    xt::xarray<T> want_y, want_da, want_db;
    switch (op) {
        case Op::add: want_y = xa + xb; want_da = g; want_db = g; break;
        case Op::sub: want_y = xa - xb; want_da = g; want_db = -g; break;
        case Op::mul: want_y = xa * xb; want_da = g * xb; want_db = g * xa; break;
        case Op::div:
            want_y = xa / xb;
            want_da = g / xb;
            want_db = -g * want_y / xb;
            break;
    }
    CHECK_SAME(values<T>(y), want_y);
    const bool fast = plan_broadcast(sa, sb, y.shape()).has_value();
    CHECK_REDUCED(values<T>(a.grad()), xt::xarray<T>(want_da), sa, fast);
    CHECK_REDUCED(values<T>(b.grad()), xt::xarray<T>(want_db), sb, fast);
}

struct Form {
    Shape a, b;
    bool fast;  // whether plan_broadcast takes it
};

const std::vector<Form> kForms = {
    {{6, 5}, {6, 5}, true},         {{6, 5}, {}, true},            {{}, {6, 5}, true},
    {{6, 5}, {1}, true},            {{6, 5}, {1, 1}, true},        {{6, 5}, {5}, true},
    {{5}, {6, 5}, true},            {{6, 5}, {1, 5}, true},        {{6, 5}, {6, 1}, true},
    {{6, 1}, {6, 5}, true},         {{2, 3, 4}, {3, 4}, true},     {{2, 3, 4}, {2, 1, 1}, true},
    {{2, 3, 4}, {2, 3, 1}, true},   {{6, 1}, {1, 5}, true},        {{1, 5}, {6, 1}, true},
    {{3, 1, 5}, {1, 1, 5}, true},   {{3, 1, 5}, {3, 1, 1}, true},  {{1, 1}, {1}, true},
    {{}, {}, true},                 {{4, 1, 3}, {4, 7, 3}, false},  {{1, 6, 5}, {6, 5}, true},
    // Stretched along a middle block, or both operands stretched the same way: generic.
    {{2, 3, 4}, {1, 3, 1}, false},  {{2, 1, 4}, {3, 1}, false},    {{2, 3, 4}, {2, 1, 4}, false},
    {{3, 1}, {2, 3, 4}, false},
    // Empty results: the generic path.
    {{0, 5}, {5}, false},           {{6, 0}, {6, 1}, false},       {{0}, {}, false},
    // Above the grain: several chunks when the pool has threads.
    {{300, 257}, {257}, true},      {{300, 257}, {300, 1}, true},  {{300, 257}, {300, 257}, true},
    {{300, 257}, {}, true},         {{257}, {300, 257}, true},
};

}  // namespace

TEST_CASE("plan_broadcast takes the leading and trailing forms and leaves the others", "[fastpath]") {
    for (const Form& f : kForms) {
        INFO(shape_str(f.a) << " op " << shape_str(f.b));
        const Shape out = broadcast_shapes("test", f.a, f.b);
        const auto plan = plan_broadcast(f.a, f.b, out);
        CHECK(plan.has_value() == f.fast);
        if (!plan) continue;
        // Every element of each operand is read where broadcasting says.
        CHECK(plan->rows * plan->cols == checked_numel("test", out));
    }
    // A bias over a (batch, T, d) activation: rows are batch·T, the bias steps along columns.
    const auto p = plan_broadcast({4, 7, 3}, {3}, {4, 7, 3});
    REQUIRE(p);
    CHECK(p->rows == 28);
    CHECK(p->cols == 3);
    CHECK((p->a.row == 3 && p->a.col == 1 && p->b.row == 0 && p->b.col == 1));
    // A per-row statistic (m, 1) against (m, n).
    const auto q = plan_broadcast({5, 1}, {5, 9}, {5, 9});
    REQUIRE(q);
    CHECK((q->rows == 5 && q->cols == 9 && q->a.row == 1 && q->a.col == 0));
}

TEST_CASE("add sub mul div equal the generic path bit for bit and their gradients to its rounding", "[fastpath]") {
    for (const Form& f : kForms)
        for (Op op : {Op::add, Op::sub, Op::mul, Op::div})
            for (bool specials : {false, true}) {
                INFO(name(op) << " " << shape_str(f.a) << " with " << shape_str(f.b) << (specials ? " specials" : ""));
                check_against_generic<float>(op, f.a, f.b, specials);
                check_against_generic<double>(op, f.a, f.b, specials);
            }
}

TEST_CASE("the fast paths take permuted inputs and mixed dtypes as the generic path does", "[fastpath]") {
    // A permuted tensor is a fresh row-major array here: its values, in its own order, count.
    Tensor x = values_for({5, 6}, kFloat32, 4, true);
    Tensor xt_ = x.transpose(0, 1).requires_grad_(false);
    Tensor bias = values_for({5}, kFloat32, 5, false).requires_grad_();
    Tensor y = xt_ + bias;
    const auto& want = values<float>(xt_) + values<float>(bias);
    CHECK_SAME(values<float>(y), xt::xarray<float>(want));
    // float32 with float64 promotes (torch's rule), and then takes the float64 fast path.
    Tensor d = values_for({6, 5}, kFloat64, 6, false);
    Tensor mixed = xt_ * d;
    CHECK(mixed.dtype() == kFloat64);
    CHECK_SAME(values<double>(mixed), xt::xarray<double>(values<double>(xt_.to(kFloat64)) * values<double>(d)));
}

TEST_CASE("sum and mean over leading or trailing axes keep their contract and xtensor's values", "[fastpath]") {
    const std::vector<std::pair<Shape, std::vector<long>>> cases = {
        {{6, 5}, {}},      {{6, 5}, {0}},       {{6, 5}, {1}},      {{6, 5}, {-1}},   {{2, 3, 4}, {1, 2}},
        {{2, 3, 4}, {0, 1}}, {{2, 3, 4}, {1}},  {{2, 3, 4}, {0, 2}}, {{1, 5}, {0}},   {{5, 1}, {1}},
        {{0, 5}, {0}},     {{6, 0}, {1}},       {{}, {}},           {{300, 257}, {0}}, {{300, 257}, {1}},
        {{300, 257}, {}},
    };
    for (const auto& [shape, axes] : cases)
        for (bool keep : {false, true})
            for (bool specials : {false, true}) {
                INFO(shape_str(shape) << " axes " << axes.size() << (keep ? " keepdims" : "") << (specials ? " specials" : ""));
                auto run = [&](auto tag) {
                    using T = typename decltype(tag)::type;
                    Tensor x = values_for(shape, dtype_of<T>(), 7, specials).requires_grad_();
                    std::vector<std::size_t> ax;
                    for (long a : axes) ax.push_back(static_cast<std::size_t>(a < 0 ? a + long(shape.size()) : a));
                    if (axes.empty())
                        for (std::size_t i = 0; i < shape.size(); ++i) ax.push_back(i);
                    Shape kept = shape;
                    for (std::size_t a : ax) kept[a] = 1;
                    Tensor s = sum(x, axes, keep);
                    xt::xarray<T> got = values<T>(s);
                    got.reshape(kept);
                    const auto split = split_for(kept, shape);
                    const bool fast = split && steps_for(kept, shape, split->first, split->second);
                    CHECK_REDUCED(got, values<T>(x), kept, fast);
                    Tensor m = mean(x, axes, keep);
                    Tensor w = values_for(m.shape(), dtype_of<T>(), 8, false);
                    (m * w).sum().backward();
                    // mean's gradient: w / count, stretched back over the reduced axes.
                    std::size_t count = 1;
                    for (std::size_t a : ax) count *= shape[a];
                    xt::xarray<T> gw = values<T>(w);
                    gw.reshape(kept);
                    gw /= static_cast<T>(count);
                    CHECK_SAME(values<T>(x.grad()), xt::xarray<T>(xt::broadcast(gw, shape)));
                };
                run(type_tag<float>{});
                run(type_tag<double>{});
            }
}

TEST_CASE("relu and its gradient keep NaN, zero signs and infinities as the generic expression", "[fastpath]") {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{1}, Shape{7, 9}, Shape{300, 257}}) {
        INFO(shape_str(shape));
        auto run = [&](auto tag) {
            using T = typename decltype(tag)::type;
            Tensor x = values_for(shape, dtype_of<T>(), 9, true).requires_grad_();
            Tensor y = relu(x);
            Tensor w = values_for(shape, dtype_of<T>(), 10, true);
            (y * w).sum().backward();
            const auto& xv = values<T>(x);
            CHECK_SAME(values<T>(y), xt::xarray<T>(xt::where(xv <= T(0), T(0), xv)));
            CHECK_SAME(values<T>(x.grad()), xt::xarray<T>(xt::where(xv <= T(0), T(0), values<T>(w))));
        };
        run(type_tag<float>{});
        run(type_tag<double>{});
    }
    CHECK_THROWS_WITH(relu(tensor({true, false})), Catch::Contains("relu"));  // int64 stays int64, bool is refused (torch)
}

// Run by the next test in child processes with different XGRAD_NUM_THREADS: prints a digest of
// every fast path's results on tensors big enough to be split into chunks.
TEST_CASE("child: digest of the fast paths", "[.fastpath-child]") {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&](const Tensor& t) {
        const auto& v = values<float>(t);
        const auto* p = reinterpret_cast<const unsigned char*>(v.data());
        for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
    };
    const std::vector<Shape> others = {{300, 257}, {257}, {300, 1}, {}};
    for (const Shape& sb : others) {
        Tensor a = values_for({300, 257}, kFloat32, 11, false).requires_grad_();
        Tensor b = values_for(sb, kFloat32, 12, false).requires_grad_();
        Tensor ln_w = values_for({257}, kFloat32, 13, false).requires_grad_();
        Tensor ln_b = values_for({257}, kFloat32, 14, false).requires_grad_();
        Tensor y = layer_norm(relu(a * b + a / (b * b + 1.0f) - b), {257}, ln_w, ln_b);
        Tensor z = add_layer_norm(y, a, {257}, ln_w, ln_b);
        Tensor loss = (y * values_for(y.shape(), kFloat32, 15, false)).sum() + mean(a, {0}).sum() + sum(a, {1}).sum() +
                      (z * values_for(z.shape(), kFloat32, 16, false)).sum();
        loss.backward();
        for (const Tensor& t : {y, z, loss, a.grad(), b.grad(), ln_w.grad(), ln_b.grad()}) mix(t);
    }
    // The unary ops that evaluate an xtensor expression run by run over the pool, in both
    // floating dtypes: on 1 thread each is one run over the whole tensor.
    for (Dtype d : {kFloat32, kFloat64}) {
        const Tensor x = values_for({300, 257}, d, 17, false);
        const Tensor p = abs(x) + 0.5;
        for (const Tensor& t : {log(p), sqrt(p), sin(x), cos(x), pow(x, 3.0), pow(p, 1.7), pow(p, -0.5),
                                clamp(x, -0.3, 0.4), clamp(x, 0.4, -0.3), x * 0.37, x / 3.0, x + 1.25, -x, abs(x),
                                sign(x), 2.0 - x, 1.0 / p, exp(x), tanh(x), sigmoid(x), gelu(x)})
            for (double v : t.to(kFloat64).to_vector<double>()) {
                const auto* bytes = reinterpret_cast<const unsigned char*>(&v);
                for (std::size_t i = 0; i < sizeof v; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
            }
    }
    std::printf("digest=%016llx threads=%zu\n", static_cast<unsigned long long>(h), num_threads());
    std::fflush(stdout);
}

TEST_CASE("the fast paths give the same bits on 1 2 and 5 threads", "[fastpath]") {
    auto digest = [&](int threads) {
        const std::string out = test::run_this_binary("XGRAD_NUM_THREADS=" + std::to_string(threads), "[.fastpath-child]");
        const auto at = out.find("digest=");
        REQUIRE(at != std::string::npos);
        CHECK_THAT(out, Catch::Contains("threads=" + std::to_string(threads)));
        return out.substr(at, 23);
    };
    const std::string one = digest(1);
    CHECK(digest(2) == one);
    CHECK(digest(5) == one);
}
