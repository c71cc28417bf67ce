// IndexedTensor: t[i] and t.index(...) as copies that write back into t (see tensor.hpp).
#include "core/ops_util.hpp"

namespace xgrad {

IndexedTensor Tensor::index(const std::vector<TensorIndex>& indices) const {
    return IndexedTensor(index_values(indices), *this, indices);
}

IndexedTensor::IndexedTensor(Tensor values, Tensor base, std::vector<TensorIndex> indices)
    : Tensor(std::move(values)), m_base(std::move(base)), m_indices(std::move(indices)) {}

IndexedTensor::IndexedTensor(Tensor values, std::shared_ptr<const IndexedTensor> parent,
                             std::vector<TensorIndex> indices)
    : Tensor(std::move(values)), m_parent(std::move(parent)), m_indices(std::move(indices)) {}

IndexedTensor IndexedTensor::index(const std::vector<TensorIndex>& indices) const {
    return IndexedTensor(index_values(indices), std::make_shared<const IndexedTensor>(*this), indices);
}

void IndexedTensor::check_root(const char* op) const {
    if (m_parent) return m_parent->check_root(op);
    if (grad_enabled() && m_base.requires_grad() && m_base.is_leaf())
        throw Error(fmt::format("{}: a view of a leaf Variable that requires grad is being used in an in-place "
                                "operation (t[i] and t.index(...) write into t, which is refused while gradients are "
                                "recorded, as in torch); do it under NoGradGuard, or on a clone()",
                                op));
}

void IndexedTensor::write_base(const char* op, const std::function<void(const Tensor& base)>& write) const {
    if (m_parent)
        m_parent->update(op, write, false);
    else
        write(m_base);
}

const IndexedTensor& IndexedTensor::update(const char* op, const std::function<void(const Tensor& part)>& f,
                                           bool keep) const {
    check_root(op);
    Tensor written;
    write_base(op, [&](const Tensor& base) {
        const Tensor part = base.index_values(m_indices);
        f(part);
        base.index_put_(m_indices, part);
        written = part;
    });
    if (keep) Tensor::copy_(written);
    return *this;
}

// t[i] = v is index_put_ of the whole part (`{}` picks everything), so that v broadcasts, drops
// leading axes of length 1 and casts as index_put_'s value does (torch's setitem).
IndexedTensor& IndexedTensor::operator=(const Tensor& value) && {
    update("index_put_", [&](const Tensor& part) { part.index_put_({}, value); });
    return *this;
}

IndexedTensor& IndexedTensor::operator=(const IndexedTensor& value) && {
    return std::move(*this) = static_cast<const Tensor&>(value);
}

IndexedTensor& IndexedTensor::operator=(Scalar value) && {
    update("index_put_", [&](const Tensor& part) { part.fill_(value); });
    return *this;
}

#define XGRAD_IN_PLACE(name, params, call)                                                   \
    const IndexedTensor& IndexedTensor::name params const {                                  \
        return update(#name, [&](const Tensor& part) { part.call; });                         \
    }
XGRAD_IN_PLACE(add_, (const Tensor& other), add_(other))
XGRAD_IN_PLACE(add_, (const Tensor& other, Scalar alpha), add_(other, alpha))
XGRAD_IN_PLACE(add_, (Scalar other), add_(other))
XGRAD_IN_PLACE(sub_, (const Tensor& other), sub_(other))
XGRAD_IN_PLACE(sub_, (const Tensor& other, Scalar alpha), sub_(other, alpha))
XGRAD_IN_PLACE(sub_, (Scalar other), sub_(other))
XGRAD_IN_PLACE(mul_, (const Tensor& other), mul_(other))
XGRAD_IN_PLACE(mul_, (Scalar other), mul_(other))
XGRAD_IN_PLACE(div_, (const Tensor& other), div_(other))
XGRAD_IN_PLACE(div_, (Scalar other), div_(other))
XGRAD_IN_PLACE(masked_fill_, (const Tensor& mask, Scalar value), masked_fill_(mask, value))
XGRAD_IN_PLACE(clamp_, (std::optional<Scalar> min, std::optional<Scalar> max), clamp_(min, max))
XGRAD_IN_PLACE(clamp_min_, (Scalar min), clamp_min_(min))
XGRAD_IN_PLACE(clamp_max_, (Scalar max), clamp_max_(max))
XGRAD_IN_PLACE(copy_, (const Tensor& src), copy_(src))
XGRAD_IN_PLACE(zero_, (), zero_())
XGRAD_IN_PLACE(fill_, (Scalar value), fill_(value))
XGRAD_IN_PLACE(uniform_, (double from, double to, Generator& gen), uniform_(from, to, gen))
XGRAD_IN_PLACE(normal_, (double mean, double std, Generator& gen), normal_(mean, std, gen))
XGRAD_IN_PLACE(bernoulli_, (double p, Generator& gen), bernoulli_(p, gen))
XGRAD_IN_PLACE(bernoulli_, (const Tensor& p, Generator& gen), bernoulli_(p, gen))
XGRAD_IN_PLACE(index_put_, (const std::vector<TensorIndex>& indices, const Tensor& value, bool accumulate),
               index_put_(indices, value, accumulate))
XGRAD_IN_PLACE(index_put_, (const std::vector<TensorIndex>& indices, Scalar value, bool accumulate),
               index_put_(indices, value, accumulate))
XGRAD_IN_PLACE(scatter_, (long axis, const Tensor& index, const Tensor& src), scatter_(axis, index, src))
XGRAD_IN_PLACE(scatter_, (long axis, const Tensor& index, Scalar value), scatter_(axis, index, value))
XGRAD_IN_PLACE(scatter_add_, (long axis, const Tensor& index, const Tensor& src), scatter_add_(axis, index, src))
#undef XGRAD_IN_PLACE

}  // namespace xgrad
