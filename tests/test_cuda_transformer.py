"""The CUDA transformer kernels (native/cuda/transformer.py) under numba's simulator give the
oracle's bits: softmax / log_softmax rows and their backward, layer_norm rows and backward,
the fused attention forward and backward (oracles/transformer.py, oracles/attention.py) for
every key and query block size, and mark what expf cannot decide.

"transformer" joins mojolike.core.families.FAMILIES only when every layer exists, so the
registry's simulator proxy cannot serve it yet: the fixture starts a process of its own with
NUMBA_ENABLE_CUDASIM=1 that calls `native.cuda.transformer.load("identical", "cuda-sim")`,
speaking the simulator worker's wire format; the arguments the interface marks written come
back into the caller's arrays. The simulator runs a Python thread per CUDA thread: shapes are
tiny.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import assert_same_bits
from mojolike.contracts.crmath import HARD_EXP
from mojolike.native.cuda import simworker as wire
from mojolike.oracles import attention as oatt
from mojolike.oracles import f32, rng
from mojolike.oracles import transformer as otf

from mojolike.core import interfaces

FLT_MAX = float(np.finfo(np.float32).max)
SUB = float(np.float32(1e-40))
HARD_NEG = [float(np.uint32(h).view(np.float32)) for h in HARD_EXP
            if np.uint32(h).view(np.float32) <= 0]

_SERVER = """
import sys
sys.setswitchinterval(1e-4)
from mojolike.native.cuda import simworker as wire
from mojolike.native.cuda.simblocks import install
from mojolike.native.cuda import transformer
install()
k = transformer.load("identical", backend="cuda-sim")
inp, out = sys.stdin.buffer, sys.stdout.buffer
sys.stdout = sys.stderr
while (msg := wire._recv(inp)) is not None:
    head, arrays = msg
    args = wire._decode_args(head["args"], arrays)
    try:
        if head["method"] == "mismatches":  # how the kernel set departs from the interface
            from mojolike.core import interfaces
            r = interfaces.mismatches("transformer", k)
        else:
            r = getattr(k, head["method"])(*args)
        wire._send(out, {"ok": True, "result": r, "backend": k.backend,
                         "mode": k.numeric_mode}, [args[i] for i in head["written"]])
    except Exception as e:
        wire._send(out, {"ok": False, "message": f"{type(e).__name__}: {e}"})
"""


class SimTransformer:
    """The cuda-sim kernel set in its own process, called like the kernel set itself."""

    def __init__(self):
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        self.labels = None

    def _call(self, method, *args):
        spec, arrays = wire._encode_args(args)
        written = interfaces.written("transformer", method, {}) if method != "mismatches" else ()
        wire._send(self.proc.stdin, {"method": method, "args": spec, "written": written}, arrays)
        reply = wire._recv(self.proc.stdout)
        assert reply is not None, f"the simulator process exited ({self.proc.poll()})"
        head, out = reply
        assert head["ok"], head["message"]
        self.labels = (head["backend"], head["mode"])
        for i, a in zip(written, out):
            np.copyto(args[i], a)
        return head["result"]

    def __getattr__(self, method):
        if method not in interfaces.methods("transformer"):
            raise AttributeError(method)
        return lambda *args: self._call(method, *args)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def k():
    sim = SimTransformer()
    try:
        yield sim
    finally:
        sim.close()


def data(shape, seed, scale=1.0):
    g = np.random.default_rng(seed)
    return (g.standard_normal(shape) * scale).astype(np.float32)


def f32a(x):
    return np.asarray(x, np.float32)


def test_the_kernels_report_cuda_sim_and_the_identical_mode(k):
    y, status = np.empty((1, 1), np.float32), np.empty(1, np.int32)
    assert k.softmax_rows(np.float32([[3.0]]), False, y, status) == 0
    assert k.labels == ("cuda-sim", "identical") and y.tolist() == [[1.0]]


def test_the_kernel_set_meets_the_family_interface(k):
    assert k._call("mismatches") == []


# -- softmax rows -------------------------------------------------------------------------------

def special_rows(n, seed):
    x = data((6, n), seed, 3.0)
    x[1, 0] = np.nan
    x[2, n // 2] = np.inf
    x[3, 0] = -np.inf
    x[4, 0] = FLT_MAX
    if n > 1:
        x[4, 1] = -FLT_MAX
        x[5, : n // 2] = -0.0
    x[5, -1] = SUB
    x[0, -1] = -100.0  # d near -100: a subnormal e_j
    return x


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n", [1, 31, 32, 33])
def test_softmax_rows_with_nan_inf_far_apart_values_zeros_and_subnormals_equal_the_oracle(k, n, log):
    x = special_rows(n, n)
    y, status = np.empty_like(x), np.full(x.shape[0], 7, np.int32)
    assert k.softmax_rows(x, log, y, status) == 0
    want = (otf.log_softmax_rows if log else otf.softmax_rows)(x.tolist())
    assert_same_bits(y, f32a(want), f"softmax log={log} n={n}")
    assert status.tolist() == [0] * x.shape[0]


@pytest.mark.parametrize("log", [False, True])
def test_a_row_of_two_fold_chunks_equals_the_oracle(k, log):
    x = data((1, 1025), 3, 4.0)
    y, status = np.empty_like(x), np.empty(1, np.int32)
    assert k.softmax_rows(x, log, y, status) == 0
    assert_same_bits(y, f32a((otf.log_softmax_rows if log else otf.softmax_rows)(x.tolist())))


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n", [1, 33])
def test_softmax_backward_rows_equal_the_oracle(k, n, log):
    x = special_rows(n, 100 + n)
    y = f32a((otf.log_softmax_rows if log else otf.softmax_rows)(x.tolist()))
    dy = data(x.shape, 200 + n)
    dy[0, 0] = -0.0
    if log:  # expf of arbitrary y: +inf from 89 up, +0 below -104, NaN
        y[2, 0], y[3, 0], y[4, 0] = 100.0, -200.0, np.nan
    dx, status = np.empty_like(x), np.full(x.shape[0], 7, np.int32)
    assert k.softmax_backward_rows(dy, y, log, dx, status) == 0
    want = (otf.log_softmax_backward_rows if log else otf.softmax_backward_rows)(dy.tolist(), y.tolist())
    assert_same_bits(dx, f32a(want), f"softmax backward log={log} n={n}")
    assert status.tolist() == [0] * x.shape[0]


@pytest.mark.parametrize("h", HARD_NEG[:2])
def test_a_row_whose_expf_is_undecided_is_marked_and_the_others_are_not(k, h):
    x = np.float32([[0.0, h], [0.0, 1.0]])  # d = h - 0 = h, a hard input of expf
    for log in (False, True):
        y, status = np.empty_like(x), np.empty(2, np.int32)
        assert k.softmax_rows(x, log, y, status) == 1
        assert status.tolist() == [1, 0]
        want = (otf.log_softmax_rows if log else otf.softmax_rows)(x[1:].tolist())[0]
        assert_same_bits(y[1], f32a(want))
    dx, status = np.empty_like(x), np.empty(2, np.int32)
    assert k.softmax_backward_rows(np.ones_like(x), np.float32([[h, 0.0], [0.0, 0.0]]), True, dx,
                                   status) == 1
    assert status.tolist() == [1, 0]


# -- layer_norm rows ----------------------------------------------------------------------------

def ln_rows(d, seed):
    x = data((5, d), seed)
    x[1] = (np.float32(1e4) + data(d, seed + 1, 1e-2)).astype(np.float32)  # a large mean, small spread
    x[2, 0] = -0.0
    x[3] = np.float32(0.75)  # constant: var = 0
    x[4, -1] = SUB
    return x


def check_layer_norm(k, x, has_w, has_b, eps):
    d = x.shape[1]
    w, b = data(d, 300 + d), data(d, 400 + d)
    wl, bl = (w.tolist() if has_w else None), (b.tolist() if has_b else None)
    ph = np.zeros(1, np.float32)
    y = np.empty_like(x)
    k.layer_norm_rows(x, w if has_w else ph, has_w, b if has_b else ph, has_b, np.float32(eps), y)
    assert_same_bits(y, f32a(otf.layer_norm_rows(x.tolist(), wl, bl, eps)), f"layer_norm d={d} eps={eps}")
    dy = data(x.shape, 500 + d)
    dx, h = np.empty_like(x), np.empty_like(x)
    k.layer_norm_backward_rows(dy, x, w if has_w else ph, has_w, np.float32(eps), dx, h)
    want_dx = otf.layer_norm_backward_rows(dy.tolist(), x.tolist(), wl, bl, eps)[0]
    want_h = []
    for r in x.tolist():
        _, c, rstd = otf.layer_norm_stats(r, f32.round_float(eps))
        want_h.append([f32.mul(cj, rstd) for cj in c])
    assert_same_bits(dx, f32a(want_dx), f"layer_norm backward dx d={d} eps={eps}")
    assert_same_bits(h, f32a(want_h), f"layer_norm backward h d={d} eps={eps}")


@pytest.mark.parametrize("has_w,has_b", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("d", [1, 33])
def test_layer_norm_rows_and_backward_equal_the_oracle(k, d, has_w, has_b):
    for eps in (1e-5, 0.0):  # eps = 0 on the constant row: rstd = inf, y NaN
        check_layer_norm(k, ln_rows(d, d), has_w, has_b, eps)


def test_layer_norm_over_two_fold_chunks_equals_the_oracle(k):
    check_layer_norm(k, ln_rows(1025, 7)[:2], True, True, 1e-5)


# -- attention ----------------------------------------------------------------------------------

PH_U8, PH_F32 = np.zeros(1, np.uint8), np.zeros(1, np.float32)


def mask_args(mask, shape):
    """(mask_bool, mask_add, kind, strides) for the kernels from a numpy mask broadcasting to shape."""
    if mask is None:
        return PH_U8, PH_F32, 0, np.zeros(4, np.int64)
    m = np.ascontiguousarray(mask)
    view = np.broadcast_to(m.reshape((1,) * (4 - m.ndim) + m.shape), shape)
    strides = np.array([s // m.itemsize for s in view.strides], np.int64)
    if m.dtype == np.bool_:
        return m.view(np.uint8), PH_F32, 1, strides
    return PH_U8, m.astype(np.float32), 2, strides


class Call:
    """One attention call's inputs, the kernels' outputs and the oracle's."""

    def __init__(self, shape, seed, mask=None, causal=False, scale=None, p=0.0, mag=1.0,
                 seed_rng=0x1234_5678_9ABC, stream=3):
        nb, nh, nl, ns, ne, nev = shape
        self.q, self.k = data((nb, nh, nl, ne), seed, mag), data((nb, nh, ns, ne), seed + 1, mag)
        self.v, self.do = data((nb, nh, ns, nev), seed + 2), data((nb, nh, nl, nev), seed + 3)
        self.mask, self.causal, self.p = mask, causal, f32.round_float(p)
        self.scale = oatt.call_scale(scale, ne)
        self.seed, self.stream = seed_rng, stream
        self.keep = (oatt.dropout_keep(seed_rng, stream, self.p, (nb, nh, nl, ns))
                     if self.p > 0 else None)
        self.keep_scale = rng.dropout_scale(self.p) if self.p > 0 else 1.0
        self.margs = mask_args(mask, (nb, nh, nl, ns))

    def common(self):
        return (*self.margs, self.causal, np.float32(self.scale), np.float32(self.p),
                np.float32(self.keep_scale), self.seed & 0xFFFFFFFF, self.seed >> 32, self.stream)

    def forward(self, kern, block_k):
        o = np.empty(self.q.shape[:3] + self.v.shape[3:], np.float32)
        stats = np.empty(self.q.shape[:3] + (2,), np.float32)
        status = np.full(self.q.shape[:2], 7, np.int32)
        marked = kern.attention_forward(self.q, self.k, self.v, *self.common(), block_k, o, stats, status)
        return o, stats, status, marked

    def backward(self, kern, o, stats, block_q, block_k):
        dq, dk, dv = np.empty_like(self.q), np.empty_like(self.k), np.empty_like(self.v)
        status = np.full(self.q.shape[:2], 7, np.int32)
        marked = kern.attention_backward(self.do, self.q, self.k, self.v, o, stats, *self.common(),
                                         block_q, block_k, dq, dk, dv, status)
        return dq, dk, dv, status, marked

    def oracle_mask(self):
        return None if self.mask is None else self.mask.tolist()

    def oracle_forward(self):
        return f32a(oatt.sdpa(self.q.tolist(), self.k.tolist(), self.v.tolist(), self.oracle_mask(),
                              self.p, self.causal, self.scale, self.keep))

    def oracle_backward(self):
        return [f32a(t) for t in oatt.sdpa_backward(
            self.do.tolist(), self.q.tolist(), self.k.tolist(), self.v.tolist(), self.oracle_mask(),
            self.p, self.causal, self.scale, self.keep)]


def check(kern, c, what, block_k=2, block_q=2, want=None):
    o, stats, status, marked = c.forward(kern, block_k)
    assert marked == 0 and not status.any(), what
    assert_same_bits(o, c.oracle_forward() if want is None else want[0], f"{what} o")
    dq, dk, dv, status, marked = c.backward(kern, o, stats, block_q, block_k)
    assert marked == 0 and not status.any(), what
    for got, w, name in zip((dq, dk, dv), c.oracle_backward() if want is None else want[1], "qkv"):
        assert_same_bits(got, w, f"{what} d{name}")
    return o, stats


def bool_mask(shape, seed, empty_row=None):
    m = np.random.default_rng(seed).random(shape) < 0.7
    if empty_row is not None:
        m[..., empty_row, :] = False
    return m


CASES = {
    "E=Ev=1 over two batches and heads": {"shape": (2, 2, 3, 4, 1, 1)},
    "E=33 Ev=1 custom scale": {"shape": (1, 1, 3, 5, 33, 1), "scale": 0.3},
    "E=1 Ev=33": {"shape": (1, 1, 4, 3, 1, 33)},
    "causal L==S": {"shape": (1, 2, 5, 5, 3, 2), "causal": True},
    "causal L<S": {"shape": (1, 1, 3, 6, 2, 3), "causal": True},
    "causal L>S": {"shape": (1, 1, 6, 3, 3, 2), "causal": True},
    "bool mask (L, S) broadcast, a fully masked row": {
        "shape": (1, 2, 4, 5, 3, 2), "mask": bool_mask((4, 5), 1, empty_row=2)},
    "additive mask with -inf over heads": {"shape": (2, 2, 4, 5, 2, 3), "mask": np.where(
        bool_mask((2, 1, 4, 5), 3, empty_row=1), data((2, 1, 4, 5), 4), -np.inf).astype(np.float32)},
    "scores near FLT_MAX": {"shape": (1, 1, 3, 4, 2, 2), "mag": 1.2e19, "scale": 1.0},
    "E=Ev=33": {"shape": (1, 1, 2, 3, 33, 33)},
    "dropout 0.1 custom scale": {"shape": (1, 2, 3, 4, 2, 3), "p": 0.1, "scale": -0.7},
    "dropout 0.5": {"shape": (1, 2, 4, 5, 3, 2), "p": 0.5},
    "dropout 0.5 causal": {"shape": (1, 1, 5, 5, 2, 2), "p": 0.5, "causal": True},
}


@pytest.mark.parametrize("name", list(CASES))
def test_attention_forward_and_backward_equal_the_oracle(k, name):
    check(k, Call(seed=len(name), **CASES[name]), name)


def test_attention_inputs_with_signed_zeros_equal_the_oracle(k):
    c = Call((1, 2, 3, 4, 3, 2), 77)
    c.q[0, 0, 0] = -0.0
    c.k[0, 1, :2] = 0.0
    c.v[0, 0, 1] = -0.0
    c.do[0, 1, 2] = -0.0
    check(k, c, "signed zeros")


def test_nan_and_inf_inputs_follow_ieee_as_the_oracle(k):
    c = Call((1, 2, 4, 5, 3, 2), 78)
    c.q[0, 0, 1, 0] = np.nan  # row 1 of head 0: NaN scores throughout
    c.k[0, 1, 3, 1] = np.inf  # head 1: +-inf scores in column 3
    c.v[0, 0, 2, 0] = np.inf
    c.do[0, 1, 0, 1] = -np.inf
    check(k, c, "nan and inf")


def test_a_numpy_bool_mask_is_read_as_bytes(k):
    c = Call(seed=1, **CASES["bool mask (L, S) broadcast, a fully masked row"])
    o = c.forward(k, 2)[0]
    c.margs = (c.mask, *c.margs[1:])  # the bool array itself, not its uint8 view
    assert_same_bits(c.forward(k, 2)[0], o, "bool mask")


def test_block_sizes_never_reach_a_bit(k):
    c = Call((1, 2, 5, 6, 33, 3), 9, mask=bool_mask((5, 6), 10, empty_row=3), p=0.5)
    want = (c.oracle_forward(), c.oracle_backward())
    for bk, bq in ((2, 4), (4, 2), (6, 5), (1, 1)):
        check(k, c, f"block_k={bk} block_q={bq}", bk, bq, want)


def test_a_long_key_row_equals_the_oracle_for_every_key_and_query_block(k):
    c = Call((1, 1, 2, 1100, 1, 1), 5)  # folds over j of two chunks
    want = (c.oracle_forward(), c.oracle_backward())
    for bk, bq in ((1024, 1), (96, 2), (1100, 2)):
        check(k, c, f"S=1100 block_k={bk} block_q={bq}", bk, bq, want)


def test_a_long_query_column_equals_the_oracle_for_every_query_block(k):
    c = Call((1, 1, 1100, 2, 1, 1), 6, causal=True)  # dK, dV fold over 1100 rows: two chunks
    want = (c.oracle_forward(), c.oracle_backward())
    for bq in (96, 1100):
        check(k, c, f"L=1100 block_q={bq}", 2, bq, want)


def test_empty_rows_give_zero_outputs_and_stats_minus_inf_and_plus_zero(k):
    c = CASES["bool mask (L, S) broadcast, a fully masked row"]
    o, stats, _, _ = Call(seed=1, **c).forward(k, 2)
    assert (o[:, :, 2].view(np.uint32) == 0).all()
    assert (stats[:, :, 2, 0] == -np.inf).all() and (stats[:, :, 2, 1].view(np.uint32) == 0).all()


@pytest.mark.parametrize("h", HARD_NEG[:1])
def test_a_head_with_an_undecided_expf_is_marked_forward_and_backward(k, h):
    c = Call((1, 2, 1, 2, 1, 1), 0, scale=1.0)
    c.q[:] = 1.0
    c.k[:, :, 0] = 0.0
    c.k[0, 1, 1] = h  # head 1: s = (0, h), mx = 0, d = h
    c.k[0, 0, 1] = 0.5
    o, stats, status, marked = c.forward(k, 2)
    assert marked == 1 and status.tolist() == [[0, 1]]
    assert_same_bits(o[0, 0], c.oracle_forward()[0, 0], "the unmarked head")
    _, _, _, status, marked = c.backward(k, o, stats, 2, 2)
    assert marked == 1 and status.tolist() == [[0, 1]]
