#!/usr/bin/env python3
"""The PyTorch yardstick for `trainer bench`: the same models and the same training step.

CPU, float32 (Debian's python3-torch works):
    /usr/bin/python3 bench/torch_bench.py                     # GPT-2 124M, shapes 4x64,8x256
    /usr/bin/python3 bench/torch_bench.py --arch llama --shapes 4x64
GPU (any PyTorch with CUDA):
    python3 bench/torch_bench.py --device cuda --dtype bf16 --shapes 16x1024 [--compile]

Models, as `trainer bench` builds them: GPT-2 124M (12 layers, 12 heads, 768 channels, vocab
50257, learned positions, LayerNorm, GELU (tanh), head tied to the token embedding), or with
--arch llama a Llama of the same depth and width (RMSNorm, rotary embeddings, SwiGLU width 2048,
4 key/value heads, vocab 32000, untied head). Weights ~ N(0, 0.02), biases zero.

The timed step, as `trainer bench` times it: zero the gradients, forward, mean cross-entropy,
backward, the global gradient norm with clipping at 1.0, AdamW (lr 3e-4, betas 0.9/0.999,
eps 1e-8, no weight decay). Fresh random tokens each step are made outside the timer; on CUDA
the timer waits for the device. bf16 means autocast bf16 compute with float32 weights and
optimizer state. Prints the median, min and max ms/step of --steps timed steps after --warmup,
tokens/s, and MFU: (6 N + 6 L T C) tokens / time (llm.c's count; N: every parameter once, the tied head once, the untied
Llama embedding excluded, as `trainer bench` counts) against the best float32 (CPU) matrix product measured here,
or --peak-tflops on CUDA (default 989.4: H100/H200 dense bf16).
"""
import argparse
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"])
    p.add_argument("--shapes", default="4x64,8x256", help="BxT[,BxT...]")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--threads", type=int, default=0, help="CPU threads; 0 = every CPU (as trainer bench)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=4, help="llama only")
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--intermediate", type=int, default=2048, help="llama only")
    p.add_argument("--vocab", type=int, default=0, help="0 = 50257 (gpt2) or 32000 (llama)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2)")
    p.add_argument("--peak-tflops", type=float, default=989.4)
    return p.parse_args()


def causal_attention(q, k, v):
    """(B, H, T, hs) -> (B, H, T, hs); PyTorch's fused kernel where it exists (2.0+)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.size(-2)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return att @ v


class RMSNorm(nn.Module):
    def __init__(self, c, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        C, self.H, self.llama = a.embd, a.heads, a.arch == "llama"
        self.KV = a.kv_heads if self.llama else a.heads
        self.hs = C // a.heads
        norm = (lambda: RMSNorm(C)) if self.llama else (lambda: nn.LayerNorm(C))
        self.ln_1, self.ln_2 = norm(), norm()
        self.qkv = nn.Linear(C, (self.H + 2 * self.KV) * self.hs, bias=not self.llama)
        self.proj = nn.Linear(C, C, bias=not self.llama)
        width = a.intermediate if self.llama else 4 * C
        self.fc = nn.Linear(C, 2 * width if self.llama else width, bias=not self.llama)
        self.fc_proj = nn.Linear(width, C, bias=not self.llama)

    def forward(self, x, rope):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split([self.H * self.hs, self.KV * self.hs, self.KV * self.hs], dim=-1)
        q = q.view(B, T, self.H, self.hs).transpose(1, 2)
        k = k.view(B, T, self.KV, self.hs).transpose(1, 2)
        v = v.view(B, T, self.KV, self.hs).transpose(1, 2)
        if self.llama:
            cos, sin = rope
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(self.H // self.KV, dim=1)
            v = v.repeat_interleave(self.H // self.KV, dim=1)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        h = self.fc(self.ln_2(x))
        if self.llama:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.fc_proj(h)


class Decoder(nn.Module):
    def __init__(self, a, max_t):
        super().__init__()
        self.a = a
        self.wte = nn.Embedding(a.vocab, a.embd)
        self.wpe = None if a.arch == "llama" else nn.Embedding(max_t, a.embd)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.ln_f = RMSNorm(a.embd) if a.arch == "llama" else nn.LayerNorm(a.embd)
        self.lm_head = nn.Linear(a.embd, a.vocab, bias=False)
        if a.arch == "gpt2":
            self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        rope = None
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        else:
            hs = self.a.embd // self.a.heads
            inv = 1.0 / (10000.0 ** (torch.arange(0, hs, 2, device=idx.device).float() / hs))
            ang = torch.outer(torch.arange(T, device=idx.device).float(), inv)
            ang = torch.cat((ang, ang), dim=-1)
            rope = (ang.cos()[None, None], ang.sin()[None, None])
        for block in self.blocks:
            x = block(x, rope)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def matmul_params(model, a):
    """N in 6 N tokens, counted as `trainer bench` counts it: every parameter once (the tied head
    once), less an untied token embedding, which is a lookup."""
    n = sum(p.numel() for p in model.parameters())
    return n - (a.vocab * a.embd if a.arch == "llama" else 0)


def cpu_ceiling_gflops():
    n = 1536
    x, y = torch.full((n, n), 0.5), torch.full((n, n), 0.25)
    best = 0.0
    for rep in range(4):
        t = time.perf_counter()
        z = x @ y
        s = time.perf_counter() - t
        if rep:
            best = max(best, 2 * n**3 / s / 1e9)
    assert abs(z[0, 0].item() - 0.125 * n) < 1e-2 * n
    return best


def main():
    a = parse_args()
    a.vocab = a.vocab or (32000 if a.arch == "llama" else 50257)
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)))
    torch.manual_seed(1337)
    dev = torch.device(a.device)
    model = Decoder(a, max(1024, max(t for _, t in shapes))).to(dev)
    n_mm = matmul_params(model, a)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    run = torch.compile(model) if a.compile else model
    amp = torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    print(f"torch bench: {a.arch}, {a.layers} layers, {a.heads} heads, {a.embd} channels, vocab {a.vocab}: "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {n_mm / 1e6:.1f}M in matrix products")
    if a.device == "cuda":
        ceiling = a.peak_tflops * 1e3
        print(f"device: {torch.cuda.get_device_name()}, {a.dtype}, torch {torch.__version__}; peak {a.peak_tflops} TFLOP/s")
    else:
        ceiling = cpu_ceiling_gflops()
        print(f"device: cpu, {torch.get_num_threads()} threads, torch {torch.__version__}; "
              f"sgemm ceiling {ceiling:.1f} GFLOP/s (best 1536^3 matmul)")
    print(f"{'shape':<8} {'steps':>6} {'ms/step':>10} {'min ms':>10} {'max ms':>10} {'tokens/s':>11} {'GFLOP/s':>10} {'MFU':>7}")
    ok = True
    for B, T in shapes:
        times = []
        for it in range(a.warmup + a.steps):
            x = torch.randint(0, a.vocab, (B, T), device=dev)
            y = torch.randint(0, a.vocab, (B, T), device=dev)
            if a.device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            with amp:
                loss = run(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if a.device == "cuda":
                torch.cuda.synchronize()
            s = time.perf_counter() - t
            if it >= a.warmup:
                times.append(s)
            if it == 0 and abs(loss.item() - math.log(a.vocab)) > 0.5:
                print(f"first loss {loss.item():.3f} is not near ln(vocab) = {math.log(a.vocab):.3f}")
                ok = False
        med = statistics.median(times)
        gflops = (6 * n_mm + 6 * a.layers * T * a.embd) * B * T / med / 1e9  # llm.c's 6N + 6LTC
        print(f"{f'{B}x{T}':<8} {a.steps:>6} {med * 1e3:>10.1f} {min(times) * 1e3:>10.1f} {max(times) * 1e3:>10.1f} "
              f"{B * T / med:>11.1f} {gflops:>10.1f} {100 * gflops / ceiling:>6.1f}%", flush=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
