// A typed accessor (item, to_vector, data_ptr, grad_ptr..., dtype_of) of a type that is no
// element type, and a bool where nn::LayerNorm takes eps: each CASE_ must fail to compile with
// the message that names the form that works (the accessors in tensor.hpp, nn/layer_norm.hpp).
// Without a case it compiles, writes through the views t[i] and t.index(...) included.
#include "core/tensor.hpp"
#if defined(CASE_layer_norm_bool_eps) || defined(CASE_layer_norm_list_bool_eps)
#include "nn/layer_norm.hpp"  // only there: the other cases see core alone
#endif

using namespace xgrad;

void f(Tensor t, Tensor v, const Tensor& c) {
    Tensor r = t[0];
#if defined(CASE_item_int)
    (void)t.item<int>();  // not an element type: a compile error naming the ones there are
#elif defined(CASE_to_vector_int)
    (void)t.to_vector<int>();
#elif defined(CASE_item_uchar)
    (void)t.item<unsigned char>();
#elif defined(CASE_data_ptr_int)
    (void)t.data_ptr<int>();
#elif defined(CASE_data_ptr_const_int)
    (void)c.data_ptr<int>();  // the const overload
#elif defined(CASE_const_data_ptr_long_double)
    (void)c.const_data_ptr<long double>();
#elif defined(CASE_mutable_data_ptr_short)
    (void)c.mutable_data_ptr<short>();
#elif defined(CASE_grad_ptr_int)
    (void)t.grad_ptr<int>();
#elif defined(CASE_grad_ptr_const_uint64)
    (void)c.grad_ptr<std::uint64_t>();
#elif defined(CASE_mutable_grad_ptr_uchar)
    (void)t.mutable_grad_ptr<unsigned char>();
#elif defined(CASE_dtype_of_int)
    (void)dtype_of<int>();
#elif defined(CASE_layer_norm_bool_eps)
    nn::LayerNorm ln(4, false);  // nanoGPT's LayerNorm(ndim, bias): torch's second argument is eps
#elif defined(CASE_layer_norm_list_bool_eps)
    nn::LayerNorm ln({2, 4}, false);
#else
    std::move(r) = v;  // writes into t[0]
    r.data_ptr<float>()[0] = 1.0f;
    t.index({0}).mutable_data_ptr<float>()[0] = 1.0f;
    t[0].set_data(v);
    (void)t.item<std::int64_t>();
    (void)t.to_vector<bfloat16>();
    (void)c.const_data_ptr<double>();
    (void)t.mutable_grad_ptr<float>();
    static_assert(dtype_of<std::int64_t>() == kInt64);
#endif
}
