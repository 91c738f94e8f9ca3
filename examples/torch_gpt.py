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
    python examples/torch_gpt.py --backend cpu-numba --compare

--compare first prints whether the logits under certified() are the bits of mojolike's own
GPT (mojolike.models.GPT, Hugging Face GPT-2 layout) loaded with the same weights: they are
(the same ops in the same order: matmul then the bias add, layer_norm, attention, GELU tanh,
the tied head as a matmul with wte transposed).
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
        self.head.weight = self.wte.weight  # tied, as nanoGPT and GPT-2
        for mod in self.modules():  # nanoGPT's init (plain torch, before any certified() step)
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, mean=0.0, std=0.02)
            if isinstance(mod, nn.Linear) and mod.bias is not None:
                nn.init.zeros_(mod.bias)

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


def mojolike_twin(model: GPT, cfg: dict, backend: str | None):
    """mojolike's own GPT (mojolike.models.GPT, Hugging Face GPT-2 layout) with `model`'s
    weights: nn.Linear's (out, in) weights transposed into Conv1D's (in, out), exactly."""
    import numpy as np

    import mojolike.models
    twin = mojolike.models.GPT(vocab_size=cfg["vocab"], block_size=cfg["block_size"],
                               n_layer=cfg["n_layer"], n_head=cfg["n_head"], n_embd=cfg["n_embd"],
                               backend=backend)
    ours = {"transformer.wte.weight": model.wte.weight, "transformer.wpe.weight": model.wpe.weight,
            "transformer.ln_f.weight": model.ln_f.weight, "transformer.ln_f.bias": model.ln_f.bias}
    for i, blk in enumerate(model.blocks):
        for theirs, mine in (("ln_1", blk.ln_1), ("ln_2", blk.ln_2), ("attn.c_attn", blk.attn),
                             ("attn.c_proj", blk.proj), ("mlp.c_fc", blk.fc),
                             ("mlp.c_proj", blk.fc_proj)):
            t = mine.weight.detach()
            ours[f"transformer.h.{i}.{theirs}.weight"] = t.t() if t.ndim == 2 else t
            ours[f"transformer.h.{i}.{theirs}.bias"] = mine.bias
    for name, arr in twin.named_parameters():
        np.copyto(arr, ours[name].detach().contiguous().numpy())
    return twin


def compare_logits(cfg: dict, backend: str | None) -> str:
    """The example's logits under certified() against mojolike.models.GPT's with the same
    weights: "same bits", or how many differ."""
    import numpy as np
    torch.manual_seed(0)
    model = GPT(**cfg)
    x, y = next(batches(cfg, 1))
    with torch.no_grad(), mojolike.torch.certified(backend=backend):
        logits, _ = model(x, y)
    theirs = mojolike_twin(model, cfg, backend).logits(x.numpy(), backend=backend)
    ours = logits.numpy()
    differ = int((ours.view(np.uint32) != theirs.view(np.uint32)).sum())
    return "same bits" if differ == 0 else f"{differ} of {ours.size} differ"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=None, help="oracle, cpu-numba, cpu-cffi (default: env)")
    ap.add_argument("--numeric-mode", default=None)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=None, help="torch and numba threads")
    ap.add_argument("--tiny", action="store_true", help="the oracle-sized model")
    ap.add_argument("--config", choices=sorted(CONFIGS), default=None)
    ap.add_argument("--compare", action="store_true",
                    help="compare the logits with mojolike.models.GPT's on the same weights")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    name = a.config or ("tiny" if a.tiny else "small")
    if a.compare:
        print(f"torch_gpt config={name} logits against mojolike.models.GPT: "
              f"{compare_logits(CONFIGS[name], a.backend)}")
    model, loss = train(CONFIGS[name], a.steps, a.backend, a.numeric_mode)
    print(f"torch_gpt config={name} steps={a.steps} backend={a.backend} threads={a.threads} "
          f"loss={loss!r} digest={digest(model)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
