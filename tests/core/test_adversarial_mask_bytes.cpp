// A bool tensor whose bytes were written raw (through data_ptr<bool>, as a C array of 0/255
// flags) holds bytes other than 0 and 1. Every op that reads a mask's values takes any byte but
// 0 as true, as numpy and load_npz do, and reads it as a byte (reading such a byte as bool is
// undefined: these run under the UBSan build too). Each op is checked against the same op on
// the mask made canonical (bytes 0 and 1), bit for bit.
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dispatch.hpp"
#include "core/flash_attention.hpp"
#include "core/ops_util.hpp"
#include "helpers.hpp"

using namespace xgrad;
using xgrad::indexing::Slice;

namespace {

std::size_t count(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }

// A bool tensor of `shape` whose bytes cycle through 0, 2, 255, 1, 0, 7 from `start`, written raw.
Tensor raw_bools(const Shape& shape, std::size_t start = 0) {
    static const std::uint8_t cycle[] = {0, 2, 255, 1, 0, 7};
    Tensor m = zeros(shape, kBool);
    auto* p = reinterpret_cast<std::uint8_t*>(m.data_ptr<bool>());
    for (std::size_t i = 0; i < count(m); ++i) p[i] = cycle[(start + i) % std::size(cycle)];
    return m;
}

// The same mask with every byte but 0 written as 1.
Tensor canonical(const Tensor& raw) {
    Tensor m = zeros(raw.shape(), kBool);
    const Tensor values = raw.contiguous();  // a view's bytes in its own order
    const auto* in = reinterpret_cast<const std::uint8_t*>(values.const_data_ptr<bool>());
    auto* out = reinterpret_cast<std::uint8_t*>(m.data_ptr<bool>());
    for (std::size_t i = 0; i < count(raw); ++i) out[i] = in[i] != 0;
    return m;
}

// The storage's bytes, to compare two results bit for bit (any dtype).
std::vector<unsigned char> bytes_of(const Tensor& t) {
    return dispatch_all(t.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        std::vector<unsigned char> out(count(t) * sizeof(T));
        const Tensor values = t.contiguous();  // a view's bytes in its own order
        if (!out.empty()) std::memcpy(out.data(), values.const_data_ptr<T>(), out.size());
        return out;
    });
}

// A bool result's bytes are all 0 or 1.
bool canonical_bytes(const Tensor& t) {
    for (const unsigned char b : bytes_of(t))
        if (b > 1) return false;
    return true;
}

Tensor operand(const Shape& shape, Dtype d, double offset) {
    if (d == kBool) return raw_bools(shape, static_cast<std::size_t>(offset));
    std::vector<double> v(count(zeros(shape, kFloat64)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = offset + 0.25 * static_cast<double>(i) - 3.0;
    return cast(from_vector(v, shape, kFloat64), d);
}

}  // namespace

TEST_CASE("where and masked_fill read a raw mask's bytes, 0 false and any other true, every dtype and broadcast",
          "[ops][where][mask-bytes][adversarial]") {
    // Shapes the plain loop splits and ones it does not (which select on full copies).
    const std::vector<std::vector<Shape>> cases{
        {{37}, {37}, {37}},          {{2, 37}, {2, 37}, {}},      {{1, 37}, {3, 37}, {3, 37}}, {{3, 1}, {3, 5}, {1, 5}},
        {{2, 1, 3}, {1, 4, 1}, {2, 4, 3}}, {{4, 1}, {1, 3}, {}},  {{1, 4, 1}, {2, 1, 3}, {4, 3}}, {{0, 3}, {3}, {1, 3}}};
    for (const Dtype d : {kInt64, kBool, kBFloat16, kFloat64, kFloat32})
        for (const auto& c : cases) {
            INFO(dtype_name(d) << ": mask " << shape_str(c[0]) << ", a " << shape_str(c[1]) << ", b " << shape_str(c[2]));
            const Tensor m = raw_bools(c[0]);
            const Tensor a = operand(c[1], d, 1.0), b = operand(c[2], d, 100.0);
            // bool operands are raw too: compared with their canonical forms
            const Tensor ca = d == kBool ? canonical(a) : a, cb = d == kBool ? canonical(b) : b;
            const Tensor w = where(m, a, b);
            CHECK(bytes_of(w) == bytes_of(where(canonical(m), ca, cb)));
            if (d == kBool) CHECK(canonical_bytes(w));
            if (broadcastable_to(m.shape(), a.shape())) {
                const Tensor f = masked_fill(a, m, 1.0);
                CHECK(bytes_of(f) == bytes_of(masked_fill(ca, canonical(m), 1.0)));
                if (d == kBool) CHECK(canonical_bytes(f));
            }
        }
}

TEST_CASE("logical ops, comparisons, casts, reads and sums of a raw mask take any byte but 0 as true",
          "[mask-bytes][adversarial]") {
    const Tensor m = raw_bools({3, 7}), n = raw_bools({3, 7}, 2);
    const Tensor cm = canonical(m), cn = canonical(n);
    const auto same = [](const Tensor& x, const Tensor& y) { return bytes_of(x) == bytes_of(y); };
    CHECK(same(logical_not(m), logical_not(cm)));
    CHECK(same(~m, ~cm));
    CHECK(same(logical_and(m, n), logical_and(cm, cn)));
    CHECK(same(logical_or(m, n), logical_or(cm, cn)));
    CHECK(same(logical_xor(m, n), logical_xor(cm, cn)));
    CHECK(same(m & n, cm & cn));
    CHECK(same(m | n, cm | cn));
    CHECK(same(m + n, cm + cn));
    CHECK(same(m * n, cm * cn));
    CHECK(same(eq(m, n), eq(cm, cn)));
    CHECK(same(ne(m, n), ne(cm, cn)));
    CHECK(same(eq(m, true), eq(cm, true)));
    for (const Dtype d : {kInt64, kBFloat16, kFloat64, kFloat32}) {
        INFO("cast to " << dtype_name(d));
        CHECK(same(cast(m, d), cast(cm, d)));
    }
    CHECK(same(sum(m), sum(cm)));
    CHECK(same(sum(m, {1}), sum(cm, {1})));
    // ordered as 0 and 1: the first true is the maximum, its value 1
    CHECK(same(max(m), max(cm)));
    CHECK(same(min(m), min(cm)));
    CHECK(same(max(m, 1).values, max(cm, 1).values));
    CHECK(same(max(m, 1).indices, max(cm, 1).indices));
    CHECK(same(argmax(m, 1), argmax(cm, 1)));
    CHECK(same(argmin(m, 1), argmin(cm, 1)));
    CHECK(same(sort(m, 1).values, sort(cm, 1).values));
    CHECK(same(sort(m, 1).indices, sort(cm, 1).indices));
    CHECK(same(topk(m, 3, 1).indices, topk(cm, 3, 1).indices));
    CHECK(m.to_vector<double>() == cm.to_vector<double>());
    CHECK(m.to_vector<std::int64_t>() == cm.to_vector<std::int64_t>());
    CHECK(m.to_vector<bool>() == cm.to_vector<bool>());
    CHECK(m[0][1].item<double>() == 1.0);
    CHECK(m[0][2].item<bool>());
    // as an index: the positions of the bytes that are not 0
    const Tensor x = operand({3, 7}, kFloat32, 0.0);
    CHECK(same(x.index({m}), x.index({cm})));
}

TEST_CASE("shape and index ops move a raw mask's bytes, which then read as the canonical mask's",
          "[mask-bytes][adversarial]") {
    const Tensor m = raw_bools({2, 3, 4}), cm = canonical(m);
    const auto same_truth = [](const Tensor& x, const Tensor& y) { return bytes_of(canonical(x)) == bytes_of(y); };
    CHECK(same_truth(m.reshape({4, 6}), cm.reshape({4, 6})));
    CHECK(same_truth(m.permute({2, 0, 1}), cm.permute({2, 0, 1})));
    CHECK(same_truth(m.transpose(0, 2), cm.transpose(0, 2)));
    CHECK(same_truth(m.reshape({2, 1, 3, 4}).expand({2, 5, 3, 4}), cm.reshape({2, 1, 3, 4}).expand({2, 5, 3, 4})));
    CHECK(same_truth(cat({m, m}, 1), cat({cm, cm}, 1)));
    CHECK(same_truth(m.narrow(2, 1, 2), cm.narrow(2, 1, 2)));
    CHECK(same_truth(m.index({Slice(), 1}), cm.index({Slice(), 1})));
    const Tensor at = from_vector(std::vector<std::int64_t>{3, 0}, {2});
    CHECK(same_truth(m.index({Slice(), Slice(), at}), cm.index({Slice(), Slice(), at})));
    CHECK(same_truth(m.clone(), cm.clone()));
    CHECK(same_truth(m.contiguous(), cm.contiguous()));
}

TEST_CASE("attention masks given as raw bools keep the keys whose byte is not 0", "[attention][mask-bytes][adversarial]") {
    const std::size_t B = 2, T = 5, H = 2, d = 3;
    Tensor m = raw_bools({B, T, T});
    // one row keeping no key at all (uniform), as the canonical mask does
    std::memset(m.data_ptr<bool>(), 0, T);
    const Tensor cm = canonical(m);
    const Tensor X = operand({B, T, T}, kFloat32, 0.5);
    CHECK(bytes_of(masked_softmax(X, AttentionMask::attend_where(m))) ==
          bytes_of(masked_softmax(X, AttentionMask::attend_where(cm))));
    Generator gen(3);
    const Tensor q = randn({B, T, H * d}, kFloat32, gen), k = randn({B, T, H * d}, kFloat32, gen),
                 v = randn({B, T, H * d}, kFloat32, gen);
    CHECK(bytes_of(head_attention_weights(q, k, H, 0.5, AttentionMask::attend_where(m))) ==
          bytes_of(head_attention_weights(q, k, H, 0.5, AttentionMask::attend_where(cm))));
    // gradients through the masked rows: the backward reads the mask too
    const auto grads = [&](const Tensor& mask) {
        const Tensor qq = q.detach().requires_grad_(), kk = k.detach().requires_grad_(), vv = v.detach().requires_grad_();
        const Tensor y = flash_attention(qq, kk, vv, H, 0.5, AttentionMask::attend_where(mask));
        const Tensor w = head_attention_weights(qq, kk, H, 0.5, AttentionMask::attend_where(mask));
        (y.sum() + (w * w).sum()).backward();
        return std::vector<std::vector<unsigned char>>{bytes_of(y), bytes_of(w), bytes_of(qq.grad()), bytes_of(kk.grad()),
                                                       bytes_of(vv.grad())};
    };
    CHECK(grads(m) == grads(cm));
}
