"""mojolike.models.GPT against a torch GPT-2 written here with Hugging Face's parameter names, both
loaded from the same safetensors file: logits, loss, and a 50-step AdamW loss curve.

The torch model is GPT-2 as Hugging Face's GPT2LMHeadModel computes it (Conv1D weights in (in,
out) layout as plain Parameters, x @ W + b; F.layer_norm; the fused qkv split into heads;
F.scaled_dot_product_attention(is_causal=True); F.gelu(approximate='tanh'); the head tied to
wte), in float32 on the CPU, loaded with `load_state_dict(strict=True)` from the file
`GPT.save_safetensors` wrote.

Tolerances. torch 2.13's CPU kernels sum in other orders (blocked GEMMs, vectorized
reductions), may fuse multiply-adds, and its exp/tanh are not correctly rounded, so every op
differs by a few ulp of its largest term. Through two layers (two layer norms, four matmuls of
at most 128 terms and attention over at most 32 keys per layer, then ln_f and the head's
32-term dots), with weights drawn at 0.3 so the logits reach about 6, the logits stay within
2e-5 of the largest |logit| (measured: 1.1e-6) and the mean loss within 1e-5 relative
(measured: 8e-8); the erf GELU in place of the tanh one moves the logits by 4e-4 of the
largest, twenty times the tolerance. In training (GPT-2's init, lr 3e-3, the same AdamW
formula on both sides, a new batch of the shipped text each step) the gradient differences
carry into the parameters, so the curves drift apart slowly: over 50 steps the loss stays
within 1e-5 relative of torch's at every step (measured: at most 2.4e-7), while it falls from
about 3.96 to 3.01 (the mean of the first and of the last five steps).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

import mojolike
from mojolike import data
from mojolike.models import GPT

CONFIG = {"vocab_size": 64, "block_size": 32, "n_layer": 2, "n_head": 2, "n_embd": 32}
B, T = 4, 32


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: weight (in, out), y = x @ weight + bias."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, c: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn, self.c_proj = Conv1D(c, 3 * c), Conv1D(c, c)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(c, 4 * c), Conv1D(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c: int, n_head: int, eps: float):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(c, eps=eps), nn.LayerNorm(c, eps=eps)
        self.attn, self.mlp = Attention(c, n_head), MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TorchGPT2(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, eps=1e-5):
        super().__init__()
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(vocab_size, n_embd), "wpe": nn.Embedding(block_size, n_embd),
            "h": nn.ModuleList(Block(n_embd, n_head, eps) for _ in range(n_layer)),
            "ln_f": nn.LayerNorm(n_embd, eps=eps)})

    def forward(self, tokens, targets=None):
        tr = self.transformer
        pos = torch.arange(tokens.shape[1])
        x = tr.wte(tokens) + tr.wpe(pos)
        for block in tr.h:
            x = block(x)
        logits = F.linear(tr.ln_f(x), tr.wte.weight)  # the tied head
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def both(tmp_path, seed: int, spread: float | None = None):
    """(mojolike GPT, torch GPT-2) with the same weights, through one safetensors file; with
    `spread`, every weight drawn wider than GPT-2's init so that roundings show."""
    model = GPT(**CONFIG, seed=seed, backend="cpu-numba")
    if spread is not None:
        rng = np.random.default_rng(seed)
        for name, a in model.named_parameters():
            one = 1.0 if ".ln_" in name and name.endswith("weight") else 0.0
            a[...] = rng.standard_normal(a.shape) * spread + one
    path = tmp_path / "model.safetensors"
    model.save_safetensors(path)
    ours = GPT.from_safetensors(path, backend="cpu-numba")
    theirs = TorchGPT2(**CONFIG)
    theirs.load_state_dict(load_file(str(path)), strict=True)
    return ours, theirs


def tokens_of(step: int):
    tokens, targets = data.batch(step, B, T)
    return tokens % 64, targets % 64


def test_logits_and_loss_agree_with_a_torch_gpt2_loaded_from_the_same_file(tmp_path):
    ours, theirs = both(tmp_path, seed=1, spread=0.3)
    tokens, targets = tokens_of(0)
    z = ours.logits(tokens)
    with torch.no_grad():
        tz, tloss = theirs(torch.from_numpy(tokens), torch.from_numpy(targets))
    top = float(np.abs(z).max())
    assert top > 1.0  # wide logits: the comparison is not of near-zeros
    assert float(np.abs(z - tz.numpy()).max()) <= 2e-5 * top
    loss = float(mojolike.fold(ours.token_losses(tokens, targets).reshape(-1))) / (B * T)
    tape = mojolike.Tape(backend="cpu-numba")
    tape_loss = ours.forward(tape, tokens, targets).item()
    assert abs(tape_loss - loss) <= 1e-6 * loss
    assert abs(tape_loss - float(tloss)) <= 1e-5 * float(tloss)


def test_fifty_adamw_steps_follow_torchs_loss_curve(tmp_path):
    ours, theirs = both(tmp_path, seed=2)
    hyper = {"lr": 3e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
    opt = mojolike.AdamW(ours.parameters(), backend="cpu-numba", **hyper)
    params = dict(theirs.named_parameters())
    order = [params[n] for n in ours.NAMES]  # the same order, every torch parameter once
    assert len(order) == len(params)
    topt = torch.optim.AdamW(order, foreach=False, **hyper)
    tape = mojolike.Tape(backend="cpu-numba")
    ours.register(tape)
    mark = tape.mark()
    mine, torchs = [], []
    for step in range(50):
        tokens, targets = tokens_of(step)
        loss = ours.forward(tape, tokens, targets)
        mine.append(loss.item())
        opt.step(tape.backward(loss))
        tape.reset_to(mark)
        topt.zero_grad()
        _, tloss = theirs(torch.from_numpy(tokens), torch.from_numpy(targets))
        tloss.backward()
        topt.step()
        torchs.append(float(tloss.detach()))
    mine, torchs = np.array(mine), np.array(torchs)
    gap = np.abs(mine - torchs) / torchs
    assert gap.max() <= 1e-5, (gap.max(), int(gap.argmax()))
    assert mine[-5:].mean() < 0.85 * mine[:5].mean(), (mine[:5], mine[-5:])
