"""A nanoGPT-style model in plain torch, trained under `mojolike.torch.certified()`.

The model is ordinary torch (nn.Module, nn.Linear, nn.Embedding, nn.LayerNorm,
F.scaled_dot_product_attention(is_causal=True), F.gelu(approximate="tanh"),
F.cross_entropy); the optimizer is `mojolike.torch.optim.AdamW`. Every aten op of the
forward, the backward and the step runs on mojolike's kernels or is an exact pass-through;
an op that is neither would be refused by name. The initial weights and the batches come
from torch's generator outside the mode (plain torch, the same bits on every machine).

It prints one line: the configuration, the last loss and the md5 of every parameter's
bytes after the last step. The digest is the same on cpu-numba and cpu-cffi, 1 and 2
threads (and on the oracle, for --tiny):

    python examples/torch_gpt.py --backend cpu-numba --threads 1
    python examples/torch_gpt.py --backend oracle --tiny --steps 2
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys


def _threads_from_argv() -> None:
    # the thread counts are set before torch and numba start their pools
    if "--threads" in sys.argv:
        n = sys.argv[sys.argv.index("--threads") + 1]
        os.environ["NUMBA_NUM_THREADS"] = n
        os.environ["OMP_NUM_THREADS"] = n


_threads_from_argv()

import torch
import torch.nn.functional as F
from torch import nn

import mojolike.torch
from mojolike.torch.optim import AdamW

CONFIGS = {
    "small": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab": 64, "batch": 4},
    "tiny": {"n_layer": 1, "n_head": 2, "n_embd": 8, "block_size": 4, "vocab": 16, "batch": 2},
    "bench": {"n_layer": 4, "n_head": 4, "n_embd": 256, "block_size": 256, "vocab": 256, "batch": 8},
}


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.fc_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab, **_):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, ids, targets):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def batches(cfg: dict, steps: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    shape = (cfg["batch"], cfg["block_size"] + 1)
    for _ in range(steps):
        d = torch.randint(0, cfg["vocab"], shape, generator=g)
        yield d[:, :-1].contiguous(), d[:, 1:].contiguous()


def digest(model: nn.Module) -> str:
    h = hashlib.md5()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def train(cfg: dict, steps: int, backend: str | None, numeric_mode: str | None = None):
    torch.manual_seed(0)
    model = GPT(**cfg)
    opt = AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, backend=backend,
                numeric_mode=numeric_mode)
    loss = None
    data = list(batches(cfg, steps))
    with mojolike.torch.certified(backend=backend, numeric_mode=numeric_mode):
        for x, y in data:
            _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return model, loss.item()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=None, help="oracle, cpu-numba, cpu-cffi (default: env)")
    ap.add_argument("--numeric-mode", default=None)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=None, help="torch and numba threads")
    ap.add_argument("--tiny", action="store_true", help="the oracle-sized model")
    ap.add_argument("--config", choices=sorted(CONFIGS), default=None)
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    name = a.config or ("tiny" if a.tiny else "small")
    model, loss = train(CONFIGS[name], a.steps, a.backend, a.numeric_mode)
    print(f"torch_gpt config={name} steps={a.steps} backend={a.backend} threads={a.threads} "
          f"loss={loss!r} digest={digest(model)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
