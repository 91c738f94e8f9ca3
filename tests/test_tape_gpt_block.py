"""A GPT-2 block written on the tape exactly as torch code reads agrees with torch autograd, and its
output and gradients are the same bits on the oracle, on cpu-numba (1 and 2 threads) and on
cpu-cffi.

The block is nanoGPT's / Hugging Face GPT-2's pre-norm block: ln_1, causal self-attention with a
fused qkv projection in Conv1D layout (x @ W + b, W of shape (C, 3C)) split into q, k, v, heads by
view(B, T, nh, hs).transpose(1, 2), scaled_dot_product_attention(is_causal=True), heads merged
back, c_proj and the residual; ln_2, the MLP with gelu(approximate='tanh') and the residual. One
function builds it from either namespace: the tape, or torch.

Torch comparison: torch 2.13 CPU float32 blocks its GEMMs and reductions in other orders, may fuse
multiply-adds, and its exp/tanh are not correctly rounded, so each sum differs by a few ulp of its
largest term; through two layer norms, five matmuls of at most 64 terms and attention over at most
6 keys, with values and gradients up to about 25 in magnitude, the output and every gradient stay
within 1e-4 relative plus 1e-5 absolute of torch's (the largest measured difference is under a
quarter of that), while a wrong rule (a missing residual path, a transposed weight, the erf GELU
for the tanh one) moves them by far more.
"""
from __future__ import annotations

import numba
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_bits

from mojolike import Tape

NAMES = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
         "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
         "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")


def gpt2_block(o, x, p, n_head):
    """The block; `o` is the tape or `TorchF`, x and p its values."""
    B, T, C = x.size()
    h = o.layer_norm(x, (C,), p["ln_1.weight"], p["ln_1.bias"])
    q, k, v = (h @ p["attn.c_attn.weight"] + p["attn.c_attn.bias"]).split(C, dim=2)
    k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
    q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
    v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
    y = o.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    x = x + (y @ p["attn.c_proj.weight"] + p["attn.c_proj.bias"])
    h = o.layer_norm(x, (C,), p["ln_2.weight"], p["ln_2.bias"])
    h = o.gelu(h @ p["mlp.c_fc.weight"] + p["mlp.c_fc.bias"], approximate="tanh")
    return x + (h @ p["mlp.c_proj.weight"] + p["mlp.c_proj.bias"])


class TorchF:
    layer_norm, gelu = staticmethod(F.layer_norm), staticmethod(F.gelu)
    scaled_dot_product_attention = staticmethod(F.scaled_dot_product_attention)


def weights(C, seed):
    rng = np.random.default_rng(seed)
    shapes = {"ln_1.weight": (C,), "ln_1.bias": (C,), "attn.c_attn.weight": (C, 3 * C),
              "attn.c_attn.bias": (3 * C,), "attn.c_proj.weight": (C, C),
              "attn.c_proj.bias": (C,), "ln_2.weight": (C,), "ln_2.bias": (C,),
              "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,),
              "mlp.c_proj.weight": (4 * C, C), "mlp.c_proj.bias": (C,)}
    out = {}
    for n in NAMES:
        a = rng.standard_normal(shapes[n]) * (0.3 if n.endswith("weight") else 0.1)
        if n.startswith("ln") and n.endswith("weight"):
            a = a + 1.0
        out[n] = a.astype(np.float32)
    return out


def inputs(B, T, C, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((B, T, C)).astype(np.float32),
            rng.standard_normal((B, T, C)).astype(np.float32))


def on_tape(backend, B, T, C, n_head, seed=0):
    """(output, [dx, *parameter gradients in NAMES order]) of sum(block(x) * R) on the tape."""
    w = weights(C, seed)
    x0, r = inputs(B, T, C, seed + 1)
    tape = Tape(backend=backend)
    x = tape.param(x0)
    p = {n: tape.param(w[n]) for n in NAMES}
    y = gpt2_block(tape, x, p, n_head)
    return y.data, tape.backward((y * tape.const(r)).sum())


def test_the_tapes_gpt2_block_agrees_with_torch_autograd():
    B, T, C, nh = 2, 6, 16, 4
    y, grads = on_tape("cpu-numba", B, T, C, nh)
    w = weights(C, 0)
    x0, r = inputs(B, T, C, 1)
    x = torch.from_numpy(x0.copy()).requires_grad_()
    p = {n: torch.from_numpy(w[n].copy()).requires_grad_() for n in NAMES}
    ty = gpt2_block(TorchF, x, p, nh)
    (ty * torch.from_numpy(r)).sum().backward()
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    for name, g, t in zip(("x",) + NAMES, grads, [x] + [p[n] for n in NAMES]):
        assert g is not None, name
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def assert_same(a, b, what):
    ya, ga = a
    yb, gb = b
    assert_same_bits(ya.reshape(-1), yb.reshape(-1), f"{what} output")
    for name, u, v in zip(("x",) + NAMES, ga, gb):
        assert_same_bits(u.reshape(-1), v.reshape(-1), f"{what} {name}")


def test_the_tiny_block_has_the_oracles_bits_on_cpu_numba_and_cpu_cffi():
    want = on_tape("oracle", 1, 4, 8, 2)
    assert_same(on_tape("cpu-numba", 1, 4, 8, 2), want, "cpu-numba")
    assert_same(on_tape("cpu-cffi", 1, 4, 8, 2), want, "cpu-cffi")


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba runs one thread here")
def test_the_block_gives_the_same_bits_with_one_and_two_numba_threads():
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = on_tape("cpu-numba", 2, 12, 32, 4, seed=5)
        numba.set_num_threads(2)
        two = on_tape("cpu-numba", 2, 12, 32, 4, seed=5)
    finally:
        numba.set_num_threads(before)
    assert_same(one, two, "2 threads")
