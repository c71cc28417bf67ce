// Tensor text in PyTorch's layout, plus the shape and dtype PyTorch leaves out.
#include <cmath>
#include <ostream>

#include "core/node.hpp"

namespace xgrad {

namespace {

constexpr std::size_t kSummariseAbove = 1000;  // torch's print threshold
constexpr std::size_t kEdgeItems = 3;

template <class T> std::string format_value(T v, bool sci) {
    if constexpr (std::is_same_v<T, bool>) return v ? "True" : "False";
    else if constexpr (std::is_integral_v<T>) return fmt::format("{}", v);
    else if (std::isnan(v)) return "nan";  // as torch: a NaN's sign bit is not shown
    else return sci ? fmt::format("{:.4e}", v) : fmt::format("{:.4f}", v);
}

struct Printer {
    const Shape& shape;
    bool summarise;
    std::vector<std::string> cells;  // formatted elements, row-major
    std::size_t width = 0;

    // Index positions shown along an axis of length n.
    std::vector<long> shown(std::size_t n) const {
        std::vector<long> idx;
        if (summarise && n > 2 * kEdgeItems) {
            for (std::size_t i = 0; i < kEdgeItems; ++i) idx.push_back(static_cast<long>(i));
            idx.push_back(-1);  // the ellipsis
            for (std::size_t i = n - kEdgeItems; i < n; ++i) idx.push_back(static_cast<long>(i));
        } else {
            for (std::size_t i = 0; i < n; ++i) idx.push_back(static_cast<long>(i));
        }
        return idx;
    }

    void print(std::string& out, std::size_t axis, std::size_t offset, std::size_t stride_total,
               std::size_t indent) const {
        if (axis == shape.size()) {
            out += fmt::format("{:>{}}", cells[offset], width);
            return;
        }
        const std::size_t n = shape[axis];
        const std::size_t stride = stride_total / std::max<std::size_t>(n, 1);
        out += '[';
        bool first = true;
        for (long i : shown(n)) {
            if (!first) {
                out += ',';
                if (axis + 1 == shape.size()) out += ' ';
                else out += std::string(shape.size() - axis - 1, '\n') + std::string(indent + 1, ' ');
            }
            first = false;
            if (i < 0) out += "...";
            else print(out, axis + 1, offset + static_cast<std::size_t>(i) * stride, stride, indent + 1);
        }
        out += ']';
    }
};

}  // namespace

std::string to_string(const Tensor& t) {
    if (!t.defined()) return "tensor(undefined)";
    const Node& n = t.node();
    auto render = [&](const auto& a) {
            using T = typename std::decay_t<decltype(a)>::value_type;
            Printer p{n.shape, a.size() > kSummariseAbove, {}, 0};
            bool sci = false;
            if constexpr (std::is_floating_point_v<T>) {
                double hi = 0, lo = INFINITY;
                for (T v : a)
                    if (std::isfinite(v) && v != 0) {
                        hi = std::max(hi, std::abs(double(v)));
                        lo = std::min(lo, std::abs(double(v)));
                    }
                sci = hi >= 1e8 || (lo < 1e-4 && lo > 0) || (hi > 0 && hi / lo >= 1e3 && lo < 1e-2);
            }
            p.cells.reserve(a.size());
            for (T v : a) {
                p.cells.push_back(format_value(v, sci));
                p.width = std::max(p.width, p.cells.back().size());
            }
            std::string out;
            p.print(out, 0, 0, a.size(), 7);  // 7 = strlen("tensor(")
            return out;
        };
    // bfloat16 prints as its float32 values (exact), which is what torch does.
    std::string body = std::visit(
        [&](const auto& a) {
            if constexpr (std::is_same_v<typename std::decay_t<decltype(a)>::value_type, bfloat16>)
                return render(xt::xarray<float>(xt::cast<float>(a)));
            else
                return render(a);
        },
        n.data());
    std::string tail = fmt::format("shape={}, dtype={}", shape_str(n.shape), dtype_name(n.dtype()));
    if (!n.is_leaf) tail += fmt::format(", op=<{}>", n.op);
    else if (n.requires_grad) tail += ", requires_grad=True";
    return fmt::format("tensor({}, {})", body, tail);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << to_string(t); }

}  // namespace xgrad
