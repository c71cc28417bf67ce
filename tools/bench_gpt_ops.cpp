// bench_gpt_ops: a nanoGPT-style character model written from ops, the way a PyTorch user
// writes it (not the fused nn::MultiHeadAttention), timed per training step.
//
//   bench_gpt_ops [--threads N] [--steps N] [--warmup N] [--batch B] [--block T] [--d-model D]
//                 [--heads H] [--layers L] [--vocab V] [--dropout P] [--gelu erf|tanh]
//                 [--seed S] [--json PATH]
//
// The model (nanoGPT's model.py of torch 1.13's day, shakespeare-char-like but smaller): token
// and position Embedding, --layers pre-LayerNorm blocks, each a fused qkv Linear split in three,
// view + transpose into heads, q·kᵀ·scale, a causal masked_fill with −inf, softmax, dropout,
// ·v, transpose back + reshape, an output Linear; a GELU MLP of width 4·d (--gelu erf: the exact
// gelu; tanh: nanoGPT's new_gelu written from pow, tanh, mul and add); a final LayerNorm and
// logits against the token embedding (weight tying, x·Wᵀ); cross_entropy over (B·T, V); AdamW
// with decay (the 2-D weights) and no-decay groups; clip_grad_norm at 1. Batches are random
// tokens. A step runs from zero_grad to the optimizer step, the loss read included. One more
// step counts its products, replayed afterwards as bare gemm calls (tools/product_replay.hpp).
// tools/bench_gpt_ops_torch.py is its PyTorch twin; tools/bench runs both.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>

#include "core/runtime/blas.hpp"
#include "core/runtime/parallel.hpp"
#include "optim/adam.hpp"
#include "optim/clip_grad.hpp"
#include "tools/product_replay.hpp"

using namespace xgrad;

namespace {

double process_cpu_ms() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Spec {
    long batch = 8, block = 64, d = 128, heads = 4, layers = 4, vocab = 65;
    double dropout = 0.1;
    bool tanh_gelu = false;
};

// nanoGPT's new_gelu: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
Tensor new_gelu(const Tensor& x) {
    return 0.5 * x * (1.0 + tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * pow(x, 3.0))));
}

class Block : public nn::Module {
public:
    Block(const Spec& s) : Module("Block"), m_s(s) {
        ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(Shape{static_cast<std::size_t>(s.d)}));
        c_attn = register_module("c_attn", std::make_shared<nn::Linear>(s.d, 3 * s.d));
        c_proj = register_module("c_proj", std::make_shared<nn::Linear>(s.d, s.d));
        ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(Shape{static_cast<std::size_t>(s.d)}));
        c_fc = register_module("c_fc", std::make_shared<nn::Linear>(s.d, 4 * s.d));
        mlp_proj = register_module("mlp_proj", std::make_shared<nn::Linear>(4 * s.d, s.d));
        attn_drop = register_module("attn_dropout", std::make_shared<nn::Dropout>(s.dropout));
        resid_drop = register_module("resid_dropout", std::make_shared<nn::Dropout>(s.dropout));
        mlp_drop = register_module("mlp_dropout", std::make_shared<nn::Dropout>(s.dropout));
    }

    Tensor attention(const Tensor& x, const Tensor& future) {
        const long B = x.size(0), T = x.size(1), C = m_s.d, H = m_s.heads;
        const std::vector<Tensor> qkv = split(c_attn->forward(x), C, 2);
        const Tensor q = qkv[0].view(B, T, H, C / H).transpose(1, 2);  // (B, H, T, hs)
        const Tensor k = qkv[1].view(B, T, H, C / H).transpose(1, 2);
        const Tensor v = qkv[2].view(B, T, H, C / H).transpose(1, 2);
        Tensor att = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(C / H)));
        att = masked_fill(att, future, -std::numeric_limits<double>::infinity());
        att = attn_drop->forward(softmax(att, -1));
        const Tensor y = matmul(att, v).transpose(1, 2).reshape({B, T, C});
        return resid_drop->forward(c_proj->forward(y));
    }

    Tensor forward(const Tensor& x, const Tensor& future) {
        const Tensor a = x + attention(ln_1->forward(x), future);
        const Tensor h = c_fc->forward(ln_2->forward(a));
        return a + mlp_drop->forward(mlp_proj->forward(m_s.tanh_gelu ? new_gelu(h) : gelu(h)));
    }

    std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
    std::shared_ptr<nn::Linear> c_attn, c_proj, c_fc, mlp_proj;
    std::shared_ptr<nn::Dropout> attn_drop, resid_drop, mlp_drop;

private:
    Spec m_s;
};

class Gpt : public nn::Module {
public:
    Gpt(const Spec& s) : Module("Gpt"), m_s(s) {
        wte = register_module("wte", std::make_shared<nn::Embedding>(s.vocab, s.d));
        wpe = register_module("wpe", std::make_shared<nn::Embedding>(s.block, s.d));
        drop = register_module("drop", std::make_shared<nn::Dropout>(s.dropout));
        auto list = register_module("h", std::make_shared<nn::ModuleList>());
        for (long l = 0; l < s.layers; ++l) {
            blocks.push_back(std::make_shared<Block>(s));
            list->append(blocks.back());
        }
        ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{static_cast<std::size_t>(s.d)}));
        // the causal mask as nanoGPT's buffer: true above the diagonal (the future)
        future = register_buffer("future", logical_not(tril(ones({s.block, s.block}, kBool))));
    }

    Tensor forward(const Tensor& idx) {
        const long T = idx.size(1);
        const Tensor pos = arange(T);
        Tensor x = drop->forward(wte->forward(idx) + wpe->forward(pos));
        const Tensor mask = future.narrow(0, 0, T).narrow(1, 0, T);
        for (const auto& b : blocks) x = b->forward(x, mask);
        return matmul(ln_f->forward(x), wte->weight().transpose(0, 1));  // (B, T, V)
    }

    std::shared_ptr<nn::Embedding> wte, wpe;
    std::shared_ptr<nn::Dropout> drop;
    std::vector<std::shared_ptr<Block>> blocks;
    std::shared_ptr<nn::LayerNorm> ln_f;
    Tensor future;

private:
    Spec m_s;
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "bench_gpt_ops: %s\nusage: bench_gpt_ops [--threads N] [--steps N] [--warmup N] [--batch B] "
                 "[--block T] [--d-model D] [--heads H] [--layers L] [--vocab V] [--dropout P] [--gelu erf|tanh] "
                 "[--seed S] [--json PATH]\n",
                 why);
    std::exit(2);
}

long positive(const char* opt, const char* v) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 1 || n > 1000000) usage((std::string(opt) + ": expected a whole number").c_str());
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    Spec s;
    long steps = 30, warmup = 3, seed = 0;
    std::string json, threads;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) usage((a + " needs a value").c_str());
        const char* v = argv[++i];
        if (a == "--threads") threads = std::to_string(positive("--threads", v));
        else if (a == "--steps") steps = positive("--steps", v);
        else if (a == "--warmup") warmup = positive("--warmup", v);
        else if (a == "--batch") s.batch = positive("--batch", v);
        else if (a == "--block") s.block = positive("--block", v);
        else if (a == "--d-model") s.d = positive("--d-model", v);
        else if (a == "--heads") s.heads = positive("--heads", v);
        else if (a == "--layers") s.layers = positive("--layers", v);
        else if (a == "--vocab") s.vocab = positive("--vocab", v);
        else if (a == "--seed") seed = positive("--seed", v);
        else if (a == "--dropout") s.dropout = std::atof(v);
        else if (a == "--gelu") {
            if (std::strcmp(v, "erf") != 0 && std::strcmp(v, "tanh") != 0) usage("--gelu: expected erf or tanh");
            s.tanh_gelu = std::strcmp(v, "tanh") == 0;
        } else if (a == "--json") json = v;
        else usage(("unknown option " + a).c_str());
    }
    if (s.d % s.heads != 0) usage("--d-model must be a multiple of --heads");
    // before the pool starts
    if (!threads.empty()) setenv("XGRAD_NUM_THREADS", threads.c_str(), 1);

    manual_seed(static_cast<std::uint64_t>(seed));
    Gpt model(s);
    std::vector<Tensor> decay, no_decay;
    for (const auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    optim::AdamW opt({{decay, optim::AdamWOptions().weight_decay(0.1)}, {no_decay, optim::AdamWOptions().weight_decay(0.0)}},
                     optim::AdamWOptions(1e-3).betas({0.9, 0.99}));
    model.train();

    std::vector<double> ms, cpu;
    double loss_value = 0;
    const auto batch = [&] { return randint(0, s.vocab, {s.batch, s.block}); };
    const auto step = [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        const Tensor logits = model.forward(x);
        const Tensor loss = cross_entropy(logits.reshape({-1, s.vocab}), y.reshape({-1}));
        loss.backward();
        optim::clip_grad_norm(model.parameters(), 1.0);
        opt.step();
        loss_value = loss.item<float>();
    };
    for (long i = 0; i < warmup + steps; ++i) {
        const Tensor x = batch(), y = batch();
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = process_cpu_ms();
        step(x, y);
        const auto t1 = std::chrono::steady_clock::now();
        if (i >= warmup) {
            ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            cpu.push_back(process_cpu_ms() - c0);
        }
    }
    // One more step, counting its products, which are then replayed bare: the floor under any
    // step that runs them on this BLAS (the bound beside the twin's time).
    const Tensor x = batch(), y = batch();
    blas_count(true);
    step(x, y);
    blas_count(false);
    const std::vector<BlasProduct> products = blas_counted();
    double in_gemm_s = 0;
    for (const auto& p : products) in_gemm_s += p.seconds;
    const double gflop = bench::flops(products) / 1e9, bare_ms = bench::replay_seconds(products, 0.5) * 1e3;
    const double median = median_of(ms), cpu_median = median_of(cpu);
    const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
    const BlasInfo blas = blas_info();
    std::printf("bench_gpt_ops: B=%ld T=%ld d=%ld heads=%ld layers=%ld vocab=%ld dropout=%g gelu=%s threads=%zu: "
                "median %.2f ms (CPU %.2f), mean %.2f ms per step over %ld (loss %.4f); its products: %.3f GFLOP, "
                "%.2f ms in the step, %.2f ms replayed bare\n",
                s.batch, s.block, s.d, s.heads, s.layers, s.vocab, s.dropout, s.tanh_gelu ? "tanh" : "erf",
                num_threads(), median, cpu_median, mean, steps, loss_value, gflop, in_gemm_s * 1e3, bare_ms);
    if (!json.empty()) {
        FILE* f = std::fopen(json.c_str(), "w");
        if (!f) {
            std::fprintf(stderr, "bench_gpt_ops: cannot write %s\n", json.c_str());
            return 1;
        }
        std::fprintf(f,
                     "{\"framework\": \"xgrad\", \"threads\": %zu, \"blas_core\": \"%s\", \"gelu\": \"%s\", "
                     "\"median_ms\": %.4f, \"cpu_ms\": %.4f, \"mean_ms\": %.4f, \"steps\": %ld, \"loss\": %.6f, "
                     "\"gflop_per_step\": %.4f, \"gemm_ms_per_step\": %.4f, \"bare_gemm_ms_per_step\": %.4f}\n",
                     num_threads(), blas.core.c_str(), s.tanh_gelu ? "tanh" : "erf", median, cpu_median, mean, steps, loss_value,
                     gflop, in_gemm_s * 1e3, bare_ms);
        std::fclose(f);
    }
    return 0;
}
