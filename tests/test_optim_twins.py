"""Cast twins (mojolike/optim/twins.py): every step that updates a parameter writes its
bfloat16 or float16 twin, mojolike.cast of the new master bit for bit, and the masters are
those of the same steps without twins; a frozen parameter's twin, a skipped step and a
refused one write nothing; refresh_twins and load_state_dict write every twin again."""
from __future__ import annotations

import functools
import os
import subprocess
import sys

import ml_dtypes
import numba
import numpy as np
import pytest
from conftest import available

import mojolike
from mojolike.core import registry
from mojolike.core.refusals import Refusal
from mojolike.native.threads import PARALLEL_MIN

SIM = pytest.param("cuda-sim", marks=pytest.mark.skipif(not available("cuda-sim"),
                                                        reason="numba-cuda is not installed"))
BACKENDS = ["oracle", "cpu-numba", "cpu-cffi", SIM]
BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
SENTINEL = 0xABCD  # a twin pattern no step here writes: what "keeps its bytes" compares with

CONFIGS = {
    "sgd": (mojolike.SGD, dict(lr=0.1)),
    "sgd-momentum-nesterov-decay": (mojolike.SGD, dict(lr=0.1, momentum=0.9, nesterov=True,
                                                       weight_decay=0.01)),
    "sgd-dampening-maximize": (mojolike.SGD, dict(lr=0.05, momentum=0.5, dampening=0.25,
                                                  maximize=True)),
    "adam-coupled-decay": (mojolike.Adam, dict(lr=0.01, weight_decay=0.01)),
    "adamw": (mojolike.AdamW, dict(lr=0.01, weight_decay=0.1)),
}


def _masters(seed: int, shapes) -> list[np.ndarray]:
    """Values across both low types' ranges: float16 subnormals and overflow, bfloat16
    subnormals, the largest float32 values (bfloat16 infinity), ties of both roundings."""
    r = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        n = int(np.prod(shape))
        x = r.standard_normal(n) * np.exp2(r.integers(-30, 18, n).astype(np.float64))
        special = np.float32([65504.0, 65519.0, 65520.0, 2.0 ** -25, 3.0 * 2.0 ** -26, 1e-39,
                              3.4028235e38, -3.3961776e38, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -11])
        x[:min(n, special.size)] = special[:n]
        out.append(x.astype(np.float32).reshape(shape))
    return out


def _grads(seed: int, shapes, steps: int) -> list[list[np.ndarray]]:
    r = np.random.default_rng(seed + 1000)
    return [[r.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(steps)]


def _u16(a) -> list[int]:
    return np.ascontiguousarray(a).view(np.uint16).reshape(-1).tolist()


def _u32(a) -> list[int]:
    return np.ascontiguousarray(a, np.float32).view(np.uint32).reshape(-1).tolist()


def _assert_twins_are_casts(params, twins) -> None:
    for i, (w, t) in enumerate(zip(params, twins)):
        if t is not None:
            want = mojolike.cast(w, t.dtype, backend="oracle")
            assert _u16(t) == _u16(want), f"twin {i} ({t.dtype.name}) is not cast(master)"


def _steps(opt, grads) -> None:
    """Three kinds of step: a plain one, an in-place clip (the kernels' write_back) and a
    grad_scale read (a scaled read that leaves the gradients)."""
    for k, g in enumerate(grads):
        g = [x.copy() for x in g]
        if k % 3 == 0:
            opt.step(g)
        elif k % 3 == 1:
            opt.step(g, max_norm=0.5)
        else:
            opt.step(g, grad_scale=0.5)


def _run(backend, config, shapes, twin_types, steps, seed=0):
    cls, kw = CONFIGS[config]
    params = _masters(seed, shapes)
    twins = None if twin_types is None else \
        [None if d is None else np.zeros(s, d) for s, d in zip(shapes, twin_types)]
    opt = cls(params, backend=backend, twins=twins, **kw)
    _steps(opt, _grads(seed, shapes, steps))
    return params, twins


@functools.lru_cache(maxsize=None)
def _oracle_masters(config, shapes, steps) -> tuple:
    params, _ = _run("oracle", config, shapes, None, steps)
    return tuple(tuple(_u32(p)) for p in params)


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_after_each_kind_of_step_every_twin_is_the_cast_of_its_master(backend, config):
    # one parameter of each twin type and one without a twin, stepped in the same run;
    # cuda-sim gets tiny tensors (each element is a Python thread there)
    shapes = ((7,), (2, 3), (3,)) if backend == "cuda-sim" else ((37,), (3, 5), (19,))
    params, twins = _run(backend, config, shapes, (BF16, F16, None), 3)
    _assert_twins_are_casts(params, twins)
    without, _ = _run(backend, config, shapes, None, 3)
    assert [_u32(p) for p in params] == [_u32(p) for p in without]
    assert tuple(tuple(_u32(p)) for p in params) == _oracle_masters(config, shapes, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_frozen_parameters_twin_keeps_its_bytes(backend):
    shapes = ((5,), (4,), (3,))
    params = _masters(1, shapes)
    twins = [np.zeros(s, d) for s, d in zip(shapes, (F16, BF16, F16))]
    opt = mojolike.Adam(params, lr=0.01, backend=backend, twins=twins)
    twins[1].view(np.uint16)[...] = SENTINEL
    frozen_master = params[1].copy()
    for g in _grads(1, shapes, 2):
        opt.step([g[0], None, g[2]])  # the frozen tensor between two stepped ones
    assert _u16(twins[1]) == [SENTINEL] * 4
    assert _u32(params[1]) == _u32(frozen_master)
    _assert_twins_are_casts([params[0], params[2]], [twins[0], twins[2]])


def _sentinel_run(backend):
    shapes = ((6,), (2, 2))
    params = _masters(2, shapes)
    twins = [np.zeros(shapes[0], BF16), np.zeros(shapes[1], F16)]
    opt = mojolike.SGD(params, lr=0.1, momentum=0.9, backend=backend, twins=twins)
    for t in twins:
        t.view(np.uint16)[...] = SENTINEL
    return opt, params, twins, shapes


def _unchanged(params, twins, before) -> None:
    assert [_u32(p) for p in params] == before
    assert all(_u16(t) == [SENTINEL] * t.size for t in twins)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_skipped_or_refused_step_writes_no_twin(backend):
    opt, params, twins, shapes = _sentinel_run(backend)
    before = [_u32(p) for p in params]
    g = _grads(2, shapes, 1)[0]
    assert opt.step(g, update_gate=False) is None  # the step's gate
    _unchanged(params, twins, before)
    bad = [g[0].copy(), g[1].copy()]
    bad[1][0, 1] = np.inf
    with pytest.raises(Refusal) as err:  # identical mode refuses a non-finite gradient
        opt.step(bad)
    assert err.value.option == "grads"
    _unchanged(params, twins, before)
    scaler = mojolike.GradScaler(init_scale=2.0 ** 4)
    scaler.step(opt, bad)  # the scaler's overflow skips the step
    scaler.update()
    _unchanged(params, twins, before)
    assert opt.t == 0


@pytest.mark.parametrize("backend", ["oracle", "cpu-numba", "cpu-cffi"])
def test_a_loss_scalers_step_writes_the_twins_of_the_masters_it_makes(backend):
    shapes = ((9,), (2, 3))
    runs = []
    for twin_types in ((BF16, F16), None):
        params = _masters(3, shapes)
        twins = None if twin_types is None else [np.zeros(s, d) for s, d in zip(shapes, twin_types)]
        opt = mojolike.AdamW(params, lr=0.01, backend=backend, twins=twins)
        scaler = mojolike.GradScaler(init_scale=2.0 ** 8)
        for g in _grads(3, shapes, 2):
            scaler.step(opt, [scaler.scale(x) for x in g], max_norm=1.0)
            scaler.update()
        runs.append(params)
        if twins is not None:
            _assert_twins_are_casts(params, twins)
    assert [_u32(p) for p in runs[0]] == [_u32(p) for p in runs[1]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_constructor_and_refresh_twins_write_every_twin_from_its_master(backend):
    shapes = ((5,), (3,))
    params = _masters(4, shapes)
    twins = [np.full(shapes[0], 7.0, F16), None]
    opt = mojolike.SGD(params, lr=0.1, backend=backend, twins=twins)
    _assert_twins_are_casts(params, twins)  # the constructor wrote it
    params[0][...] = params[0] * np.float32(3.0)  # a change outside the optimizer's steps
    opt.refresh_twins()
    _assert_twins_are_casts(params, twins)
    assert _u32(params[0]) == _u32(_masters(4, shapes)[0] * np.float32(3.0))


@pytest.mark.parametrize("backend", ["oracle", "cpu-numba", "cpu-cffi"])
def test_state_dict_carries_no_twin_and_loading_it_rebuilds_the_twins(backend):
    shapes = ((8,), (2, 2))
    grads = _grads(5, shapes, 4)
    params, twins = _masters(5, shapes), [np.zeros(s, BF16) for s in shapes]
    first = mojolike.Adam(params, lr=0.01, backend=backend, twins=twins)
    _steps(first, grads[:2])
    sd = first.state_dict()
    assert not any("twin" in key for key in sd)
    assert all(not isinstance(v, np.ndarray) or v.dtype == np.float32 for v in
               (a for value in sd.values() if isinstance(value, list) for a in value))
    resumed = mojolike.Adam(params, lr=0.01, backend=backend, twins=twins)
    for t in twins:
        t.view(np.uint16)[...] = SENTINEL
    resumed.load_state_dict(sd)
    _assert_twins_are_casts(params, twins)
    _steps(resumed, grads[2:])  # k % 3 restarts: steps 3 and 4 are plain and clipped
    again, again_twins = _masters(5, shapes), [np.zeros(s, BF16) for s in shapes]
    replay = mojolike.Adam(again, lr=0.01, backend=backend, twins=again_twins)
    _steps(replay, grads[:2])
    _steps(replay, grads[2:])
    assert [_u32(p) for p in params] == [_u32(p) for p in again]
    assert [_u16(t) for t in twins] == [_u16(t) for t in again_twins]
    _assert_twins_are_casts(params, twins)


def _refusal_cases() -> dict:
    ro = np.zeros(3, F16)
    ro.flags.writeable = False
    shared = np.zeros(8, F16)
    return {
        "not a list": (lambda p: np.zeros(4, F16), "must be a list"),
        "one entry short": (lambda p: [np.zeros(4, F16)], "has 1 entries"),
        "float32": (lambda p: [np.zeros(4, F16), np.zeros(3, np.float32)],
                    r"\[1\] has dtype float32"),
        "float64": (lambda p: [np.zeros(4, np.float64), None], r"\[0\] has dtype float64"),
        "int16": (lambda p: [np.zeros(4, F16), np.zeros(3, np.int16)],
                  r"\[1\] has dtype int16"),
        "shape": (lambda p: [np.zeros(4, F16), np.zeros((3, 1), BF16)], r"\[1\] has shape"),
        "read-only": (lambda p: [np.zeros(4, F16), ro], r"\[1\].*read-only"),
        "strided": (lambda p: [np.zeros(8, BF16)[::2], None], r"\[0\] is not C-contiguous"),
        "byte-swapped": (lambda p: [np.zeros(4, ">f2"), None],
                         r"\[0\] is in non-native byte order"),
        "two twins share memory": (lambda p: [shared[:4], shared[2:5]], "share memory"),
        "a twin shares a parameter's memory": (lambda p: [np.zeros(4, F16),
                                                          p[0].view(np.float16)[:3]],
                                               "share memory"),
    }


CASES = _refusal_cases()


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("backend", ["oracle", "cpu-numba"])
def test_each_bad_twin_is_refused_by_the_option_twins_with_every_buffer_untouched(backend, case):
    params = _masters(6, ((4,), (3,)))
    make, words = CASES[case]
    twins = make(params)
    listed = twins if isinstance(twins, list) else [twins]
    for t in listed:
        if t is not None and t.dtype.itemsize == 2 and t.flags.writeable:
            t.view(np.uint16)[...] = SENTINEL
    before = [_u32(p) for p in params]  # after the sentinels: one twin may lie in a parameter
    patterns = [None if t is None else t.copy() for t in listed]
    with pytest.raises(Refusal, match=words) as err:
        mojolike.SGD(params, lr=0.1, backend=backend, twins=twins)
    assert err.value.option == "twins" and err.value.entry_point == "mojolike.SGD"
    assert [_u32(p) for p in params] == before
    for t, was in zip(listed, patterns):
        if t is not None:
            assert t.tobytes() == was.tobytes()


@pytest.mark.parametrize("backend", ["oracle", "cpu-numba", "cpu-cffi"])
def test_a_gradient_sharing_memory_with_a_twin_is_refused_naming_both(backend):
    shapes = ((4,), (8,))
    params = _masters(11, shapes)
    twins = [np.zeros(4, F16), np.zeros(8, BF16)]
    opt = mojolike.SGD(params, lr=0.1, backend=backend, twins=twins)
    twins[1].view(np.float32)[...] = np.float32(0.5)  # a gradient in twin 1's 16 bytes
    before, patterns = [_u32(p) for p in params], [_u16(t) for t in twins]
    for frozen in (False, True):  # borrowed or gathered gradients; the frozen slot's too
        grads = [twins[1].view(np.float32), None if frozen else np.ones(8, np.float32)]
        with pytest.raises(Refusal, match="share memory") as err:
            opt.step(grads)
        assert err.value.option == "grads[0] and twins[1]"
        assert [_u32(p) for p in params] == before and [_u16(t) for t in twins] == patterns


class _WithoutTwinKernels:
    """A kernel set whose steps cannot write twins: the oracle's, less sgd_twins/adam_twins."""

    def __init__(self, k):
        self._k = k

    def __getattr__(self, name):
        if name.endswith("_twins"):
            raise AttributeError(name)
        return getattr(self._k, name)


def test_a_backend_whose_kernels_cannot_write_twins_is_refused_by_the_option_twins(monkeypatch):
    from mojolike.optim import base
    real = base.registry.kernels
    monkeypatch.setattr(base.registry, "kernels",
                        lambda *a, **kw: _WithoutTwinKernels(real(*a, **kw)))
    params = _masters(8, ((3,),))
    twin = np.full(3, 5.0, BF16)
    with pytest.raises(Refusal, match="no step that writes cast twins") as err:
        mojolike.Adam(params, backend="oracle", twins=[twin])
    assert err.value.option == "twins"
    assert _u16(twin) == _u16(np.full(3, 5.0, BF16))


def test_a_list_of_none_keeps_no_twins_and_steps_as_without():
    shapes = ((5,),)
    params = _masters(7, shapes)
    opt = mojolike.SGD(params, lr=0.1, backend="cpu-numba", twins=[None])
    opt.step(_grads(7, shapes, 1)[0])
    alone = _masters(7, shapes)
    mojolike.SGD(alone, lr=0.1, backend="cpu-numba").step(_grads(7, shapes, 1)[0])
    assert _u32(params[0]) == _u32(alone[0])


@pytest.mark.parametrize("config", ["sgd-momentum-nesterov-decay", "adamw"])
@pytest.mark.parametrize("backend", ["cpu-numba", "cpu-cffi"])
def test_a_parameter_above_the_parallel_threshold_gets_the_same_twins_on_one_and_two_threads(
        backend, config):
    # above PARALLEL_MIN elements the step runs on the thread pool; the big tensor's runs
    # cross task boundaries (16384 elements) and end in a scalar tail
    shapes = ((PARALLEL_MIN + 7,), (33,))
    k = registry.kernels("test", "optim", backend, "identical")
    before = numba.get_num_threads() if backend == "cpu-numba" else k.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            if backend == "cpu-numba":
                numba.set_num_threads(threads)
            else:
                k.set_num_threads(threads)
            runs.append(_run(backend, config, shapes, (F16, BF16), 2))
    finally:
        if backend == "cpu-numba":
            numba.set_num_threads(before)
        else:
            k.set_num_threads(before)
    (p1, t1), (p2, t2) = runs
    assert [_u16(t) for t in t1] == [_u16(t) for t in t2]
    assert [_u32(p) for p in p1] == [_u32(p) for p in p2]
    _assert_twins_are_casts(p2, t2)
    without, _ = _run(backend, config, shapes, None, 2)
    assert [_u32(p) for p in p2] == [_u32(p) for p in without]


@pytest.mark.parametrize("backend", ["oracle", "cpu-numba", "cpu-cffi"])
def test_parameters_in_one_arena_and_in_groups_get_the_twins_of_their_own_steps(backend):
    # views of one allocation are borrowed as one flat array; two groups step in two runs
    shapes = ((6,), (2, 5), (4,))
    runs = []
    for with_twins in (True, False):
        arena = np.concatenate([p.reshape(-1) for p in _masters(9, shapes)])
        cut = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
        params = [arena[a:b].reshape(s) for a, b, s in zip(cut[:-1], cut[1:], shapes)]
        twins = [np.zeros(s, d) for s, d in zip(shapes, (BF16, F16, BF16))] if with_twins else None
        groups = [{"params": params[:2]}, {"params": params[2:], "lr": 0.5}]
        opt = mojolike.SGD(groups, lr=0.1, momentum=0.9, backend=backend, twins=twins)
        _steps(opt, _grads(9, shapes, 3))
        runs.append(arena)
        if with_twins:
            _assert_twins_are_casts(params, twins)
    assert _u32(runs[0]) == _u32(runs[1])


_RESIDENT = """
import ml_dtypes, numpy as np, mojolike
def run(backend, resident):
    r = np.random.default_rng(10)
    p = [r.standard_normal(40).astype(np.float32), r.standard_normal(7).astype(np.float32)]
    tw = [np.zeros(40, ml_dtypes.bfloat16), np.zeros(7, np.float16)]
    opt = mojolike.Adam(p, lr=0.01, weight_decay=0.1, backend=backend, twins=tw)
    if resident:
        opt.params_to_device()
    for t in range(2):
        opt.step([r.standard_normal(40).astype(np.float32), r.standard_normal(7).astype(np.float32)],
                 max_norm=1.0)
    tw[1][...] = 0  # refresh_twins reads the resident masters
    opt.refresh_twins()
    if resident:
        opt.params_to_host()
    ok = all((mojolike.cast(x, t.dtype, backend='oracle').view(np.uint16) == t.view(np.uint16)).all()
             for x, t in zip(p, tw))
    return ok, np.concatenate([x.view(np.uint32) for x in p] + [t.view(np.uint16).astype(np.uint32) for t in tw])
(ok1, a), (ok2, b) = run('cpu-numba', False), run('cuda-sim', True)
print(ok1, ok2, bool((a == b).all()))
"""


@pytest.mark.skipif(not available("cuda-sim"), reason="numba-cuda is not installed")
def test_parameters_kept_on_the_device_get_the_same_twins():
    # in a simulator process the CUDA kernels run in-process, so parameters can stay resident
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", _RESIDENT], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True", "True"]
