"""The cross-entropy kernels (cpu-numba, cpu-cffi, cuda-sim) give a straightforward
reference's bits for every row loss and gradient, at any thread count.

The reference here is contracts/loss.md clauses 1-5 written out with the exact
pieces (oracles.f32, oracles.crmath, oracles.fold), independent of oracles/loss.py.
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest
from conftest import CPU_BACKENDS, available
from mojolike.oracles import crmath, f32, fold

from mojolike.core import registry

IGNORE = -100
SENTINEL = np.float32(-7.25)  # fills the (1, 1) grad placeholder, which no kernel may touch


def scalars(eps: float, v: int, g: float) -> tuple:
    """(c1, c2, qt, smoothing, g) as float32, each the binary32 nearest its exact value."""
    e, vv = Fraction(eps), Fraction(v)
    c1, c2, qt = (f32.round_fraction(x) for x in (1 - e, e / vv, 1 - e + e / vv))
    return np.float32(c1), np.float32(c2), np.float32(qt), eps > 0, np.float32(g)


def reference(z: np.ndarray, t: np.ndarray, c1, c2, qt, smoothing, g) -> tuple[np.ndarray, np.ndarray]:
    """(row losses, gradient) of contracts/loss.md, one exact binary32 operation at a time."""
    n, v = z.shape
    rows, grad = np.zeros(n, np.float32), np.zeros((n, v), np.float32)
    c1, c2, qt, g = float(c1), float(c2), float(qt), float(g)
    for i in range(n):
        ti = int(t[i])
        if ti == IGNORE:
            continue
        zr = z[i].tolist()
        mx = max(zr)
        d = [f32.sub(x, mx) for x in zr]
        e = [crmath.expf(x) for x in d]
        s = fold.fold(e)
        lg = crmath.logf(s)
        nll = f32.sub(lg, d[ti])
        if smoothing:
            a = fold.fold([f32.sub(lg, x) for x in d])
            rows[i] = f32.add(f32.mul(c1, nll), f32.mul(c2, a))
        else:
            rows[i] = nll
        grad[i] = [f32.mul(f32.sub(f32.div(ej, s), qt if j == ti else c2), g) for j, ej in enumerate(e)]
    return rows, grad


def _case(name: str, n: int, v: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = (rng.standard_normal((n, v)) * 4).astype(np.float32)
    t = rng.integers(0, v, n).astype(np.int64)
    if n > 1:
        t[1] = IGNORE  # an ignored row: loss +0.0, gradient row +0.0
    if name == "very_negative":  # d <= -104: e = +0 (and d = -inf past the float range)
        z[:, ::2] = np.float32(-150.0)
        z[:, 1::3] = np.float32(-3e38)
        z[:, 0] = np.float32(3e38)
        t[0] = 2 % v
    elif name == "huge":  # huge logits: d itself overflows to -inf for some j
        z = np.where(rng.random((n, v)) < 0.5, np.float32(3.4e38), np.float32(-3.4e38)).astype(np.float32)
        z[:, -1] = np.float32(1e38)
    elif name == "ties":  # several equal maxima, and +0.0/-0.0 as the maximum
        z[:, ::4] = np.float32(2.5)
        z[-1] = np.where(rng.random(v) < 0.5, np.float32(0.0), np.float32(-0.0))
        z[-1, ::5] = np.float32(-1.0)
    elif name == "subnormal_e":  # e_j subnormal (d between -87.3 and -103.9)
        z[:, ::2] = z[:, ::2] - np.float32(95.0)
    return z, t


# (name, N, V): the CPU cases
CPU_CASES = [("normal", 3, v) for v in (1, 5, 1023, 1024, 1025, 3000)] + [
    ("very_negative", 3, 1025), ("very_negative", 2, 7), ("huge", 3, 1030), ("huge", 2, 3),
    ("ties", 3, 2049), ("ties", 2, 9), ("subnormal_e", 3, 1100)]
# the simulator runs a Python thread per CUDA thread: tiny cases, one with 3 chunks
SIM_CASES = [("normal", 3, 1), ("normal", 3, 5), ("normal", 2, 100), ("very_negative", 2, 7),
             ("huge", 2, 3), ("ties", 2, 9), ("subnormal_e", 3, 40), ("normal", 1, 2049)]
SETTINGS = [(0.0, 1.0), (0.0, 1 / 3), (0.1, 1.0), (0.25, 1 / 3)]  # (label_smoothing, g)


@lru_cache(maxsize=None)
def _expected(name: str, n: int, v: int, eps: float, g: float):
    z, t = _case(name, n, v, seed=n * 7919 + v)
    sc = scalars(eps, v, g)
    return z, t, sc, reference(z, t, *sc)


def _check(backend: str, name: str, n: int, v: int, eps: float, g: float, want_grad: bool) -> None:
    k = registry.kernels("test", "loss", backend, "identical")
    z, t, (c1, c2, qt, smoothing, g32), (want_rows, want_grad_rows) = _expected(name, n, v, eps, g)
    z = z.copy()
    z.flags.writeable = False  # the kernels only read the logits
    grad = np.full((n, v) if want_grad else (1, 1), SENTINEL, np.float32)
    rows = np.full(n, SENTINEL, np.float32)
    status = np.full(n, 9, np.int32)
    got = k.cross_entropy_into(z, t, IGNORE, c1, c2, qt, smoothing, g32, want_grad, grad, rows, status)
    what = f"{backend} {name} N={n} V={v} eps={eps} g={g} want_grad={want_grad}"
    assert got == 0 and status.tolist() == [0] * n, f"{what}: undecided rows {status.tolist()}"
    bad = np.flatnonzero(rows.view(np.uint32) != want_rows.view(np.uint32))
    assert bad.size == 0, (f"FAIL {what} row {bad[0]}: got=0x{rows.view(np.uint32)[bad[0]]:08x} "
                           f"ref=0x{want_rows.view(np.uint32)[bad[0]]:08x}")
    if want_grad:
        gb, wb = grad.view(np.uint32), want_grad_rows.view(np.uint32)
        bad = np.argwhere(gb != wb)
        assert bad.size == 0, (f"FAIL {what} grad{tuple(bad[0])}: got=0x{gb[tuple(bad[0])]:08x} "
                               f"ref=0x{wb[tuple(bad[0])]:08x} ({bad.shape[0]} differ)")
    else:
        assert grad.tolist() == [[SENTINEL]], f"{what}: the grad placeholder was written"


@pytest.mark.parametrize("want_grad", (False, True), ids=("fwd", "grad"))
@pytest.mark.parametrize("eps,g", SETTINGS, ids=lambda v: f"{v:.3g}")
@pytest.mark.parametrize("name,n,v", CPU_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_cpu_kernels_give_the_reference_bits_for_losses_and_gradients(backend, name, n, v, eps, g,
                                                                      want_grad):
    _check(backend, name, n, v, eps, g, want_grad)


@pytest.mark.skipif(not available("cuda-sim"), reason="numba-cuda is not installed")
@pytest.mark.parametrize("want_grad", (False, True), ids=("fwd", "grad"))
@pytest.mark.parametrize("eps,g", [SETTINGS[0], SETTINGS[3]], ids=lambda v: f"{v:.3g}")
@pytest.mark.parametrize("name,n,v", SIM_CASES, ids=lambda v: str(v))
def test_the_cuda_kernel_under_the_simulator_gives_the_reference_bits(name, n, v, eps, g, want_grad):
    _check("cuda-sim", name, n, v, eps, g, want_grad)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_thread_count_never_reaches_the_bits(backend):
    k = registry.kernels("test", "loss", backend, "identical")
    rng = np.random.default_rng(5)
    n, v = 67, 2500
    z = (rng.standard_normal((n, v)) * 6).astype(np.float32)
    t = rng.integers(0, v, n).astype(np.int64)
    t[::5] = IGNORE
    c1, c2, qt, smoothing, g = scalars(0.1, v, 1 / 60)
    before = k.get_num_threads()
    seen = []
    try:
        for threads in (1, 2):
            k.set_num_threads(threads)
            grad, rows, status = np.empty((n, v), np.float32), np.empty(n, np.float32), np.empty(n, np.int32)
            assert k.cross_entropy_into(z, t, IGNORE, c1, c2, qt, smoothing, g, True, grad, rows, status) == 0
            seen.append((rows.view(np.uint32).copy(), grad.view(np.uint32).copy()))
    finally:
        k.set_num_threads(before)
    assert (seen[0][0] == seen[1][0]).all() and (seen[0][1] == seen[1][1]).all(), f"{backend}: 2 threads vs 1"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_an_ignore_index_beyond_int64_ignores_no_row(backend):
    k = registry.kernels("test", "loss", backend, "identical")
    z = np.float32([[0.0, 0.0]])
    rows, status = np.empty(1, np.float32), np.empty(1, np.int32)
    c1, c2, qt, smoothing, g = scalars(0.0, 2, 1.0)
    k.cross_entropy_into(z, np.int64([0]), 2 ** 70, c1, c2, qt, smoothing, g, False,
                         np.zeros((1, 1), np.float32), rows, status)
    assert rows[0] == np.float32(crmath.logf(2.0))


@pytest.mark.parametrize("backend", CPU_BACKENDS + ("cuda-sim",))
def test_a_row_with_an_undecided_expf_is_flagged_and_the_others_are_done(backend):
    if not available(backend):
        pytest.skip(f"{backend} cannot run here")
    k = registry.kernels("test", "loss", backend, "identical")
    # expf(-2^-25) lies just above the midpoint 1 - 2^-25: the binary64 test cannot decide it
    z = np.float32([[0.0, -(2.0 ** -25), -1.0], [0.0, -0.5, -1.0]])
    t = np.int64([0, 2])
    sc = scalars(0.0, 3, 1.0)
    grad, rows, status = np.empty((2, 3), np.float32), np.empty(2, np.float32), np.empty(2, np.int32)
    assert k.cross_entropy_into(z, t, IGNORE, *sc, True, grad, rows, status) == 1
    assert status.tolist() == [1, 0]
    want_rows, want_grad = reference(z, t, *sc)
    assert rows.view(np.uint32)[1] == want_rows.view(np.uint32)[1]
    assert (grad.view(np.uint32)[1] == want_grad.view(np.uint32)[1]).all()
