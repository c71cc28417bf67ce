#pragma once
/// numpy broadcasting: the result shape of two operands, and the reduction of a gradient
/// back to an operand's shape (every broadcasting op's backward goes through sum_to).
///
/// Also the fast paths of the common broadcasts (same shape, a scalar, a trailing-axis or a
/// leading-axis operand): plain loops over contiguous data, threaded above a size grain.
/// Elementwise results do not depend on the thread count; a reduction sums each output element
/// in one fixed order (float in double, as xtensor's sum), whatever the threads.
#include <optional>
#include <type_traits>

#include "core/node.hpp"
#include "core/runtime/parallel.hpp"

namespace xgrad {

/// Shape both operands broadcast to, or "<op>: shapes (2, 3) and (4,) cannot be broadcast
/// together (axis -1: 3 vs 4)"; checked with checked_numel (two large operands can broadcast
/// to more elements than fit in memory).
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
/// The same shape, its count left to the caller: the products broadcast only their batch
/// axes and count the whole result, naming their operands.
Shape broadcast_axes(const char* op, const Shape& a, const Shape& b);

/// Sums g over the axes that broadcasting added or stretched, so the result has `shape`.
template <class T> xt::xarray<T> sum_to(xt::xarray<T>&& g, const Shape& shape);

/// How an operand is read when the result is seen as a row-major (rows, cols) matrix: element
/// (r, c) reads operand[r·row + c·col]. Full: (cols, 1); a scalar: (0, 0); a trailing-axis
/// operand of `cols` elements: (0, 1); a leading-axis one of `rows` elements: (1, 0).
struct Steps {
    std::size_t row = 0, col = 0;
};

/// A broadcast the fast loops handle: the result as (rows, cols) and each operand's steps.
struct Plan2D {
    std::size_t rows = 1, cols = 1;
    Steps a, b;
};

/// The plan of `a op b -> out` (out their broadcast shape), or nothing when an operand is
/// stretched along axes that are neither a leading nor a trailing block (the generic path).
std::optional<Plan2D> plan_broadcast(const Shape& a, const Shape& b, const Shape& out);

/// Elements per thread below which a loop stays on the calling thread.
constexpr std::size_t kElementGrain = 8192;

/// Accumulator of a sum of T: float sums in double, as xtensor's reducers.
template <class T> using acc_t = std::conditional_t<std::is_same_v<T, float>, double, T>;

namespace detail {
// Calls f(integral_constant<col_a>, integral_constant<col_b>), so that the inner loops see
// the column steps (0 or 1) as constants and vectorise.
template <class F> void with_col_steps(const Plan2D& p, F&& f) {
    using zero = std::integral_constant<std::size_t, 0>;
    using one = std::integral_constant<std::size_t, 1>;
    if (p.a.col && p.b.col) f(one{}, one{});
    else if (p.a.col) f(one{}, zero{});
    else if (p.b.col) f(zero{}, one{});
    else f(zero{}, zero{});
}
}  // namespace detail

/// y[r, c] = f(a[r·a.row + c·a.col], b[...]) over the plan's (rows, cols), threaded in flat
/// chunks of the result.
template <class T, class F> void apply_plan(const Plan2D& p, const T* a, const T* b, T* y, F f) {
    const std::size_t n = p.rows * p.cols;
    detail::with_col_steps(p, [&](auto ca, auto cb) {
        parallel_for(n, kElementGrain, [&](std::size_t begin, std::size_t end) {
            std::size_t r = begin / p.cols, c0 = begin % p.cols;
            for (std::size_t i = begin; i < end; ++r, c0 = 0) {
                const std::size_t c1 = std::min(p.cols, c0 + (end - i));
                const T* pa = a + r * p.a.row;
                const T* pb = b + r * p.b.row;
                T* py = y + r * p.cols;
                for (std::size_t c = c0; c < c1; ++c) py[c] = f(pa[c * ca], pb[c * cb]);
                i += c1 - c0;
            }
        });
    });
}

/// dst (the operand with steps `s` in a (rows, cols) result) = the sum, over the result's
/// elements that read each of its elements, of term(r, c), a T. A full operand gets term(r, c)
/// itself. Each element is summed in increasing (r, c) order, in acc_t<T>, on one thread.
template <class T, class Term>
void reduce_plan(std::size_t rows, std::size_t cols, Steps s, T* dst, Term term) {
    using A = acc_t<T>;
    if (s.row == cols && s.col == 1) {  // full: no reduction
        parallel_for(rows * cols, kElementGrain, [&](std::size_t begin, std::size_t end) {
            std::size_t r = begin / cols, c0 = begin % cols;
            for (std::size_t i = begin; i < end; ++r, c0 = 0) {
                const std::size_t c1 = std::min(cols, c0 + (end - i));
                for (std::size_t c = c0; c < c1; ++c) dst[r * cols + c] = term(r, c);
                i += c1 - c0;
            }
        });
    } else if (s.col == 1) {  // trailing operand: dst[c] = Σ_r
        parallel_for(cols, std::max<std::size_t>(1, kElementGrain / std::max<std::size_t>(rows, 1)),
                     [&](std::size_t c0, std::size_t c1) {
                         std::vector<A> acc(c1 - c0, A(0));
                         for (std::size_t r = 0; r < rows; ++r)
                             for (std::size_t c = c0; c < c1; ++c) acc[c - c0] += static_cast<A>(T(term(r, c)));
                         for (std::size_t c = c0; c < c1; ++c) dst[c] = static_cast<T>(acc[c - c0]);
                     });
    } else if (s.row == 1) {  // leading operand: dst[r] = Σ_c
        parallel_for(rows, std::max<std::size_t>(1, kElementGrain / std::max<std::size_t>(cols, 1)),
                     [&](std::size_t r0, std::size_t r1) {
                         for (std::size_t r = r0; r < r1; ++r) {
                             A acc(0);
                             for (std::size_t c = 0; c < cols; ++c) acc += static_cast<A>(T(term(r, c)));
                             dst[r] = static_cast<T>(acc);
                         }
                     });
    } else {  // scalar: one sum, on this thread
        A acc(0);
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < cols; ++c) acc += static_cast<A>(T(term(r, c)));
        dst[0] = static_cast<T>(acc);
    }
}

/// Steps of an operand of shape `s` read into a result of shape `out` split as (rows, cols),
/// when it is full, a scalar, or a trailing or leading block matching that split.
std::optional<Steps> steps_for(const Shape& s, const Shape& out, std::size_t rows, std::size_t cols);

/// Split (rows, cols) of `out` under which `s` is a trailing or leading block, or any split
/// (rows = 1) when it is full or a scalar; nothing otherwise.
std::optional<std::pair<std::size_t, std::size_t>> split_for(const Shape& s, const Shape& out);

/// g (of shape `from`, broadcastable to `to`) stretched to `to` by the fast loops, or nothing
/// when the broadcast is not one of theirs.
template <class T> std::optional<xt::xarray<T>> broadcast_fast(const xt::xarray<T>& g, const Shape& to);

}  // namespace xgrad
