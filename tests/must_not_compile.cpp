// Writes through t[i] / t.index(...) that would land in a copy, and item / to_vector of a type
// that is no element type: each CASE_ must fail to compile with the message that names the
// form that works (see IndexedTensor and item in tensor.hpp).
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
#elif defined(CASE_item_int)
    (void)t.item<int>();  // not an element type: a compile error naming the ones there are
#elif defined(CASE_to_vector_int)
    (void)t.to_vector<int>();
#elif defined(CASE_item_uchar)
    (void)t.item<unsigned char>();
#else
    std::move(r) = v;  // the form that works compiles
    (void)t.item<std::int64_t>();
    (void)t.to_vector<bfloat16>();
#endif
}
