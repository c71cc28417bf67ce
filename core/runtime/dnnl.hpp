#pragma once
/// oneDNN's matmul, for the products it runs faster than OpenBLAS: bfloat16 inputs with float32
/// accumulation on CPUs with AVX512-BF16 (Debian's OpenBLAS 0.3.21 has no bfloat16 GEMM), and
/// float32 where it measures faster. Optional: built when CMake finds oneDNN (libdnnl-dev,
/// XGRAD_WITH_DNNL); without it available() is false and matmul() throws.
///
/// Row-major, batched: C[i] (m×n, float32) = op(A[i]) · op(B[i]) (+ C[i] when accumulate), i over
/// `batch`; op(X) = Xᵀ when its flag is set. A stride of 0 between batches shares one matrix
/// across the batch (a Linear's weight). A and B are float32 or bfloat16 bits (bfloat16.hpp),
/// both the same.
#include <cstddef>
#include <cstdint>
#include <string>

namespace xgrad::dnnl {

enum class Input { f32, bf16 };

/// Built with oneDNN.
bool available();
/// The best instruction set oneDNN dispatches to on this CPU ("avx512_core_bf16", ...); empty
/// without oneDNN.
std::string isa();
/// bfloat16 products run on the CPU's own bfloat16 instructions (AVX512-BF16 or AMX), not
/// emulated through float32 (by oneDNN, or widened by xgrad: bf16_path()).
bool native_bf16();
/// "oneDNN 2.6.3" or "" without it.
std::string version();

/// How matmul() multiplies bfloat16 inputs in this process. oneDNN 2.6 makes a bfloat16 matmul
/// only on AVX-512 CPUs (native on AVX512-BF16 or AMX, emulated on plain avx512_core); on an
/// AVX2 CPU (an AMD EPYC without AVX-512, where CI runs) it cannot create one at all. There the
/// bfloat16 operands are widened to float32, which is exact, and multiplied by oneDNN's float32
/// matmul: the same products of the same bfloat16 values with float32 accumulation, only the
/// order of the sums (so the last bits) differing. Decided once per process by asking oneDNN
/// for a small bfloat16 primitive; where it makes one, that path runs unchanged.
enum class Bf16Path { onednn, widened };
Bf16Path bf16_path();
/// Tests only: true runs every bfloat16 product widened (as on a CPU without oneDNN's bfloat16
/// matmul) whatever this CPU offers; false goes back to this machine's path.
void force_widened_bf16(bool on);

struct Matmul {
    Input input = Input::f32;
    bool trans_a = false, trans_b = false;
    std::size_t batch = 1, m = 0, n = 0, k = 0;
    std::size_t stride_a = 0, stride_b = 0;  ///< elements between batches; 0: one shared matrix
    bool accumulate = false;
    /// C = alpha·op(A)·op(B) (+ C).
    float alpha = 1;
    /// A second batch axis inside the first (attention's heads): product (i, h) reads
    /// A + i·stride_a + h·head_a and writes C + i·stride_c + h·head_c. head_a or head_b 0
    /// shares one matrix across the heads.
    std::size_t heads = 1, head_a = 0, head_b = 0, head_c = 0;
    /// Row lengths as stored (0: packed, the stored matrix's column count) and C's batch
    /// stride (0: packed, heads·m·n). Strided rows let a head's column block of a packed
    /// projection (rows of H·d) be read and written in place.
    std::size_t lda = 0, ldb = 0, ldc = 0, stride_c = 0;
};

/// Runs the product with oneDNN on xgrad's pool (parallel.hpp), never on OpenMP threads of its
/// own: each call into oneDNN is single-threaded, and a product of 2^21 multiply-adds or more
/// is split into whole batches or, with one batch, blocks of C's rows, as blas::gemm splits its
/// products. A product's result may depend on that split, i.e. on num_threads(), as sgemm's
/// does. Primitives are cached per shape. Throws xgrad::Error naming "dnnl matmul" on a bad
/// shape, and when oneDNN is not built in.
void matmul(const Matmul& p, const void* a, const void* b, float* c);

}  // namespace xgrad::dnnl
