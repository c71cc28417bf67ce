#!/usr/bin/python3
"""bahdanau_twin.py: a PyTorch twin of examples/bahdanau, for tools/bench and for checking it.

    /usr/bin/python3 tools/bahdanau_twin.py [--steps N] [--batch B] [--embed E] [--hidden H]
        [--layers L] [--dropout P] [--num-steps T] [--lr LR] [--clip C] [--held-out N]
        [--eval-every E] [--bleu-k K] [--seed S] [--threads T] [--json PATH]

The same program in torch 1.13, d2l's code for the chapter "Bahdanau Attention" with
examples/bahdanau's defaults for every flag:
- corpus: the same toy translation (examples/bahdanau/corpus.cpp), drawn with the same
  generator: C++'s std::mt19937_64 (written out below), seeded as bahdanau seeds it
  (seq_train's mix_seed), so both programs hold out and train on the same sentences;
- model: d2l's Seq2SeqEncoder (Embedding, nn.GRU) and Seq2SeqAttentionDecoder (AdditiveAttention
  over the encoder's outputs with the top layer's state as the query, the context concatenated
  with the embedded input, nn.GRU, a Linear head); d2l's Xavier initialisation;
- training: d2l's MaskedSoftmaxCELoss summed over the batch, Adam, the gradient norm clipped
  at --clip (torch.nn.utils.clip_grad_norm_, as bahdanau's optim::clip_grad_norm);
- evaluation: the held-out loss per real target token, teacher forced, in eval mode, every
  --eval-every steps and at the last; then greedy translation of the held-out set and d2l's
  BLEU.
The initial weights and dropout masks come from torch's generator, so the numbers are
bahdanau's in distribution, not bit for bit. A training step's time runs from the forward to
the optimizer step, as bahdanau counts it (the batch is made before, evaluations are left
out). It prints the median and mean ms per step, the held-out loss and BLEU.
"""
import argparse
import json
import math
import statistics
import sys
import time
import collections

import torch
from torch import nn
from torch.nn import functional as F

MASK64 = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64: the same 64-bit words from the same seed."""

    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & MASK64
        for i in range(1, 312):
            self.mt[i] = (6364136223846793005 * (self.mt[i - 1] ^ (self.mt[i - 1] >> 62)) + i) & MASK64
        self.index = 312

    def _twist(self):
        mt = self.mt
        for i in range(312):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + 156) % 312] ^ xa
        self.index = 0

    def next_u64(self):
        if self.index >= 312:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64

    def next_double(self):
        """xgrad's Generator::next_double: 53 random bits in [0, 1)."""
        return (self.next_u64() >> 11) * 2.0 ** -53


def mix_seed(seed, stream, step):
    """examples/seq_train's mix_seed (splitmix64 of seed, stream and step)."""
    z = (seed * 0x9E3779B97F4A7C15 + stream * 0xD1B54A32D192ED03 + step) & MASK64
    for _ in range(2):
        z = (z + 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
    return z


# examples/bahdanau/corpus.cpp's language, word for word.
DETERMINERS = [("the", "ka"), ("a", "mi")]
NOUNS = [("cat", "miro"), ("dog", "taku"), ("bird", "pila"), ("fish", "sunu"), ("child", "reba"),
         ("teacher", "lomi"), ("farmer", "kesa"), ("horse", "bodo"), ("king", "vara"), ("girl", "nia")]
ADJECTIVES = [("big", "ona"), ("small", "tiki"), ("red", "ruba"), ("old", "vesi"), ("happy", "lalu"),
              ("quiet", "semo")]
VERBS = [("sees", "mira"), ("likes", "amo"), ("follows", "segi"), ("feeds", "paso"), ("helps", "juva"),
         ("finds", "trova"), ("calls", "voka"), ("hears", "odi")]
ADVERBS = [("today", "oggi"), ("again", "ankor"), ("quickly", "lesto"), ("often", "spes")]
HELD_OUT, DATA = 21, 22  # bahdanau's streams
LONGEST = 10


def draw(gen, words, optional):
    if optional and gen.next_double() < 0.5:
        return None
    return words[min(len(words) - 1, int(gen.next_double() * len(words)))]


def sample_pair(gen):
    det1, adj1 = draw(gen, DETERMINERS, False), draw(gen, ADJECTIVES, True)
    noun1, verb = draw(gen, NOUNS, False), draw(gen, VERBS, False)
    det2, adj2 = draw(gen, DETERMINERS, False), draw(gen, ADJECTIVES, True)
    noun2, adv = draw(gen, NOUNS, False), draw(gen, ADVERBS, True)
    src = [det1[0]] + ([adj1[0]] if adj1 else []) + [noun1[0], verb[0], det2[0]] + ([adj2[0]] if adj2 else []) + \
          [noun2[0]] + ([adv[0]] if adv else []) + ["."]
    tgt = ([adv[1]] if adv else []) + [noun1[1]] + ([adj1[1]] if adj1 else []) + [det1[1], noun2[1]] + \
          ([adj2[1]] if adj2 else []) + [det2[1], verb[1], "."]
    return src, tgt


def vocab(side):
    words = ["<pad>", "<bos>", "<eos>", "."]
    for lexicon in (DETERMINERS, NOUNS, ADJECTIVES, VERBS, ADVERBS):
        words += [pair[side] for pair in lexicon]
    return {w: i for i, w in enumerate(words)}, words


SRC, SRC_WORDS = vocab(0)
TGT, TGT_WORDS = vocab(1)


def held_out_pairs(count, seed):
    gen, seen, out = MT19937_64(seed), set(), []
    while len(out) < count:
        src, tgt = sample_pair(gen)
        if " ".join(src) not in seen:
            seen.add(" ".join(src))
            out.append((src, tgt))
    return out


def training_pairs(n, held, gen):
    out = []
    while len(out) < n:
        src, tgt = sample_pair(gen)
        if " ".join(src) not in held:
            out.append((src, tgt))
    return out


def make_batch(pairs, num_steps):
    """d2l's truncate_pad of each sentence and its <eos>; dec_input is <bos> then the label shifted right."""
    def ids(v, words):
        return ([v[w] for w in words] + [v["<eos>"]])[:num_steps]
    srcs, tgts = [ids(SRC, s) for s, _ in pairs], [ids(TGT, t) for _, t in pairs]
    pad = lambda x: x + [0] * (num_steps - len(x))
    src = torch.tensor([pad(s) for s in srcs])
    label = torch.tensor([pad(t) for t in tgts])
    dec = torch.cat([torch.full((len(pairs), 1), TGT["<bos>"]), label[:, :-1]], 1)
    return src, torch.tensor([len(s) for s in srcs]), dec, label, torch.tensor([len(t) for t in tgts])


# d2l's code: its masked softmax is tools/bench_torch.py's, the rest follows.
from bench_torch import masked_softmax, sequence_mask  # noqa: E402  (the tools folder is this script's own)


class AdditiveAttention(nn.Module):
    def __init__(self, key_size, query_size, num_hiddens, dropout):
        super().__init__()
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens):
        queries, keys = self.W_q(queries), self.W_k(keys)
        features = torch.tanh(queries.unsqueeze(2) + keys.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class Seq2SeqEncoder(nn.Module):
    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size, num_hiddens, num_layers, dropout=dropout)

    def forward(self, X):
        return self.rnn(self.embedding(X).permute(1, 0, 2))


class Seq2SeqAttentionDecoder(nn.Module):
    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout):
        super().__init__()
        self.attention = AdditiveAttention(num_hiddens, num_hiddens, num_hiddens, dropout)
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size + num_hiddens, num_hiddens, num_layers, dropout=dropout)
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def init_state(self, enc_outputs, enc_valid_lens):
        outputs, hidden_state = enc_outputs
        return (outputs.permute(1, 0, 2), hidden_state, enc_valid_lens)

    def forward(self, X, state):
        enc_outputs, hidden_state, enc_valid_lens = state
        X = self.embedding(X).permute(1, 0, 2)
        outputs, self._attention_weights = [], []
        for x in X:
            query = torch.unsqueeze(hidden_state[-1], dim=1)
            context = self.attention(query, enc_outputs, enc_outputs, enc_valid_lens)
            x = torch.cat((context, torch.unsqueeze(x, dim=1)), dim=-1)
            out, hidden_state = self.rnn(x.permute(1, 0, 2), hidden_state)
            outputs.append(out)
            self._attention_weights.append(self.attention.attention_weights)
        outputs = self.dense(torch.cat(outputs, dim=0))
        return outputs.permute(1, 0, 2), [enc_outputs, hidden_state, enc_valid_lens]


class EncoderDecoder(nn.Module):
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, enc_X, dec_X, enc_valid_len):
        return self.decoder(dec_X, self.decoder.init_state(self.encoder(enc_X), enc_valid_len))[0]


class MaskedSoftmaxCELoss(nn.CrossEntropyLoss):
    def forward(self, pred, label, valid_len):
        weights = sequence_mask(torch.ones_like(label), valid_len)
        self.reduction = "none"
        unweighted_loss = super().forward(pred.permute(0, 2, 1), label)
        return (unweighted_loss * weights).mean(dim=1)


def xavier_init_weights(m):
    if type(m) == nn.Linear:
        nn.init.xavier_uniform_(m.weight)
    if type(m) == nn.GRU:
        for param in m._flat_weights_names:
            if "weight" in param:
                nn.init.xavier_uniform_(m._parameters[param])


def bleu(pred_seq, label_seq, k):
    """d2l's bleu; a prediction shorter than n tokens scores 0 (d2l divides by zero there)."""
    pred_tokens, label_tokens = pred_seq.split(" "), label_seq.split(" ")
    len_pred, len_label = len(pred_tokens), len(label_tokens)
    score = math.exp(min(0, 1 - len_label / len_pred))
    for n in range(1, k + 1):
        if len_pred < n:
            return 0.0
        num_matches, label_subs = 0, collections.defaultdict(int)
        for i in range(len_label - n + 1):
            label_subs[" ".join(label_tokens[i: i + n])] += 1
        for i in range(len_pred - n + 1):
            if label_subs[" ".join(pred_tokens[i: i + n])] > 0:
                num_matches += 1
                label_subs[" ".join(pred_tokens[i: i + n])] -= 1
        score *= math.pow(num_matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


def per_token(l, label_valid_len, num_steps):
    return l.sum().item() * num_steps / label_valid_len.sum().item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--embed", type=int, default=32)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--num-steps", type=int, default=LONGEST)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--held-out", type=int, default=200)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--bleu-k", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    held = held_out_pairs(a.held_out, mix_seed(a.seed, HELD_OUT, 0))
    held_sources = {" ".join(s) for s, _ in held}
    held_batch = make_batch(held, a.num_steps)
    data_gen = MT19937_64(mix_seed(a.seed, DATA, 0))
    encoder = Seq2SeqEncoder(len(SRC), a.embed, a.hidden, a.layers, a.dropout)
    decoder = Seq2SeqAttentionDecoder(len(TGT), a.embed, a.hidden, a.layers, a.dropout)
    net = EncoderDecoder(encoder, decoder)
    net.apply(xavier_init_weights)
    optimizer = torch.optim.Adam(net.parameters(), lr=a.lr)
    loss = MaskedSoftmaxCELoss()

    @torch.no_grad()
    def held_out_loss():
        net.eval()
        src, src_len, dec, label, label_len = held_batch
        value = per_token(loss(net(src, dec, src_len), label, label_len), label_len, a.num_steps)
        net.train()
        return value

    print(f"corpus: {len(SRC)} source words, {len(TGT)} target words; {len(held)} held-out pairs, e.g. "
          f"\"{' '.join(held[0][0])}\" => \"{' '.join(held[0][1])}\"; "
          f"{sum(p.numel() for p in net.parameters())} parameters; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    times, train_seconds = [], 0.0
    evals = [(0, held_out_loss(), 0.0)]
    net.train()
    for step in range(1, a.steps + 1):
        src, src_len, dec, label, label_len = make_batch(training_pairs(a.batch, held_sources, data_gen), a.num_steps)
        start = time.perf_counter()
        optimizer.zero_grad()
        l = loss(net(src, dec, src_len), label, label_len)
        l.sum().backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(net.parameters(), a.clip)
        optimizer.step()
        value = per_token(l, label_len, a.num_steps)
        times.append(time.perf_counter() - start)
        train_seconds += times[-1]
        if (a.eval_every > 0 and step % a.eval_every == 0) or step == a.steps:
            evals.append((step, held_out_loss(), train_seconds))
            print(f"step {step}: loss {value:.4f}, held-out loss {evals[-1][1]:.4f}", flush=True)

    # d2l's predict_seq2seq, the whole held-out set as one batch.
    with torch.no_grad():
        net.eval()
        src, src_len, _, _, _ = held_batch
        state = decoder.init_state(encoder(src), src_len)
        token = torch.full((len(held), 1), TGT["<bos>"])
        words, done = [[] for _ in held], [False] * len(held)
        for _ in range(a.num_steps):
            logits, state = decoder(token, state)
            token = logits.argmax(dim=2)
            for i, t in enumerate(token[:, 0].tolist()):
                if done[i]:
                    continue
                if t == TGT["<eos>"]:
                    done[i] = True
                else:
                    words[i].append(TGT_WORDS[t])
    scores = [bleu(" ".join(w), " ".join(t), a.bleu_k) for w, (_, t) in zip(words, held)]
    exact = sum(w == t for w, (_, t) in zip(words, held))
    for i in range(min(8, len(held))):
        print(f"{' '.join(held[i][0])} => {' '.join(words[i])}, bleu {scores[i]:.3f}")
    ms = 1e3 * statistics.median(times)
    mean_ms = 1e3 * sum(times) / len(times)
    print(f"ms per step {ms:.2f} (median; mean {mean_ms:.2f}), held-out loss {evals[-1][1]:.4f}, "
          f"mean BLEU-{a.bleu_k} {sum(scores) / len(scores):.3f}, exact {exact} of {len(held)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"framework": "pytorch", "version": torch.__version__, "threads": torch.get_num_threads(),
                       "results": [{"ms_per_step": ms, "mean_ms_per_step": mean_ms, "held_out_loss": evals[-1][1],
                                    "bleu": sum(scores) / len(scores), "exact": exact,
                                    "eval_steps": [e[0] for e in evals], "eval_loss": [e[1] for e in evals],
                                    "eval_train_seconds": [e[2] for e in evals]}]}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
