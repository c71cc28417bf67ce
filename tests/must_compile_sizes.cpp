// Built with -Wall -Wextra -Wconversion -Wshadow -Werror (tests/CMakeLists.txt): the lines a port from
// torch writes with sizes from size() and shape() mixed with int and long counts compile with
// no cast and no warning. Nothing here runs; tests/nn/test_porting_traps.cpp runs the same forms.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/creation.hpp"
#include "core/ops.hpp"
#include "nn/nn.hpp"

using namespace xgrad;
using namespace xgrad::indexing;

Tensor sizes_mixed(const Tensor& x, const Tensor& qkv, int n_head, long n_embd, std::int64_t block_size) {
    // nanoGPT: B, T, C = x.size()
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    std::vector<Tensor> parts = split(qkv, n_embd, 2);
    Tensor q = parts[0].view(B, T, n_head, C / n_head).transpose(1, 2);
    Tensor k = parts[1].view({B, T, n_head, C / n_head}).transpose(1, 2);  // size_t / int, mixed in a list
    Tensor att = matmul(q, k.transpose(-2, -1));
    Tensor y = att.transpose(1, 2).reshape({B, T, C});
    y = y.reshape({-1, y.size(-1)});
    y = y.view(-1);
    Tensor z = x.index({Slice(), Slice(0, x.size(1) - 1)});
    z = x.index({Slice(None, block_size), x.size(1) - 1});
    z = x.narrow(1, 0, x.size(1));
    z = x.select(1, x.size(1) - 1);
    z = x.permute({0, x.dim() - 1, 1});
    z = x.permute(0, 2, 1);
    z = x.sum({x.dim() - 1}, true);
    z = x.mean({0, static_cast<int>(1)});
    z = zeros({B, T, C});
    z = zeros({B, block_size, n_embd, n_head});
    z = full({x.size(0), 1}, 0.5);
    z = ones(x.shape());
    z = randn({T, n_embd});
    z = x.expand({B, T, C});
    z = expand(x.index({Slice(), Slice(), 0}).unsqueeze(2), {-1, -1, static_cast<long>(C)});
    z = layer_norm(x, {C});
    auto chunks = chunk(x, n_head, 2);
    auto pieces = split(x, {x.size(2) - 1, 1}, 2);
    // nanoGPT's attention lines as methods: x.split(n_embd, dim=2), .contiguous().view(B, T, C),
    // att.masked_fill(mask == 0, -inf); d2l's repeat_interleave(valid_lens, shape[1]).
    auto thirds = x.split(n_embd, 2);
    auto halves = x.chunk(n_head, -1);
    z = x.transpose(1, 2).contiguous().view(B, C, T);
    z = x.masked_fill(x.index({Slice(), Slice(None, T), Slice(None, T)}) == 0, -1e9);
    z = repeat_interleave(x.sum({2}), T);
    Shape s{B, T, C};
    z = zeros(s);
    // Signed counts, as LibTorch's int64_t sizes: loops, comparisons and std::min with int and
    // long, torch.Size's negative index, a Shape braced from size().
    for (int i = 0; i < x.size(0); ++i) z = z + x.select(0, i).sum();
    for (long d = 0; d < x.dim(); ++d) z = z + x.sum({d}).sum();
    const std::int64_t top = std::min(block_size, x.size(1));
    if (x.numel() > n_embd && top < T && x.shape()[-1] > 0) z = z * 2.0;
    z = z + zeros(Shape{x.size(0), n_head, top}).sum();
    // nanoGPT's pos = torch.arange(0, t), torch.randint(len(data) - block_size, (batch_size,)),
    // sizes of any integer type: int64 tensors, no cast.
    Tensor pos = arange(0, T);
    pos = arange(x.size(1));
    pos = arange(block_size, kFloat32);
    Tensor ix = randint(x.numel() - block_size, {B});
    ix = randint(block_size, {B, n_head});
    Tensor lens = tensor({B, T});
    z = z.pow(x.index({Slice(), Slice(), Slice(None, 1)}));
    pos = pos.masked_fill(pos == 0, T);
    return z + y.sum() + static_cast<double>(chunks.size() + pieces.size() + thirds.size() + halves.size());
}

std::shared_ptr<nn::Module> containers(long n_embd, std::size_t vocab) {
    auto ln = std::make_shared<nn::LayerNorm>(n_embd);
    auto ln2 = std::make_shared<nn::LayerNorm>(vocab);
    auto ln3 = std::make_shared<nn::LayerNorm>(std::vector<long>{4, n_embd});
    nn::LayerNorm ln4(128);
    nn::LayerNorm ln5({4, vocab});
    auto ln6 = std::make_shared<nn::LayerNorm>(n_embd, 1e-5, true, /*bias=*/false);  // nanoGPT's LayerNorm(ndim, bias)
    nn::LayerNorm ln7({4, vocab}, 1e-6, true, false);
    auto list = std::make_shared<nn::ModuleList>(nn::ModuleList::Items{ln, ln2});
    auto dict = std::make_shared<nn::ModuleDict>(nn::ModuleDict::Items{{"ln_f", ln3}, {"wte", std::make_shared<nn::Embedding>(vocab, n_embd)}});
    auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(n_embd, vocab), std::make_shared<nn::ReLU>());
    auto root = std::make_shared<nn::ModuleDict>();
    root->insert("h", list);
    root->insert("t", dict);
    root->insert("s", seq);
    root->insert("ln6", ln6);
    return root;
}

// clamp's bounds and pow's numbers written every way a port writes them: literals of every
// integer and floating type, bool, std::nullopt and {}, a size from size() minus 1, a Scalar
// variable, and optional<double> bounds kept from code written for the earlier
// clamp(Tensor, optional<double>, optional<double>). None is ambiguous, none warns.
Tensor clamp_and_pow_numbers(const Tensor& x, const Tensor& ids, Scalar s, std::optional<double> lo,
                             std::optional<double> hi, std::optional<float> lo_f, std::optional<int> lo_i,
                             std::optional<Scalar> lo_s, unsigned u, std::size_t n, long l, long long ll,
                             std::int64_t i64, float f, double d, bool b) {
    const auto V = ids.size(0);
    Tensor z = clamp(x, 0);
    z = clamp(x, 0, 1) + clamp(x, 0L, 1L) + clamp(x, 0LL, 1LL) + clamp(x, 0u, 1u) + clamp(x, std::size_t{0}, n);
    z = z + clamp(x, i64, i64) + clamp(x, 0.5f, 1.5f) + clamp(x, 0.5, 1.5) + clamp(x, b) + clamp(x, u, l);
    z = z + clamp(x, ll, f) + clamp(x, d) + clamp(x, 0, 1.0) + clamp(x, -1, n) + clamp(x, true, false);
    z = z + clamp(x, std::nullopt, 1) + clamp(x, 0, std::nullopt) + clamp(x, {}, 1) + clamp(x, 0, {});
    z = z + clamp(ids, 0, V - 1) + clamp(ids, 0, ids.size(0) - 1) + clamp(x, s) + clamp(x, s, s);
    z = z + clamp(x, lo, std::nullopt) + clamp(x, lo) + clamp(x, lo, hi) + clamp(x, std::nullopt, hi);
    z = z + clamp(x, lo, 1.0) + clamp(x, lo_f) + clamp(x, lo_i, hi) + clamp(x, lo_s, lo_s) + clamp(x, lo_s);
    x.clamp_(0);
    x.clamp_(0, 1);
    x.clamp_(0.5, 1.5);
    x.clamp_(std::nullopt, 1);
    x.clamp_({}, 1);
    x.clamp_(lo, hi);
    x.clamp_(lo);
    x.clamp_(lo, std::nullopt);
    x.clamp_(std::nullopt, hi);
    x.clamp_(s);
    x.clamp_(lo_s, lo_s);
    ids.clamp_(0, V - 1);
    ids[0].clamp_(0, V - 1);
    ids.index({Slice(0, n)}).clamp_(0, V - 1);
    x[n - 1].clamp_(lo, std::nullopt);
    x.index({0}).clamp_({}, 1.5f);
    // The methods, as torch's x.clamp(0, 1), x.clamp(min=1e-8) and ids.clamp_max(V - 1).
    z = z + x.clamp(0) + x.clamp(0, 1) + x.clamp(0.5, 1.5f) + x.clamp(std::nullopt, 1) + x.clamp({}, 1);
    z = z + x.clamp(lo, hi) + x.clamp(lo) + x.clamp(s, s) + ids.clamp(0, V - 1) + x.clamp(lo_s) + x.clamp(b, true);
    z = z + x.clamp_min(0) + x.clamp_min(1e-8) + x.clamp_min(s) + x.clamp_max(n) + x.clamp_max(0.5f);
    z = z + ids.clamp_max(V - 1) + clamp_min(x, 0.5f) + clamp_max(ids, i64) + clamp_min(ids, l) + clamp_max(x, u);
    x.clamp_min_(0);
    x.clamp_max_(1.5);
    ids[0].clamp_max_(V - 1);
    x.index({0}).clamp_min_(f);
    z = z + pow(x, 2) + pow(x, 2L) + pow(x, 2LL) + pow(x, 2u) + pow(x, n) + pow(x, i64) + pow(x, 0.5f);
    z = z + pow(x, 0.5) + pow(x, b) + pow(x, s) + pow(x, V - 1) + pow(x, true) + pow(x, x);
    z = z + x.pow(2) + x.pow(0.5) + x.pow(s) + x.pow(n) + x.pow(V) + x.pow(ll) + x.pow(x);
    // A number as the base, torch.pow(10000, x) and torch.pow(2, arange(T)).
    z = z + pow(10000, x) + pow(10000.0, x) + pow(2.0f, x) + pow(2L, x) + pow(u, x) + pow(n, x) + pow(s, x);
    z = z + pow(b, x) + pow(d, x) + pow(i64, x) + pow(V, x) + pow(2, arange(V)).sum();
    return z;
}
