#include "core/sequence_ops.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "core/autograd_function.hpp"
#include "core/broadcast.hpp"
#include "core/dispatch.hpp"
#include "core/error.hpp"
#include "core/node.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/views.hpp"
#include "core/creation.hpp"
#include "core/runtime/alloc.hpp"
#include "core/runtime/blas.hpp"
#include "core/runtime/packed_gemm.hpp"
#include "core/runtime/parallel.hpp"
#include "core/runtime/vec_math.hpp"

namespace xgrad {

namespace {

// One node with a.size(axis) outputs: a custom Function, which the engine runs once with every
// output's gradient (materialised as zeros where none arrived).
struct Unbind : autograd::Function<Unbind> {
    static constexpr const char* name = "unbind";
    static autograd::variable_list forward(autograd::AutogradContext* ctx, const Tensor& a, long axis) {
        ctx->saved_data["axis"] = axis;
        // Views of a, one per index along the axis: nothing is copied.
        autograd::variable_list out;
        out.reserve(a.size(axis));
        for (std::int64_t i = 0; i < a.size(axis); ++i) out.push_back(select(a, axis, static_cast<long>(i)));
        return out;
    }
    static autograd::variable_list backward(autograd::AutogradContext* ctx, autograd::variable_list grads) {
        return {stack(grads, ctx->saved_data["axis"].get<long>()), Tensor()};
    }
};

}  // namespace

std::vector<Tensor> unbind(const Tensor& a, long axis) {
    if (!a.defined()) throw Error("unbind: the tensor is undefined");
    const long rank = static_cast<long>(a.dim());
    if (rank == 0 || axis < -rank || axis >= rank)
        throw Error(fmt::format("unbind: axis {} is out of range for a tensor of shape {}", axis, shape_str(a.shape())));
    if (axis < 0) axis += rank;
    if (a.size(axis) == 0) return {};
    if (a.dtype() == kBFloat16) check_no_bfloat16_graph("unbind", {a});  // as split: no bfloat16 gradient
    std::vector<Tensor> pieces = Unbind::apply(a, axis);
    for (Tensor& p : pieces) mark_multi_output_view(p);
    return pieces;
}

}  // namespace xgrad

// --- the fused GRU and LSTM steps ------------------------------------------------------------

namespace xgrad {

namespace {

// σ and tanh of one element, for float64 rows (float32 rows take sigmoid_n and tanh_n below, a
// SIMD pass per gate).
template <class T> T sigm(T x) { return T(1) / (T(1) + std::exp(-x)); }
template <class T> T tanh_of(T x) { return std::tanh(x); }

// An operand of a fused step other than its gates: its name, the tensor, its width in hiddens.
struct Operand {
    const char* name;
    const Tensor* tensor;
    std::size_t width;
};

// Checks the (batch, G·hidden) gates and the other operands (batch, width·hidden) of one dtype;
// returns (batch, hidden).
std::pair<std::size_t, std::size_t> cell_dims(const char* op, const Tensor& gates, std::size_t G,
                                              const std::vector<Operand>& operands) {
    if (!gates.defined() || gates.dim() != 2 || gates.size(1) % G != 0 || gates.size(1) == 0)
        throw Error(fmt::format("{}: gates must be (batch, {}·hidden), got {}", op, G,
                                gates.defined() ? shape_str(gates.shape()) : std::string("an undefined tensor")));
    const std::size_t B = gates.size(0), H = gates.size(1) / G;
    for (const auto& [name, t, multiple] : operands) {
        if (!t->defined()) throw Error(fmt::format("{}: {} is undefined", op, name));
        check_same_dtype(op, gates, *t);
        const std::size_t width = multiple * H;
        if (t->shape() != Shape{B, width})
            throw Error(fmt::format("{}: {} must have shape {}, got {}", op, name, shape_str(Shape{B, width}),
                                    shape_str(t->shape())));
    }
    return {B, H};
}

// Runs f(b) for every batch row, split over the pool when the step is large enough: a row
// evaluates σ or tanh on 3 or 4 gates of H, so a chunk of kElementGrain / 4 hidden units is
// about as much work as kElementGrain elements of a plain elementwise op.
template <class F> void for_rows(std::size_t B, std::size_t H, F&& f) {
    parallel_for(B, std::max<std::size_t>(1, kElementGrain / 4 / std::max<std::size_t>(H, 1)),
                 [&](std::size_t b0, std::size_t b1) {
                     for (std::size_t b = b0; b < b1; ++b) f(b);
                 });
}

// Scratch floats for one row of a step, per thread (the pool's threads each have their own).
float* scratch(std::size_t n) {
    thread_local std::vector<float> buf;
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}

// y[k] = σ(a[k]) for n floats, the exps as one SIMD pass (vec::exp_shifted_sum, within 2 ulp).
// u: n floats of scratch.
void sigmoid_n(const float* a, float* y, std::size_t n, float* u) {
    for (std::size_t k = 0; k < n; ++k) u[k] = -a[k];
    vec::exp_shifted_sum(u, 0.0f, y, n);
    for (std::size_t k = 0; k < n; ++k) y[k] = 1.0f / (1.0f + y[k]);
}

// y[k] = tanh(a[k]) for n floats, as Cephes' tanhf: its odd polynomial below |a| = 0.625 (no
// cancellation near 0), 1 − 2/(e^{2|a|} + 1) with a's sign above, the exps as one SIMD pass.
// u: n floats of scratch.
#if defined(__x86_64__) && defined(__GNUC__)
// tanh_n's last pass, 8 floats at a time where the CPU has AVX2: the same operations in the same
// order as the scalar loop (no FMA), so the same bits; returns how many it did. The scalar
// loop's select compiles to a branch, which kept it from vectorising.
__attribute__((target("avx2"))) std::size_t tanh_finish_avx2(const float* a, float* y, std::size_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    const __m256 edge = _mm256_set1_ps(0.625f);
    std::size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        const __m256 x = _mm256_loadu_ps(a + k), s = _mm256_mul_ps(x, x);
        __m256 p = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(-5.70498872745e-3f), s), _mm256_set1_ps(2.06390887954e-2f));
        p = _mm256_sub_ps(_mm256_mul_ps(p, s), _mm256_set1_ps(5.37397155531e-2f));
        p = _mm256_add_ps(_mm256_mul_ps(p, s), _mm256_set1_ps(1.33314422036e-1f));
        p = _mm256_sub_ps(_mm256_mul_ps(p, s), _mm256_set1_ps(3.33332819422e-1f));
        p = _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, s), x), x);
        const __m256 mag = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(_mm256_loadu_ps(y + k), one)));
        const __m256 big = _mm256_or_ps(_mm256_andnot_ps(sign, mag), _mm256_and_ps(sign, x));
        const __m256 small = _mm256_cmp_ps(_mm256_andnot_ps(sign, x), edge, _CMP_LT_OQ);
        _mm256_storeu_ps(y + k, _mm256_blendv_ps(big, p, small));
    }
    return k;
}
#endif

void tanh_n(const float* a, float* y, std::size_t n, float* u) {
    for (std::size_t k = 0; k < n; ++k) u[k] = 2.0f * std::abs(a[k]);
    vec::exp_shifted_sum(u, 0.0f, y, n);
    std::size_t done = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2) done = tanh_finish_avx2(a, y, n);
#endif
    for (std::size_t k = done; k < n; ++k) {
        const float x = a[k], s = x * x;
        const float poly = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s +
                             1.33314422036e-1f) * s - 3.33332819422e-1f) * s * x + x;
        const float big = std::copysign(1.0f - 2.0f / (y[k] + 1.0f), x);
        y[k] = std::abs(x) < 0.625f ? poly : big;
    }
}

// One GRU row: y = h' (H), s = [r | z | n] (3H) from gi's row i and gh's row j (3H each).
template <class T> void gru_row(const T* i, const T* j, const T* x, T* y, T* s, std::size_t H) {
    if constexpr (std::is_same_v<T, float>) {
        // pre: r's and z's pre-activations (2H); u: the σ and tanh scratch (2H); a: n's (H).
        float* pre = scratch(5 * H);
        float *u = pre + 2 * H, *a = pre + 4 * H;
        for (std::size_t k = 0; k < 2 * H; ++k) pre[k] = i[k] + j[k];
        sigmoid_n(pre, s, 2 * H, u);
        for (std::size_t k = 0; k < H; ++k) a[k] = i[2 * H + k] + s[k] * j[2 * H + k];
        tanh_n(a, s + 2 * H, H, u);
        for (std::size_t k = 0; k < H; ++k) y[k] = s[2 * H + k] + s[H + k] * (x[k] - s[2 * H + k]);
    } else {
        for (std::size_t k = 0; k < H; ++k) {
            const T r = sigm(i[k] + j[k]), z = sigm(i[H + k] + j[H + k]);
            const T n = tanh_of(i[2 * H + k] + r * j[2 * H + k]);
            y[k] = n + z * (x[k] - n);
            s[k] = r, s[H + k] = z, s[2 * H + k] = n;
        }
    }
}

// One LSTM row: h' into y, c' into c1 (H each), s = [i | f | g | o | tanh(c')] (5H) from a's row
// g (4H).
template <class T> void lstm_row(const T* g, const T* c0, T* y, T* c1, T* s, std::size_t H) {
    if constexpr (std::is_same_v<T, float>) {
        // i, f as one σ pass, o another (they are not adjacent in a), g and tanh(c') a tanh each.
        float* u = scratch(2 * H);
        sigmoid_n(g, s, 2 * H, u);
        sigmoid_n(g + 3 * H, s + 3 * H, H, u);
        tanh_n(g + 2 * H, s + 2 * H, H, u);
        for (std::size_t k = 0; k < H; ++k) c1[k] = s[H + k] * c0[k] + s[k] * s[2 * H + k];
        tanh_n(c1, s + 4 * H, H, u);
        for (std::size_t k = 0; k < H; ++k) y[k] = s[3 * H + k] * s[4 * H + k];
    } else {
        for (std::size_t k = 0; k < H; ++k) {
            const T i = sigm(g[k]), f = sigm(g[H + k]), cand = tanh_of(g[2 * H + k]), o = sigm(g[3 * H + k]);
            c1[k] = f * c0[k] + i * cand;
            const T tc = tanh_of(c1[k]);
            y[k] = o * tc;
            s[k] = i, s[H + k] = f, s[2 * H + k] = cand, s[3 * H + k] = o, s[4 * H + k] = tc;
        }
    }
}

Tensor block(const Tensor& t, std::size_t k, std::size_t H) {
    return slice(t, 1, static_cast<long>(k * H), static_cast<long>((k + 1) * H));
}

// The gate values a forward step computed, kept for its backward (made whenever the step records
// a graph), so that the backward evaluates no σ or tanh. Not a tensor of the graph: the
// backward's own gradient recomputes them from the inputs, whose version checks cover them.
using Gates = std::shared_ptr<const Storage>;

// Whether an op on `inputs` records a graph (and so will want its gates).
bool recording(const std::vector<const Tensor*>& inputs) {
    if (!grad_enabled()) return false;
    for (const Tensor* t : inputs)
        if (t->requires_grad()) return true;
    return false;
}

// The gates a forward step kept, or (none kept: a backward the fused sequence writes in ops)
// the same computed now by `compute` into a (B, width) buffer that `gates` then holds.
template <class T, class F> const T* gates_or_computed(Gates& gates, std::size_t B, std::size_t width, F&& compute) {
    if (!gates) {
        auto fresh = std::make_shared<Storage>(xt::xarray<T>::from_shape({B, width}));
        compute(std::get<xt::xarray<T>>(*fresh).data());
        gates = std::move(fresh);
    }
    return std::get<xt::xarray<T>>(*gates).data();
}

// The steps' backward ops (below); `gates` may be empty, and is then computed from the inputs.
Tensor gru_cell_backward(const Tensor& g, const Tensor& gi, const Tensor& gh, const Tensor& h, Gates gates);
Tensor lstm_cell_backward(const Tensor& G, const Tensor& a, const Tensor& c, Gates gates);

}  // namespace

Tensor gru_cell(const Tensor& gi, const Tensor& gh, const Tensor& h) {
    constexpr const char* op = "gru_cell";
    const auto [B, H] = cell_dims(op, gi, 3, {{"gh", &gh, 3}, {"h", &h, 1}});
    const AllocContext context(op, Shape{B, H});
    return dispatch_floating(op, gi.dtype(), [&, B = B, H = H](auto tag) {
        using T = typename decltype(tag)::type;
        const T *pi = values<T>(gi).data(), *ph = values<T>(gh).data(), *px = values<T>(h).data();
        xt::xarray<T> out = xt::xarray<T>::from_shape({B, H});
        T* po = out.data();
        // r, z, n: (batch, 3·hidden), kept for the backward when the step records a graph.
        auto gates = std::make_shared<Storage>(xt::xarray<T>::from_shape({B, 3 * H}));
        T* ps = std::get<xt::xarray<T>>(*gates).data();
        for_rows(B, H, [&](std::size_t b) {
            gru_row(pi + b * 3 * H, ph + b * 3 * H, px + b * H, po + b * H, ps + b * 3 * H, H);
        });
        const Gates saved = recording({&gi, &gh, &h}) ? Gates(std::move(gates)) : Gates();
        return make_result<T>(std::move(out), {gi, gh, h}, op, Formula([H = H, gates = saved](const GradArgs& in) -> std::vector<Tensor> {
            // [dgi | dgh | dh] from one pass.
            const Tensor P = gru_cell_backward(in.grad(), in.inputs[0], in.inputs[1], in.inputs[2], gates);
            auto part = [&](std::size_t from, std::size_t to) {
                return slice(P, 1, static_cast<long>(from * H), static_cast<long>(to * H));
            };
            return {in.needs(0) ? part(0, 3) : Tensor(), in.needs(1) ? part(3, 6) : Tensor(),
                    in.needs(2) ? part(6, 7) : Tensor()};
        }), Saves::only_inputs(7u));
    });
}

Tensor lstm_cell(const Tensor& a, const Tensor& c) {
    constexpr const char* op = "lstm_cell";
    const auto [B, H] = cell_dims(op, a, 4, {{"c", &c, 1}});
    const AllocContext context(op, Shape{B, 2 * H});
    return dispatch_floating(op, a.dtype(), [&, B = B, H = H](auto tag) {
        using T = typename decltype(tag)::type;
        const T *pa = values<T>(a).data(), *pc = values<T>(c).data();
        xt::xarray<T> out = xt::xarray<T>::from_shape({B, 2 * H});
        T* po = out.data();
        // i, f, g, o and tanh(c'): (batch, 5·hidden), kept for the backward when the step records.
        auto gates = std::make_shared<Storage>(xt::xarray<T>::from_shape({B, 5 * H}));
        T* ps = std::get<xt::xarray<T>>(*gates).data();
        for_rows(B, H, [&](std::size_t b) {
            lstm_row(pa + b * 4 * H, pc + b * H, po + b * 2 * H, po + b * 2 * H + H, ps + b * 5 * H, H);
        });
        const Gates saved = recording({&a, &c}) ? Gates(std::move(gates)) : Gates();
        return make_result<T>(std::move(out), {a, c}, op, Formula([H = H, gates = saved](const GradArgs& in) -> std::vector<Tensor> {
            // [da | dc] from one pass.
            const Tensor P = lstm_cell_backward(in.grad(), in.inputs[0], in.inputs[1], gates);
            return {in.needs(0) ? slice(P, 1, 0, static_cast<long>(4 * H)) : Tensor(),
                    in.needs(1) ? slice(P, 1, static_cast<long>(4 * H), static_cast<long>(5 * H)) : Tensor()};
        }), Saves::only_inputs(3u));
    });
}

namespace {

// gru_cell's gradients, packed (batch, 7·hidden): [dgi (3) | dgh (3) | dh (1)], with
//   D = g(1 − z)(1 − n²),  dgi = [D·gh_n·r(1 − r), g(h − n)·z(1 − z), D],
//   dgh = dgi with its n block times r,  dh = g·z.
// Its own gradient (second order) is composed from differentiable ops: for incoming Q split as
// Qi, Qh, Qd, the scalar Σ Q⊙P is D·K + Bz·g(h − n)s_z + Qd·g·z with A = Qi_r + Qh_r,
// Bz = Qi_z + Qh_z, K = A·gh_n·s_r + Qi_n + Qh_n·r, s_r = r(1 − r), s_z = z(1 − z); its partial
// derivatives follow, chained through n = tanh(gi_n + r·gh_n), r and z.
Tensor gru_cell_backward(const Tensor& g, const Tensor& gi, const Tensor& gh, const Tensor& h, Gates gates) {
    constexpr const char* op = "gru_cell_backward";
    const auto [B, H] = cell_dims(op, gi, 3, {{"gh", &gh, 3}, {"h", &h, 1}, {"gradient", &g, 1}});
    const AllocContext context(op, Shape{B, 7 * H});
    return dispatch_floating(op, gi.dtype(), [&, B = B, H = H](auto tag) {
        using T = typename decltype(tag)::type;
        const T *pg = values<T>(g).data(), *ph = values<T>(gh).data(), *px = values<T>(h).data();
        xt::xarray<T> out = xt::xarray<T>::from_shape({B, 7 * H});
        T* po = out.data();
        const T* ps = gates_or_computed<T>(gates, B, 3 * H, [&](T* s) {
            const T* pi = values<T>(gi).data();
            std::vector<T> y(H);
            for (std::size_t b = 0; b < B; ++b)
                gru_row(pi + b * 3 * H, ph + b * 3 * H, px + b * H, y.data(), s + b * 3 * H, H);
        });
        for_rows(B, H, [&](std::size_t b) {
            const T *j = ph + b * 3 * H, *x = px + b * H, *gb = pg + b * H;
            T* d = po + b * 7 * H;
            for (std::size_t k = 0; k < H; ++k) {
                const T* s = ps + b * 3 * H;
                const T r = s[k], z = s[H + k], n = s[2 * H + k];
                const T D = gb[k] * (T(1) - z) * (T(1) - n * n);
                const T dr = D * j[2 * H + k] * r * (T(1) - r), dz = gb[k] * (x[k] - n) * z * (T(1) - z);
                d[k] = dr;
                d[H + k] = dz;
                d[2 * H + k] = D;
                d[3 * H + k] = dr;
                d[4 * H + k] = dz;
                d[5 * H + k] = D * r;
                d[6 * H + k] = gb[k] * z;
            }
        });
        return make_result<T>(std::move(out), {g, gi, gh, h}, op, Formula([H = H](const GradArgs& in) -> std::vector<Tensor> {
            const Tensor &g = in.inputs[0], &gi = in.inputs[1], &gh = in.inputs[2], &h = in.inputs[3], &Q = in.grad();
            const Tensor r = sigmoid(block(gi, 0, H) + block(gh, 0, H)), z = sigmoid(block(gi, 1, H) + block(gh, 1, H));
            const Tensor hn = block(gh, 2, H);
            const Tensor n = tanh(block(gi, 2, H) + r * hn);
            const Tensor sr = r * (1.0 - r), sz = z * (1.0 - z), tn = 1.0 - n * n;
            const Tensor D = g * (1.0 - z) * tn;
            const Tensor A = block(Q, 0, H) + block(Q, 3, H), Bz = block(Q, 1, H) + block(Q, 4, H);
            const Tensor Qi_n = block(Q, 2, H), Qh_n = block(Q, 5, H), Qd = block(Q, 6, H);
            const Tensor K = A * hn * sr + Qi_n + Qh_n * r;
            const Tensor dg = K * (1.0 - z) * tn + Bz * (h - n) * sz + Qd * z;
            const Tensor dh = Bz * g * sz;
            const Tensor dhn_direct = D * A * sr;
            const Tensor dn = K * (-2.0) * g * (1.0 - z) * n - Bz * g * sz;
            const Tensor da_n = dn * tn;
            const Tensor dr = D * (A * hn * (1.0 - 2.0 * r) + Qh_n) + da_n * hn;
            const Tensor dz = -(K * g * tn) + Bz * g * (h - n) * (1.0 - 2.0 * z) + Qd * g;
            const Tensor da_r = dr * sr, da_z = dz * sz;
            return {in.needs(0) ? dg : Tensor(), in.needs(1) ? concat({da_r, da_z, da_n}, 1) : Tensor(),
                    in.needs(2) ? concat({da_r, da_z, da_n * r + dhn_direct}, 1) : Tensor(),
                    in.needs(3) ? dh : Tensor()};
        }), Saves::all());
    });
}

// lstm_cell's gradients, packed (batch, 5·hidden): [da (4) | dc (1)] for G = [Gh | Gc], with
//   tc = tanh(c'),  dc' = Gc + Gh·o(1 − tc²),
//   da = [dc'·g·s_i, dc'·c·s_f, dc'·i(1 − g²), Gh·tc·s_o],  dc = dc'·f.
// Its own gradient is composed: Σ Q⊙P = dc'·M + Qo·Gh·tc·s_o with
// M = Qi·g·s_i + Qf·c·s_f + Qg·i·(1 − g²) + Qc·f, differentiated through c' = f·c + i·g.
Tensor lstm_cell_backward(const Tensor& G, const Tensor& a, const Tensor& c, Gates gates) {
    constexpr const char* op = "lstm_cell_backward";
    const auto [B, H] = cell_dims(op, a, 4, {{"c", &c, 1}, {"gradient", &G, 2}});
    const AllocContext context(op, Shape{B, 5 * H});
    return dispatch_floating(op, a.dtype(), [&, B = B, H = H](auto tag) {
        using T = typename decltype(tag)::type;
        const T *pG = values<T>(G).data(), *pc = values<T>(c).data();
        xt::xarray<T> out = xt::xarray<T>::from_shape({B, 5 * H});
        T* po = out.data();
        const T* ps = gates_or_computed<T>(gates, B, 5 * H, [&](T* s) {
            const T* pa = values<T>(a).data();
            std::vector<T> y(2 * H);
            for (std::size_t b = 0; b < B; ++b)
                lstm_row(pa + b * 4 * H, pc + b * H, y.data(), y.data() + H, s + b * 5 * H, H);
        });
        for_rows(B, H, [&](std::size_t b) {
            const T *c0 = pc + b * H, *Gh = pG + b * 2 * H, *Gc = Gh + H;
            T* d = po + b * 5 * H;
            for (std::size_t k = 0; k < H; ++k) {
                const T* s = ps + b * 5 * H;
                const T i = s[k], f = s[H + k], cand = s[2 * H + k], o = s[3 * H + k], tc = s[4 * H + k];
                const T dc1 = Gc[k] + Gh[k] * o * (T(1) - tc * tc);
                d[k] = dc1 * cand * i * (T(1) - i);
                d[H + k] = dc1 * c0[k] * f * (T(1) - f);
                d[2 * H + k] = dc1 * i * (T(1) - cand * cand);
                d[3 * H + k] = Gh[k] * tc * o * (T(1) - o);
                d[4 * H + k] = dc1 * f;
            }
        });
        return make_result<T>(std::move(out), {G, a, c}, op, Formula([H = H](const GradArgs& in) -> std::vector<Tensor> {
            const Tensor &G = in.inputs[0], &a = in.inputs[1], &c = in.inputs[2], &Q = in.grad();
            const Tensor i = sigmoid(block(a, 0, H)), f = sigmoid(block(a, 1, H)), cand = tanh(block(a, 2, H)),
                         o = sigmoid(block(a, 3, H));
            const Tensor si = i * (1.0 - i), sf = f * (1.0 - f), so = o * (1.0 - o), tg = 1.0 - cand * cand;
            const Tensor Gh = block(G, 0, H), Gc = block(G, 1, H);
            const Tensor tc = tanh(f * c + i * cand), ttc = 1.0 - tc * tc;
            const Tensor dc1 = Gc + Gh * o * ttc;
            const Tensor Qi = block(Q, 0, H), Qf = block(Q, 1, H), Qg = block(Q, 2, H), Qo = block(Q, 3, H),
                         Qc = block(Q, 4, H);
            const Tensor M = Qi * cand * si + Qf * c * sf + Qg * i * tg + Qc * f;
            const Tensor dGc = M, dGh = M * o * ttc + Qo * tc * so;
            const Tensor dtc = M * (-2.0) * Gh * o * tc + Qo * Gh * so;
            const Tensor dc_next = dtc * ttc;
            const Tensor do_ = M * Gh * ttc + Qo * Gh * tc * (1.0 - 2.0 * o);
            const Tensor di = dc1 * (Qi * cand * (1.0 - 2.0 * i) + Qg * tg) + dc_next * cand;
            const Tensor df = dc1 * (Qf * c * (1.0 - 2.0 * f) + Qc) + dc_next * c;
            const Tensor dcand = dc1 * (Qi * si + Qg * i * (-2.0) * cand) + dc_next * i;
            const Tensor dc = dc1 * Qf * sf + dc_next * f;
            return {in.needs(0) ? concat({dGh, dGc}, 1) : Tensor(),
                    in.needs(1) ? concat({di * si, df * sf, dcand * tg, do_ * so}, 1) : Tensor(),
                    in.needs(2) ? dc : Tensor()};
        }), Saves::all());
    });
}

}  // namespace

}  // namespace xgrad

// --- the fused GRU and LSTM sequences ------------------------------------------------------

namespace xgrad {

namespace {

// What a sequence's forward keeps for its fast backward, all indexed by the time t of the step
// that reads them: P (T, B, H) the state h each step starts from, C (T, B, H) LSTM's c, S the
// gates (GRU r, z, n: 3H; LSTM i, f, g, o, tanh(c'): 5H), N (T, B, H) GRU's hidden part of n,
// W_hn·h + b_hn.
struct SequenceWork {
    Storage P, C, S, N;
};

// The sizes of one call, checked.
struct SequenceDims {
    std::size_t T, B, H, G;
};

SequenceDims sequence_dims(const char* op, SequenceCell cell, const Tensor& xi, const Tensor& h0, const Tensor& c0,
                           const Tensor& w_hh, const Tensor& b_hh, const std::vector<std::int64_t>& lengths) {
    const std::size_t G = cell == SequenceCell::gru ? 3 : 4;
    if (!xi.defined() || xi.dim() != 3 || xi.size(2) % G != 0 || xi.size(2) == 0)
        throw Error(fmt::format("{}: xi must be (T, batch, {}·hidden), got {}", op, G,
                                xi.defined() ? shape_str(xi.shape()) : std::string("an undefined tensor")));
    const std::size_t T = xi.size(0), B = xi.size(1), H = xi.size(2) / G;
    if (T == 0) throw Error(fmt::format("{}: xi has no steps (T = 0)", op));
    auto check = [&](const char* name, const Tensor& t, const Shape& shape) {
        if (!t.defined()) throw Error(fmt::format("{}: {} is undefined", op, name));
        check_same_dtype(op, xi, t);
        if (t.shape() != shape)
            throw Error(fmt::format("{}: {} must have shape {}, got {}", op, name, shape_str(shape), shape_str(t.shape())));
    };
    check("h0", h0, {B, H});
    if (cell == SequenceCell::lstm) check("c0", c0, {B, H});
    else if (c0.defined()) throw Error(fmt::format("{}: a GRU has no c0, got one", op));
    check("w_hh", w_hh, {G * H, H});
    if (b_hh.defined()) check("b_hh", b_hh, {G * H});
    if (!lengths.empty()) {
        if (lengths.size() != B)
            throw Error(fmt::format("{}: lengths must give one per batch row ({}), got {}", op, B, lengths.size()));
        for (std::size_t b = 0; b < B; ++b)
            if (lengths[b] < 0 || lengths[b] > static_cast<std::int64_t>(T))
                throw Error(fmt::format("{}: lengths[{}] = {} is outside [0, {}]", op, b, lengths[b], T));
    }
    return {T, B, H, G};
}

// The per-step product by W_hh, C (=|+=) A·op(W) with A m×k: float32 through W packed once for
// all steps (runtime/packed_gemm.hpp) where the CPU runs that kernel, else through blas::gemm.
template <class E> class StepProduct {
public:
    StepProduct(const E* w, bool transpose, std::size_t k, std::size_t n)
        : m_w(w), m_transpose(transpose), m_k(k), m_n(n) {
        if constexpr (std::is_same_v<E, float>)
            if (PackedMatrix::available()) m_packed.emplace(w, transpose ? k : n, transpose, k, n);
    }
    void operator()(const E* a, std::size_t m, E* c, bool accumulate) const {
        if constexpr (std::is_same_v<E, float>)
            if (m_packed) return m_packed->multiply(a, m_k, m, c, m_n, accumulate);
        blas::gemm<E>(false, m_transpose, m, m_n, m_k, E(1), a, m_k, m_w, m_transpose ? m_k : m_n,
                      accumulate ? E(1) : E(0), c, m_n);
    }

private:
    const E* m_w;
    bool m_transpose;
    std::size_t m_k, m_n;
    std::optional<PackedMatrix> m_packed;
};

// Whether row b runs the step at time t.
inline bool runs(const std::vector<std::int64_t>& lengths, std::size_t b, std::size_t t) {
    return lengths.empty() || static_cast<std::int64_t>(t) < lengths[b];
}

// The forward pass: {output, h_n, c_n (LSTM)}, and the work for the backward when `work` is
// given. Per step: gh = h·W_hhᵀ (one product for all gates), then each row's fused gates.
template <class E>
std::vector<Tensor> sequence_forward(SequenceCell cell, const SequenceDims& d, const Tensor& xi, const Tensor& h0,
                                     const Tensor& c0, const Tensor& w_hh, const Tensor& b_hh,
                                     const std::vector<std::int64_t>& lengths, bool reverse, SequenceWork* work) {
    const auto [T, B, H, G] = d;
    const bool lstm = cell == SequenceCell::lstm;
    const E *X = values<E>(xi).data(), *W = values<E>(w_hh).data();
    const E* bias = b_hh.defined() ? values<E>(b_hh).data() : nullptr;
    xt::xarray<E> Y = xt::xarray<E>::from_shape({T, B, H}), hn = xt::xarray<E>::from_shape({B, H});
    xt::xarray<E> cn = xt::xarray<E>::from_shape({lstm ? B : 0, H});
    xt::xarray<E> P = xt::xarray<E>::from_shape({T, B, H}), C = xt::xarray<E>::from_shape({lstm ? T : 0, B, H});
    xt::xarray<E> S = xt::xarray<E>::from_shape({T, B, (lstm ? 5 : 3) * H});
    xt::xarray<E> N = xt::xarray<E>::from_shape({lstm ? 0 : T, B, H});
    std::vector<E> gh(B * G * H);
    const std::size_t BH = B * H, first = reverse ? T - 1 : 0;
    const StepProduct<E> hidden_product(W, true, H, G * H);
    std::copy_n(values<E>(h0).data(), BH, P.data() + first * BH);
    if (lstm) std::copy_n(values<E>(c0).data(), BH, C.data() + first * BH);
    for (std::size_t s = 0; s < T && B > 0; ++s) {
        const std::size_t t = reverse ? T - 1 - s : s, next = reverse ? t - 1 : t + 1;
        const bool last = s + 1 == T;
        const E* h = P.data() + t * BH;
        E* h1 = last ? hn.data() : P.data() + next * BH;
        E* y = Y.data() + t * BH;
        // gh = h·W_hhᵀ : (B, H)·(H, G·H) → (B, G·H)
        hidden_product(h, B, gh.data(), false);
        if (lstm) {
            const E* c = C.data() + t * BH;
            E* c1 = last ? cn.data() : C.data() + next * BH;
            for_rows(B, H, [&](std::size_t b) {
                if (!runs(lengths, b, t)) {
                    std::copy_n(h + b * H, H, h1 + b * H);
                    std::copy_n(c + b * H, H, c1 + b * H);
                    std::fill_n(y + b * H, H, E(0));
                    return;
                }
                // a = xi + gh, the pre-activations of the four gates (b_hh is in xi)
                E* a = gh.data() + b * 4 * H;
                const E* x = X + (t * B + b) * 4 * H;
                if (bias)
                    for (std::size_t k = 0; k < 4 * H; ++k) a[k] = x[k] + (a[k] + bias[k]);
                else
                    for (std::size_t k = 0; k < 4 * H; ++k) a[k] = x[k] + a[k];
                lstm_row(a, c + b * H, h1 + b * H, c1 + b * H, S.data() + (t * B + b) * 5 * H, H);
                std::copy_n(h1 + b * H, H, y + b * H);
            });
        } else {
            for_rows(B, H, [&](std::size_t b) {
                if (!runs(lengths, b, t)) {
                    std::copy_n(h + b * H, H, h1 + b * H);
                    std::fill_n(y + b * H, H, E(0));
                    return;
                }
                E* j = gh.data() + b * 3 * H;
                if (bias)
                    for (std::size_t k = 0; k < 3 * H; ++k) j[k] += bias[k];
                gru_row(X + (t * B + b) * 3 * H, j, h + b * H, h1 + b * H, S.data() + (t * B + b) * 3 * H, H);
                std::copy_n(j + 2 * H, H, N.data() + (t * B + b) * H);
                std::copy_n(h1 + b * H, H, y + b * H);
            });
        }
    }
    if (work) *work = SequenceWork{std::move(P), std::move(C), std::move(S), std::move(N)};
    std::vector<Tensor> out{make_leaf(Storage(std::move(Y))), make_leaf(Storage(std::move(hn)))};
    if (lstm) out.push_back(make_leaf(Storage(std::move(cn))));
    return out;
}

// The first-order backward from the work: {dxi, dh0, dc0, dw_hh, db_hh} (dc0 and db_hh undefined
// when there is no c0 or b_hh). One pass back over the steps: each row's gate gradients, then
// dh = dh_direct + dG·W_hh (one product per step); dW_hh = Σ_t dG_tᵀ·h_t as one product over
// the stacked steps at the end, db_hh the column sums of dG.
template <class E>
std::vector<Tensor> sequence_backward(SequenceCell cell, const SequenceDims& d, const SequenceWork& work,
                                      const Tensor& w_hh, bool has_bias, const std::vector<std::int64_t>& lengths,
                                      bool reverse, const std::vector<Tensor>& grads) {
    const auto [T, B, H, G] = d;
    const bool lstm = cell == SequenceCell::lstm;
    const std::size_t GH = G * H;
    const E* W = values<E>(w_hh).data();
    const E *P = std::get<xt::xarray<E>>(work.P).data(), *S = std::get<xt::xarray<E>>(work.S).data();
    const E* C = lstm ? std::get<xt::xarray<E>>(work.C).data() : nullptr;
    const E* N = lstm ? nullptr : std::get<xt::xarray<E>>(work.N).data();
    auto grad_or_zeros = [&](std::size_t i, const Shape& shape) {
        return i < grads.size() && grads[i].defined() ? xt::xarray<E>(values<E>(grads[i]))
                                                      : xt::xarray<E>(xt::zeros<E>(shape));
    };
    // The output's gradient is read in place (the states' are copied: the pass updates them).
    const bool output_grad = !grads.empty() && grads[0].defined();
    const xt::xarray<E> no_output_grad = output_grad ? xt::xarray<E>() : xt::xarray<E>(xt::zeros<E>({T, B, H}));
    const E* gY = output_grad ? values<E>(grads[0]).data() : no_output_grad.data();
    xt::xarray<E> dh = grad_or_zeros(1, {B, H});
    xt::xarray<E> dc = lstm ? grad_or_zeros(2, {B, H}) : xt::xarray<E>();
    // dX: the gradient of xi; dG: of the hidden part gh (for LSTM the same).
    xt::xarray<E> dX = xt::xarray<E>::from_shape({T, B, GH});
    xt::xarray<E> dGh = lstm ? xt::xarray<E>() : xt::xarray<E>::from_shape({T, B, GH});
    E* dG = lstm ? dX.data() : dGh.data();
    const StepProduct<E> back_product(W, false, GH, H);
    for (std::size_t s = 0; s < T && B > 0; ++s) {
        const std::size_t t = reverse ? s : T - 1 - s;
        for_rows(B, H, [&](std::size_t b) {
            const std::size_t row = t * B + b;
            E* dx = dX.data() + row * GH;
            E* dg = dG + row * GH;
            E* dhb = dh.data() + b * H;
            if (!runs(lengths, b, t)) {  // the state passed through: dh and dc as they are
                std::fill_n(dx, GH, E(0));
                if (!lstm) std::fill_n(dg, GH, E(0));
                return;
            }
            const E* gy = gY + row * H;
            if (lstm) {
                const E *sg = S + row * 5 * H, *c0 = C + row * H;
                E* dcb = dc.data() + b * H;
                for (std::size_t k = 0; k < H; ++k) {
                    const E i = sg[k], f = sg[H + k], cand = sg[2 * H + k], o = sg[3 * H + k], tc = sg[4 * H + k];
                    const E gh = gy[k] + dhb[k];
                    const E dc1 = dcb[k] + gh * o * (E(1) - tc * tc);
                    dx[k] = dc1 * cand * i * (E(1) - i);
                    dx[H + k] = dc1 * c0[k] * f * (E(1) - f);
                    dx[2 * H + k] = dc1 * i * (E(1) - cand * cand);
                    dx[3 * H + k] = gh * tc * o * (E(1) - o);
                    dcb[k] = dc1 * f;
                    dhb[k] = E(0);
                }
            } else {
                const E *sg = S + row * 3 * H, *x = P + row * H, *hn = N + row * H;
                for (std::size_t k = 0; k < H; ++k) {
                    const E r = sg[k], z = sg[H + k], n = sg[2 * H + k];
                    const E g = gy[k] + dhb[k];
                    const E D = g * (E(1) - z) * (E(1) - n * n);
                    const E dr = D * hn[k] * r * (E(1) - r), dz = g * (x[k] - n) * z * (E(1) - z);
                    dx[k] = dg[k] = dr;
                    dx[H + k] = dg[H + k] = dz;
                    dx[2 * H + k] = D;
                    dg[2 * H + k] = D * r;
                    dhb[k] = g * z;
                }
            }
        });
        // dh += dG_t·W_hh : (B, G·H)·(G·H, H) → (B, H)
        back_product(dG + t * B * GH, B, dh.data(), true);
    }
    xt::xarray<E> dW = xt::zeros<E>({GH, H});
    // dW_hh = dGᵀ·P : (G·H, T·B)·(T·B, H) → (G·H, H), every step in one product
    if (T * B > 0) blas::gemm<E>(true, false, GH, H, T * B, E(1), dG, GH, P, H, E(0), dW.data(), H);
    Tensor db;
    if (has_bias) {
        xt::xarray<E> sum_g = xt::zeros<E>({GH});
        for (std::size_t row = 0; row < T * B; ++row)
            for (std::size_t k = 0; k < GH; ++k) sum_g.data()[k] += dG[row * GH + k];
        db = make_leaf(Storage(std::move(sum_g)));
    }
    return {make_leaf(Storage(std::move(dX))), make_leaf(Storage(std::move(dh))),
            lstm ? make_leaf(Storage(std::move(dc))) : Tensor(), make_leaf(Storage(std::move(dW))), db};
}

// The same backward in differentiable ops, for create_graph: the forward recomputed step by
// step from the inputs (with their graphs), then back over the steps through the steps'
// backward ops (gru_cell_backward, lstm_cell_backward), whose own formulas differentiate again.
std::vector<Tensor> sequence_backward_in_ops(SequenceCell cell, const SequenceDims& d, const Tensor& xi,
                                             const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                                             const Tensor& b_hh, const std::vector<std::int64_t>& lengths,
                                             bool reverse, const std::vector<Tensor>& grads) {
    const auto [T, B, H, G] = d;
    const bool lstm = cell == SequenceCell::lstm;
    const long Hl = static_cast<long>(H), GHl = static_cast<long>(G * H);
    const std::vector<Tensor> xs = unbind(xi, 0);
    // run[t]: (B, 1) bool, which rows run step t (only when some stop early).
    std::vector<Tensor> run;
    if (!lengths.empty()) {
        std::vector<std::int64_t> len = lengths;
        const Tensor len_col = reshape(from_vector(len, {B}), {static_cast<long>(B), 1});
        for (std::size_t t = 0; t < T; ++t) run.push_back(gt(len_col, static_cast<std::int64_t>(t)));
    }
    // Forward again: the step inputs (gh or a) and the states each step starts from.
    std::vector<Tensor> pre(T), hp(T), cp(T);
    Tensor h = h0, c = c0;
    for (std::size_t s = 0; s < T; ++s) {
        const std::size_t t = reverse ? T - 1 - s : s;
        hp[t] = h;
        cp[t] = c;
        Tensor gh = matmul_t(h, w_hh, false, true);
        if (b_hh.defined()) gh = gh + b_hh;
        Tensor h1, c1;
        if (lstm) {
            pre[t] = xs[t] + gh;
            const Tensor hc = lstm_cell(pre[t], c);
            h1 = slice(hc, 1, 0, Hl);
            c1 = slice(hc, 1, Hl, 2 * Hl);
        } else {
            pre[t] = gh;
            h1 = gru_cell(xs[t], gh, h);
        }
        h = run.empty() ? h1 : where(run[t], h1, h);
        if (lstm) c = run.empty() ? c1 : where(run[t], c1, c);
    }
    // Back over the steps.
    const std::vector<Tensor> gY = unbind(grads[0], 0);
    Tensor dh = grads[1], dc = lstm ? grads[2] : Tensor();
    const Tensor zero = zeros({B, H}, xi.dtype());
    std::vector<Tensor> dxs(T);
    Tensor dW, db;
    for (std::size_t s = 0; s < T; ++s) {
        const std::size_t t = reverse ? s : T - 1 - s;
        Tensor g = gY[t] + dh;
        if (!run.empty()) g = where(run[t], g, zero);
        Tensor dgh, dh_direct;
        if (lstm) {
            const Tensor gc = run.empty() ? dc : where(run[t], dc, zero);
            const Tensor Pg = lstm_cell_backward(concat({g, gc}, 1), pre[t], cp[t], Gates());
            dgh = slice(Pg, 1, 0, GHl);
            dxs[t] = dgh;
            const Tensor dc_step = slice(Pg, 1, GHl, GHl + Hl);
            dc = run.empty() ? dc_step : where(run[t], dc_step, dc);
            dh_direct = run.empty() ? Tensor() : where(run[t], zero, dh);
        } else {
            const Tensor Pg = gru_cell_backward(g, xs[t], pre[t], hp[t], Gates());
            dxs[t] = slice(Pg, 1, 0, GHl);
            dgh = slice(Pg, 1, GHl, 2 * GHl);
            dh_direct = slice(Pg, 1, 2 * GHl, 2 * GHl + Hl);
            if (!run.empty()) dh_direct = where(run[t], dh_direct, dh);
        }
        const Tensor back = matmul(dgh, w_hh);  // (B, G·H)·(G·H, H)
        dh = dh_direct.defined() ? dh_direct + back : back;
        const Tensor dW_t = matmul_t(dgh, hp[t], true, false);  // (G·H, B)·(B, H)
        dW = dW.defined() ? dW + dW_t : dW_t;
        if (b_hh.defined()) {
            const Tensor db_t = sum(dgh, std::vector<long>{0});
            db = db.defined() ? db + db_t : db_t;
        }
    }
    return {stack(dxs, 0), dh, dc, dW, db};
}

struct RecurrentSequence : autograd::Function<RecurrentSequence> {
    static constexpr const char* name = "recurrent_sequence";
    static autograd::variable_list forward(autograd::AutogradContext* ctx, SequenceCell cell, const Tensor& xi,
                                           const Tensor& h0, const std::optional<Tensor>& c0, const Tensor& w_hh,
                                           const std::optional<Tensor>& b_hh, const std::vector<std::int64_t>& lengths,
                                           bool reverse) {
        const Tensor c = c0 ? *c0 : Tensor(), b = b_hh ? *b_hh : Tensor();
        const SequenceDims d = sequence_dims(name, cell, xi, h0, c, w_hh, b, lengths);
        bool records = false;
        for (std::size_t i = 0; i < 3u + (c0 ? 1u : 0u) + (b_hh ? 1u : 0u); ++i) records = records || ctx->needs_input_grad(i);
        const AllocContext context(name, Shape{d.T, d.B, d.G * d.H});
        auto work = records ? std::make_shared<SequenceWork>() : nullptr;
        std::vector<Tensor> out = dispatch_floating(name, xi.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            return sequence_forward<T>(cell, d, xi, h0, c, w_hh, b, lengths, reverse, work.get());
        });
        if (records) {
            ctx->save_for_backward({xi, h0, c, w_hh, b});
            ctx->saved_data["work"] = std::shared_ptr<const SequenceWork>(std::move(work));
            ctx->saved_data["cell"] = static_cast<std::int64_t>(cell);
            ctx->saved_data["lengths"] = lengths;
            ctx->saved_data["reverse"] = reverse;
        }
        return out;
    }
    static autograd::variable_list backward(autograd::AutogradContext* ctx, autograd::variable_list grads) {
        const std::vector<Tensor> saved = ctx->get_saved_variables();
        const Tensor &xi = saved[0], &h0 = saved[1], &c0 = saved[2], &w_hh = saved[3], &b_hh = saved[4];
        const auto cell = static_cast<SequenceCell>(ctx->saved_data["cell"].to_int());
        const std::vector<std::int64_t> lengths = ctx->saved_data["lengths"].to_int_list();
        const bool reverse = ctx->saved_data["reverse"].to_bool();
        const SequenceDims d = sequence_dims(name, cell, xi, h0, c0, w_hh, b_hh, lengths);
        std::vector<Tensor> g;
        if (grad_enabled()) {
            g = sequence_backward_in_ops(cell, d, xi, h0, c0, w_hh, b_hh, lengths, reverse, grads);
        } else {
            const auto work = ctx->saved_data["work"].get<std::shared_ptr<const SequenceWork>>();
            const AllocContext context("recurrent_sequence backward", Shape{d.T, d.B, d.G * d.H});
            g = dispatch_floating(name, xi.dtype(), [&](auto tag) {
                using T = typename decltype(tag)::type;
                return sequence_backward<T>(cell, d, *work, w_hh, b_hh.defined(), lengths, reverse, grads);
            });
        }
        // One per argument of forward: cell, xi, h0, c0, w_hh, b_hh, lengths, reverse.
        return {Tensor(), ctx->needs_input_grad(0) ? g[0] : Tensor(), ctx->needs_input_grad(1) ? g[1] : Tensor(),
                c0.defined() && ctx->needs_input_grad(2) ? g[2] : Tensor(),
                ctx->needs_input_grad(c0.defined() ? 3 : 2) ? g[3] : Tensor(),
                b_hh.defined() && ctx->needs_input_grad(c0.defined() ? 4 : 3) ? g[4] : Tensor(), Tensor(), Tensor()};
    }
};

}  // namespace

std::vector<Tensor> recurrent_sequence(SequenceCell cell, const Tensor& xi, const Tensor& h0, const Tensor& c0,
                                       const Tensor& w_hh, const Tensor& b_hh,
                                       const std::vector<std::int64_t>& lengths, bool reverse) {
    sequence_dims("recurrent_sequence", cell, xi, h0, c0, w_hh, b_hh, lengths);
    return RecurrentSequence::apply(cell, xi, h0, c0.defined() ? std::optional<Tensor>(c0) : std::nullopt, w_hh,
                                    b_hh.defined() ? std::optional<Tensor>(b_hh) : std::nullopt, lengths, reverse);
}

}  // namespace xgrad
