"""The tape's transformer-era ops: every forward is the public function's bits, every gradient is
the composition of the public backward functions' bits, the graphs agree with torch autograd, and
refusals name the op and leave the tape unchanged.

Each case builds y from parameters and constants and takes loss = (y * R).sum(), so y's upstream
gradient is exactly R (sum's backward is 1, and 1 * R is R): the expected gradients are the public
backward functions applied to R.

Torch comparisons: torch sums broadcast dimensions, matmul entries, softmax rows, layer_norm rows
and attention scores in its own orders (blocked, vectorized, possibly fused multiply-adds) and its
exp/log/tanh/erf are not correctly rounded, so values and gradients differ from ours by a few ulp
of the largest term of a sum; on these shapes (at most 24 terms per sum, terms below about 10 in
magnitude) that is far below 2e-5 relative plus 2e-5 absolute, while a wrong rule (a missing
term, a transposed operand, a sign, a wrong divisor) moves them by far more.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_bits as _same

import mojolike
from mojolike import Generator, Refusal, Tape

BACKENDS = ("oracle", "cpu-numba", "cpu-cffi")


def same(got, want, what=""):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    _same(got.reshape(-1), want.reshape(-1), what)


def data(shape, seed, scale=1.0, low=None):
    a = np.random.default_rng(seed).standard_normal(shape) * scale
    if low is not None:
        a = np.abs(a) + low
    return np.asarray(a, np.float32)


f = np.float32


def mul(a, b):
    return np.multiply(a, b, dtype=np.float32)


def div(a, b):
    return np.divide(a, b, dtype=np.float32)


class TorchF:
    """The tape's op names spelled in torch, for the same build functions."""

    add, sub, mul, div = torch.add, torch.sub, torch.mul, torch.div
    neg, exp, log, tanh = torch.neg, torch.exp, torch.log, torch.tanh
    matmul, cat, split, narrow = torch.matmul, torch.cat, torch.split, torch.narrow
    layer_norm, gelu = staticmethod(F.layer_norm), staticmethod(F.gelu)

    @staticmethod
    def scaled_dot_product_attention(q, k, v, attn_mask=None, **kw):
        mask = None if attn_mask is None else torch.from_numpy(attn_mask)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)

    @staticmethod
    def softmax(x, dim=-1):
        return torch.softmax(x, dim)

    @staticmethod
    def log_softmax(x, dim=-1):
        return torch.log_softmax(x, dim)


def then(y, grads):
    return y, grads(y)


def swap_parts(o, a, b, c):
    return o.cat([b, c, a * 2], dim=1)


def scatter(shape, key, g):
    z = np.zeros(shape, np.float32)
    z[key] = g
    return z


MASK = np.array([[True, False, True, True], [True, True, False, False], [False, True, True, True],
                 [True, True, True, False]])


def sdpa_expect(on, P, C, R, **kw):
    y = mojolike.scaled_dot_product_attention(*P, **kw, **on)
    return y, list(mojolike.scaled_dot_product_attention_backward(R, *P, **kw, **on))


# name: (params, consts, build(o, P, C) -> y, expect(on, P, C, R) -> (y, [grads]))
CASES = {
    "add_bias": ([data((3, 4), 1), data(4, 2)], [],
                 lambda o, P, C: P[0] + P[1],
                 lambda on, P, C, R: (P[0] + P[1], [R, mojolike.sum(R, dim=0, **on)])),
    "add_outer": ([data((3, 1), 1), data((1, 4), 2)], [],
                  lambda o, P, C: o.add(P[0], P[1]),
                  lambda on, P, C, R: (P[0] + P[1], [mojolike.sum(R, 1, True, **on),
                                                     mojolike.sum(R, 0, True, **on)])),
    "sub_bcast": ([data((2, 3), 3), data(3, 4)], [],
                  lambda o, P, C: P[0] - P[1],
                  lambda on, P, C, R: (P[0] - P[1], [R, mojolike.sum(-R, dim=0, **on)])),
    "mul_bcast": ([data((2, 3, 4), 5), data((3, 1), 6)], [],
                  lambda o, P, C: P[0] * P[1],
                  lambda on, P, C, R: (mul(P[0], P[1]), [
                      mul(R, P[1]), mojolike.sum(mul(R, P[0]), (0, 2), **on).reshape(3, 1)])),
    "div_bcast": ([data((3, 4), 7), data(4, 8, low=0.5)], [],
                  lambda o, P, C: P[0] / P[1],
                  lambda on, P, C, R: (div(P[0], P[1]), [
                      div(R, P[1]),
                      mojolike.sum(mul(-R, div(div(P[0], P[1]), P[1])), dim=0, **on)])),
    "python_numbers": ([data((2, 5), 9)], [],
                       lambda o, P, C: ((P[0] * 0.125 + 1) - 0.1) / 3,
                       lambda on, P, C, R: (
                           div(((P[0] * f(0.125)) + f(1)) - f(0.1), f(3)),
                           [mul(div(R, f(3)), f(0.125))])),
    "numbers_on_the_left": ([data((2, 5), 10, low=0.25)], [],
                            lambda o, P, C: 1 - 2 / P[0],
                            lambda on, P, C, R: (
                                f(1) - div(f(2), P[0]),
                                [mul(np.negative(-R), div(div(f(2), P[0]), P[0]))])),
    "neg": ([data((3, 2), 11)], [], lambda o, P, C: -P[0],
            lambda on, P, C, R: (-P[0], [-R])),
    "exp": ([data((3, 4), 12)], [], lambda o, P, C: o.exp(P[0]),
            lambda on, P, C, R: then(mojolike.math.expf(P[0], **on), lambda y: [mul(R, y)])),
    "log": ([data((3, 4), 13, low=0.1)], [], lambda o, P, C: o.log(P[0]),
            lambda on, P, C, R: (mojolike.math.logf(P[0], **on), [div(R, P[0])])),
    "tanh": ([data((3, 4), 14, 2.0)], [], lambda o, P, C: o.tanh(P[0]),
             lambda on, P, C, R: then(mojolike.math.tanhf(P[0], **on),
                                      lambda y: [mul(R, f(1) - mul(y, y))])),
    "sum_dims_keepdim": ([data((2, 3, 4), 15)], [],
                         lambda o, P, C: P[0].sum(dim=(0, 2), keepdim=True),
                         lambda on, P, C, R: (mojolike.sum(P[0], (0, 2), True, **on),
                                              [np.broadcast_to(R, (2, 3, 4))])),
    "mean_dim": ([data((2, 3, 4), 16)], [], lambda o, P, C: P[0].mean(dim=1),
                 lambda on, P, C, R: (mojolike.mean(P[0], 1, **on),
                                      [np.broadcast_to(div(R, f(3))[:, None, :], (2, 3, 4))])),
    "mean_all": ([data((3, 7), 17)], [], lambda o, P, C: P[0].mean() * 1,
                 lambda on, P, C, R: (div(f(mojolike.fold(P[0], **on)), f(21)),
                                      [np.full((3, 7), div(R, f(21)), np.float32)])),
    "view_transpose": ([data((2, 6), 18)], [], lambda o, P, C: P[0].view(3, -1).transpose(0, 1),
                       lambda on, P, C, R: (P[0].reshape(3, 4).T, [R.T.reshape(2, 6)])),
    "reshape_permute_mT": ([data((2, 3, 4), 19)], [],
                           lambda o, P, C: P[0].permute(2, 0, 1).reshape((4, 6)).mT,
                           lambda on, P, C, R: (P[0].transpose(2, 0, 1).reshape(4, 6).T,
                                                [R.T.reshape(4, 2, 3).transpose(1, 2, 0)])),
    "getitem": ([data((3, 4, 5), 20)], [], lambda o, P, C: P[0][1:, None, ..., ::2],
                lambda on, P, C, R: (P[0][1:, None, ..., ::2],
                                     [scatter((3, 4, 5), np.s_[1:, None, ..., ::2], R)])),
    "getitem_ints": ([data((3, 4), 21)], [], lambda o, P, C: P[0][-1, 1:3],
                     lambda on, P, C, R: (P[0][-1, 1:3], [np.pad(R[None, :], ((2, 0), (1, 1)))])),
    "narrow": ([data((3, 4), 22)], [], lambda o, P, C: o.narrow(P[0], 1, 1, 2),
               lambda on, P, C, R: (P[0][:, 1:3], [np.pad(R, ((0, 0), (1, 1)))])),
    "cat_split": ([data((2, 4), 23), data((2, 1), 24)], [],
                  lambda o, P, C: swap_parts(o, *o.split(P[0], [1, 3], dim=1), P[1]),
                  lambda on, P, C, R: (np.concatenate([P[0][:, 1:], P[1], P[0][:, :1] * f(2)], 1),
                                       [np.concatenate([mul(R[:, 4:], f(2)), R[:, :3]], 1),
                                        R[:, 3:4]])),
    "softmax_last": ([data((3, 5), 25, 3.0)], [], lambda o, P, C: o.softmax(P[0], dim=-1),
                     lambda on, P, C, R: then(mojolike.softmax(P[0], -1, **on), lambda y: [
                         mojolike.softmax_backward(R, y, -1, **on)])),
    "softmax_dim0": ([data((3, 5), 26, 3.0)], [], lambda o, P, C: P[0].softmax(0),
                     lambda on, P, C, R: then(mojolike.softmax(P[0], 0, **on), lambda y: [
                         mojolike.softmax_backward(R, y, 0, **on)])),
    "log_softmax": ([data((2, 3, 4), 27, 3.0)], [], lambda o, P, C: o.log_softmax(P[0], dim=1),
                    lambda on, P, C, R: then(mojolike.log_softmax(P[0], 1, **on), lambda y: [
                        mojolike.log_softmax_backward(R, y, 1, **on)])),
    "layer_norm_affine": ([data((2, 3, 4), 28, 2.0), data(4, 29), data(4, 30)], [],
                          lambda o, P, C: o.layer_norm(P[0], (4,), P[1], P[2], 1e-5),
                          lambda on, P, C, R: (mojolike.layer_norm(P[0], (4,), P[1], P[2], **on),
                                               list(mojolike.layer_norm_backward(
                                                   R, P[0], (4,), P[1], P[2], 1e-5, **on)))),
    "layer_norm_two_dims_plain": ([data((2, 3, 4), 31)], [],
                                  lambda o, P, C: o.layer_norm(P[0], (3, 4)),
                                  lambda on, P, C, R: (mojolike.layer_norm(P[0], (3, 4), **on), [
                                      mojolike.layer_norm_backward(R, P[0], (3, 4), **on)[0]])),
    "layer_norm_bias_only": ([data((3, 4), 32), data(4, 33)], [],
                             lambda o, P, C: o.layer_norm(P[0], (4,), None, P[1]),
                             lambda on, P, C, R: (mojolike.layer_norm(P[0], (4,), None, P[1], **on),
                                                  [g for g in mojolike.layer_norm_backward(
                                                      R, P[0], (4,), None, P[1], **on)
                                                   if g is not None])),
    "gelu_erf": ([data((3, 4), 34, 2.0)], [], lambda o, P, C: o.gelu(P[0]),
                 lambda on, P, C, R: (mojolike.gelu(P[0], **on),
                                      [mojolike.gelu_backward(R, P[0], **on)])),
    "gelu_tanh": ([data((3, 4), 35, 2.0)], [], lambda o, P, C: o.gelu(P[0], approximate="tanh"),
                  lambda on, P, C, R: (mojolike.gelu(P[0], "tanh", **on),
                                       [mojolike.gelu_backward(R, P[0], "tanh", **on)])),
    "matmul_broadcast": ([data((2, 1, 3, 4), 36), data((5, 4, 2), 37)], [],
                         lambda o, P, C: P[0] @ P[1],
                         lambda on, P, C, R: (mojolike.matmul(P[0], P[1], **on),
                                              list(mojolike.matmul_backward(R, P[0], P[1], **on)))),
    "sdpa_causal": ([data((1, 2, 4, 3), 38), data((1, 2, 4, 3), 39), data((1, 2, 4, 2), 40)], [],
                    lambda o, P, C: o.scaled_dot_product_attention(*P, is_causal=True),
                    lambda on, P, C, R: sdpa_expect(on, P, C, R, is_causal=True)),
    "sdpa_bool_mask_scale": ([data((1, 1, 4, 3), 41), data((1, 1, 4, 3), 42),
                              data((1, 1, 4, 3), 43)], [],
                             lambda o, P, C: o.scaled_dot_product_attention(
                                 *P, attn_mask=MASK, scale=0.7),
                             lambda on, P, C, R: sdpa_expect(on, P, C, R, attn_mask=MASK,
                                                             scale=0.7)),
}
TORCH_SKIP = {"numbers_on_the_left"}  # torch agrees too, but checked bitwise below instead


def run_tape(case, backend):
    params, consts, build, _ = CASES[case]
    tape = Tape(backend=backend)
    P = [tape.param(a.copy()) for a in params]
    C = [tape.const(a) for a in consts]
    y = build(tape, P, C)
    r = data(y.shape, 99)
    loss = (y * tape.const(r)).sum()
    return y.data, tape.backward(loss), r


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_every_op_gives_the_public_functions_bits_forward_and_backward(case, backend):
    params, consts, _, expect = CASES[case]
    y, grads, r = run_tape(case, backend)
    want_y, want = expect({"backend": backend}, params, consts, r)
    same(y, want_y, f"{case} forward")
    assert len(grads) == len(want)
    for i, (g, w) in enumerate(zip(grads, want)):
        same(g, w, f"{case} gradient {i}")


@pytest.mark.parametrize("case", [c for c in CASES if c not in TORCH_SKIP])
def test_every_op_agrees_with_torch_autograd(case):
    params, consts, build, _ = CASES[case]
    y, grads, r = run_tape(case, "cpu-numba")
    P = [torch.from_numpy(a.copy()).requires_grad_() for a in params]
    C = [torch.from_numpy(a) for a in consts]
    ty = build(TorchF, P, C)
    (ty * torch.from_numpy(r)).sum().backward()
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=2e-5, atol=2e-5)
    for g, p in zip(grads, P):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=2e-5, atol=2e-5)


def test_the_tapes_bits_are_the_same_on_the_oracle_and_the_cpu_backends():
    for case in ("mul_bcast", "layer_norm_affine", "matmul_broadcast", "sdpa_causal", "cat_split"):
        y0, g0, _ = run_tape(case, "oracle")
        for b in ("cpu-numba", "cpu-cffi"):
            y1, g1, _ = run_tape(case, b)
            same(y1, y0, f"{case} {b}")
            for a, c in zip(g1, g0):
                same(a, c, f"{case} {b} gradient")


def test_a_bias_broadcast_over_rows_gets_the_sum_of_the_rows_of_its_gradient():
    tape = Tape(backend="cpu-numba")
    h, b = tape.param(data((5, 3), 1)), tape.param(data(3, 2))
    dy = data((5, 3), 3)
    _, db = tape.backward(tape.sum(tape.mul(tape.add(h, b), tape.const(dy))))
    same(db, mojolike.sum(dy, dim=0, backend="cpu-numba"))


def test_attention_dropout_takes_the_generators_next_stream_and_its_backward_replays_it():
    P = [data((1, 2, 3, 4), 50), data((1, 2, 5, 4), 51), data((1, 2, 5, 2), 52)]
    gen = Generator(5)
    gen.next_stream()  # the tape's call takes stream 1
    tape = Tape(backend="cpu-numba")
    q, k, v = (tape.param(a.copy()) for a in P)
    y = tape.scaled_dot_product_attention(q, k, v, dropout_p=0.3, generator=gen)
    assert gen.state_dict()["counter"] == 2
    r = data(y.shape, 53)
    grads = tape.backward((y * tape.const(r)).sum())
    on = {"backend": "cpu-numba", "dropout_p": 0.3, "generator": Generator(5), "stream": 1}
    same(y.data, mojolike.scaled_dot_product_attention(*P, **on))
    for g, w in zip(grads, mojolike.scaled_dot_product_attention_backward(r, *P, **on)):
        same(g, w, "dropout gradient")
    undropped = mojolike.scaled_dot_product_attention(*P, backend="cpu-numba")
    assert not np.array_equal(y.data, undropped)  # the mask did drop something


# -- operators and Python numbers ------------------------------------------------------------------
def test_operators_read_as_torch_and_x_plus_x_works():
    tape = Tape(backend="cpu-numba")
    a = data((2, 3), 60)
    x = tape.param(a.copy())
    w = tape.const(data((3, 2), 61))
    same((x + x).data, a + a)
    same((2 * x).data, f(2) * a)
    same((x - 1).data, a - f(1))
    same((1 - x).data, f(1) - a)
    same((x / 4).data, a / f(4))
    same((3 / x).data, div(f(3), a))
    same((-x).data, -a)
    same((x @ w).data, mojolike.matmul(a, w.data, backend="cpu-numba"))
    same(x.T.data, a.T)
    same(x.mT.data, a.T)
    same((x * 0.1).data, a * f(0.1))  # 0.1 rounded to binary32 once
    (g,) = tape.backward((x + x).sum())
    same(g, np.full((2, 3), 2, np.float32))
    assert x.size() == (2, 3) and x.size(-1) == 3 and x.dim() == 2 and len(x) == 2
    assert x.contiguous() is x
    same((np.float32(2) * x).data, f(2) * a)  # a numpy scalar is a Python number here
    same((np.int64(3) - x).data, f(3) - a)


def test_an_operator_on_a_value_dropped_by_reset_to_is_refused_by_the_ops_name():
    tape = Tape(backend="cpu-numba")
    x = tape.param(data((2, 3), 64))
    m = tape.mark()
    y = x * 2
    tape.reset_to(m)
    with pytest.raises(Refusal) as e:
        y + 1
    assert (e.value.entry_point, e.value.option) == ("mojolike.Tape.add", "a")
    with pytest.raises(Refusal) as e:
        x + y
    assert (e.value.entry_point, e.value.option) == ("mojolike.Tape.add", "b")


def test_detach_shares_the_data_and_stops_the_gradient():
    tape = Tape(backend="cpu-numba")
    x = tape.param(data((2, 3), 62))
    d = x.detach()
    assert d.data is x.data and not d.requires_grad
    (g,) = tape.backward((x * d).sum())
    same(g, x.data)  # d is a constant: only the left argument's contribution


def test_split_joins_its_parts_gradients_so_a_minus_zero_keeps_its_sign():
    # parts scattered into zeros and added would give -0.0 + +0.0 = +0.0 at [0, 0]
    tape = Tape(backend="cpu-numba")
    x = tape.param(data((6, 2), 63))
    a, b, _ = x.split(2)
    r = np.float32([[-0.0, 1.0], [2.0, -0.0]])
    (g,) = tape.backward((a * tape.const(r)).sum() + (b * tape.const(r + 1)).sum())
    same(g, np.concatenate([r, r + 1, np.zeros((2, 2), np.float32)]))
    assert np.signbit(g[0, 0]) and np.signbit(g[1, 1]) and not np.signbit(g[4, 0])


def test_fan_in_adds_three_readers_contributions_newest_consumer_first():
    tape = Tape(backend="cpu-numba")
    x = tape.param(np.float32([1.0, 2.0]))
    big = np.float32([1e8, 3e7])
    c1 = np.float32([1.0, 1.0])
    # consumers in program order: n1 = x * 1, n2 = x / 1, n3 = x.view(2)
    y1, y2, y3 = x * 1, x / 1, x.view(2)
    loss = ((y1 * tape.const(c1)).sum() + (y2 * tape.const(big)).sum()) + \
        (y3 * tape.const(-big)).sum()
    (g,) = tape.backward(loss)
    want = np.add(np.add(-big, big), c1)  # (c3 + c2) + c1
    same(g, want)
    assert not np.array_equal(want, np.add(-big, np.add(big, c1)))  # the order is visible


# -- refusals ---------------------------------------------------------------------------------------
def refusal_setup():
    tape = Tape(backend="cpu-numba")
    return tape, {"x": tape.param(data((2, 3), 70)), "y": tape.param(data((4,), 71)),
                  "z": tape.const(data((2, 3, 4), 72)), "q": tape.param(data((1, 1, 2, 3), 73))}


REFUSED = [
    (lambda t, v: v["x"] + v["y"], "add", "b"),
    (lambda t, v: t.mul(v["x"], data((2, 3), 0)), "mul", "b"),
    (lambda t, v: data((2, 3), 0) + v["x"], "add", "a"),
    (lambda t, v: t.div(2.0, 3.0), "div", "a"),
    (lambda t, v: t.sub(v["x"], float("inf")), "sub", "b"),
    (lambda t, v: v["x"] * True, "mul", "b"),
    (lambda t, v: v["x"][[0, 1]], "getitem", "key"),
    (lambda t, v: v["x"][np.array([0])], "getitem", "key"),
    (lambda t, v: v["x"][v["x"].data > 0], "getitem", "key"),
    (lambda t, v: v["x"][True], "getitem", "key"),
    (lambda t, v: v["x"][::-1], "getitem", "key"),
    (lambda t, v: v["x"][5], "getitem", "key"),
    (lambda t, v: v["x"][2:], "getitem", "key"),
    (lambda t, v: v["z"].T, "T", "x"),
    (lambda t, v: v["y"].mT, "mT", "x"),
    (lambda t, v: v["x"].view(4, -1), "view", "shape"),
    (lambda t, v: v["x"].reshape(-1, -1), "reshape", "shape"),
    (lambda t, v: v["z"].permute(0, 0, 1), "permute", "dims"),
    (lambda t, v: v["x"].transpose(0, 2), "transpose", "dim1"),
    (lambda t, v: t.narrow(v["x"], 1, 2, 2), "narrow", "length"),
    (lambda t, v: t.cat([v["x"], v["z"]], dim=0), "cat", "tensors[1]"),
    (lambda t, v: t.cat(v["x"]), "cat", "tensors"),
    (lambda t, v: v["x"].split([1, 1], dim=1), "split", "split_size_or_sections"),
    (lambda t, v: v["x"].sum(dim=()), "sum", "dim"),
    (lambda t, v: v["x"].mean(dim=(1, 1)), "mean", "dim"),
    (lambda t, v: t.softmax(v["x"], dim=2), "softmax", "dim"),
    (lambda t, v: t.layer_norm(v["x"], (2,)), "layer_norm", "normalized_shape"),
    (lambda t, v: t.gelu(v["x"], approximate="sigmoid"), "gelu", "approximate"),
    (lambda t, v: v["x"] @ v["x"], "matmul", "b"),
    (lambda t, v: t.scaled_dot_product_attention(v["q"], v["q"], v["q"], attn_mask=v["q"]),
     "scaled_dot_product_attention", "attn_mask"),
    (lambda t, v: t.scaled_dot_product_attention(v["q"], v["q"], v["q"], dropout_p=0.5),
     "scaled_dot_product_attention", "generator"),
    (lambda t, v: t.scaled_dot_product_attention(v["q"], v["q"], v["x"]),
     "scaled_dot_product_attention", "value"),
]


@pytest.mark.parametrize("call,op,option", REFUSED,
                         ids=[f"{i}-{op}-{opt}" for i, (_, op, opt) in enumerate(REFUSED)])
def test_a_refused_op_names_itself_and_leaves_the_tape_unchanged(call, op, option):
    tape, v = refusal_setup()
    before = (tape.mark(), tape.params)
    with pytest.raises(Refusal) as e:
        call(tape, v)
    assert e.value.entry_point == f"mojolike.Tape.{op}", str(e.value)
    assert e.value.option == option, str(e.value)
    assert (tape.mark(), tape.params) == before
    (g, *_) = tape.backward((v["x"] * 2).sum())  # still usable
    same(g, np.full((2, 3), 2, np.float32))


def test_relu_backward_zeroes_the_walks_own_gradient_in_place_and_keeps_the_oracles_bits(
        monkeypatch):
    rng = np.random.default_rng(40)
    x0 = rng.standard_normal((6, 5)).astype(np.float32)
    w1 = rng.standard_normal((7, 5)).astype(np.float32)
    w2 = rng.standard_normal((3, 7)).astype(np.float32)

    def grads(backend):
        tape = Tape(backend=backend)
        a, b = tape.param(w1), tape.param(w2)
        h = tape.relu(tape.linear(tape.const(x0), a))  # linear's dx: a buffer the walk owns
        return tape.backward(tape.sum(tape.linear(h, b)))

    seen = []
    back = Tape._back_relu

    def spy(self, node, dy, owned):
        parts = back(self, node, dy, owned)
        seen.append((owned, parts[0][0] is dy))
        return parts

    monkeypatch.setattr(Tape, "_back_relu", spy)
    got = grads("cpu-numba")
    assert seen == [(True, True)]
    for g, want in zip(got, grads("oracle")):
        _same(g, want)
