#include "core/sequence_ops.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "core/autograd_function.hpp"
#include "core/broadcast.hpp"
#include "core/dispatch.hpp"
#include "core/error.hpp"
#include "core/node.hpp"
#include "core/ops.hpp"
#include "core/runtime/alloc.hpp"
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
        // a as (outer, n, inner) around the axis: slice i is the rows (o, i, ·), copied once.
        const std::size_t ax = static_cast<std::size_t>(axis), n = a.size(axis);
        Shape piece = a.shape();
        piece.erase(piece.begin() + static_cast<long>(ax));
        std::size_t outer = 1, inner = 1;
        for (std::size_t k = 0; k < a.dim(); ++k) (k < ax ? outer : inner) *= k == ax ? 1 : a.shape()[k];
        return dispatch_all(a.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            const T* src = std::get<xt::xarray<T>>(a.node().data).data();
            autograd::variable_list out;
            out.reserve(n);
            for (std::size_t i = 0; i < n; ++i) {
                xt::xarray<T> v = xt::xarray<T>::from_shape(piece);
                for (std::size_t o = 0; o < outer; ++o)
                    std::copy(src + (o * n + i) * inner, src + (o * n + i + 1) * inner, v.data() + o * inner);
                out.push_back(make_leaf(Storage(std::move(v))));
            }
            return out;
        });
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
    return Unbind::apply(a, axis);
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

// Runs f(b) for every batch row, split over the pool when the step is large enough.
template <class F> void for_rows(std::size_t B, std::size_t H, F&& f) {
    parallel_for(B, std::max<std::size_t>(1, kElementGrain / std::max<std::size_t>(H, 1)),
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
void tanh_n(const float* a, float* y, std::size_t n, float* u) {
    for (std::size_t k = 0; k < n; ++k) u[k] = 2.0f * std::abs(a[k]);
    vec::exp_shifted_sum(u, 0.0f, y, n);
    for (std::size_t k = 0; k < n; ++k) {
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

// One LSTM row: y = [h' | c'] (2H), s = [i | f | g | o | tanh(c')] (5H) from a's row g (4H).
template <class T> void lstm_row(const T* g, const T* c0, T* y, T* s, std::size_t H) {
    T* c1 = y + H;
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

Tensor gru_cell_backward(const Tensor& g, const Tensor& gi, const Tensor& gh, const Tensor& h, const Gates& gates);
Tensor lstm_cell_backward(const Tensor& G, const Tensor& a, const Tensor& c, const Gates& gates);

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
        for_rows(B, H, [&](std::size_t b) { lstm_row(pa + b * 4 * H, pc + b * H, po + b * 2 * H, ps + b * 5 * H, H); });
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
Tensor gru_cell_backward(const Tensor& g, const Tensor& gi, const Tensor& gh, const Tensor& h, const Gates& gates) {
    constexpr const char* op = "gru_cell_backward";
    const auto [B, H] = cell_dims(op, gi, 3, {{"gh", &gh, 3}, {"h", &h, 1}, {"gradient", &g, 1}});
    const AllocContext context(op, Shape{B, 7 * H});
    return dispatch_floating(op, gi.dtype(), [&, B = B, H = H](auto tag) {
        using T = typename decltype(tag)::type;
        const T *pg = values<T>(g).data(), *ph = values<T>(gh).data(), *px = values<T>(h).data();
        xt::xarray<T> out = xt::xarray<T>::from_shape({B, 7 * H});
        T* po = out.data();
        const T* ps = std::get<xt::xarray<T>>(*gates).data();
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
Tensor lstm_cell_backward(const Tensor& G, const Tensor& a, const Tensor& c, const Gates& gates) {
    constexpr const char* op = "lstm_cell_backward";
    const auto [B, H] = cell_dims(op, a, 4, {{"c", &c, 1}, {"gradient", &G, 2}});
    const AllocContext context(op, Shape{B, 5 * H});
    return dispatch_floating(op, a.dtype(), [&, B = B, H = H](auto tag) {
        using T = typename decltype(tag)::type;
        const T *pG = values<T>(G).data(), *pc = values<T>(c).data();
        xt::xarray<T> out = xt::xarray<T>::from_shape({B, 5 * H});
        T* po = out.data();
        const T* ps = std::get<xt::xarray<T>>(*gates).data();
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
