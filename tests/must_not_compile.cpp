// Writes through t[i] / t.index(...) that would land in a copy: each CASE_ must fail to
// compile with the message that names the form that works (see IndexedTensor in tensor.hpp).
#include "core/tensor.hpp"

using namespace xgrad;

void f(Tensor t, Tensor v) {
    auto r = t[0];
#if defined(CASE_lvalue_assign)
    r = v;  // would only rebind r: r.copy_(v)
#elif defined(CASE_data_ptr)
    r.data_ptr<float>()[0] = 1.0f;
#elif defined(CASE_mutable_data_ptr)
    t.index({0}).mutable_data_ptr<float>()[0] = 1.0f;
#elif defined(CASE_set_data)
    t[0].set_data(v);
#else
    std::move(r) = v;  // the form that works compiles
#endif
}
