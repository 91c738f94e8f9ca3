"""GradScaler(check_interval=k): the windowed loss scale (OCANNL's gated step): every step gates
itself, the host adjusts the scale at every k-th update; k = 1 is the old scaler; resume
mid-window; every backend the same bits; refusals by name."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import CPU_BACKENDS, available, bits

import mojolike

SHAPES = [(5,), (2, 3)]


def grads(step: int, scale: float, bad: set) -> list[np.ndarray]:
    rng = np.random.default_rng(step)
    g = [(rng.standard_normal(s) * 1e-2 * scale).astype(np.float32) for s in SHAPES]
    if step in bad:
        g[step % 2].reshape(-1)[0] = np.float32(np.inf)
    return g


def run(k: int, bad: set, steps: int, backend: str = "oracle", interval: int = 4,
        scaler=None, params=None, start: int = 0):
    params = params if params is not None else [np.zeros(s, np.float32) for s in SHAPES]
    opt = mojolike.SGD(params, lr=0.01, backend=backend)
    scaler = scaler or mojolike.GradScaler(init_scale=2.0**8, growth_interval=interval,
                                           check_interval=k)
    scales, skipped = [], []
    for step in range(start, start + steps):
        t = opt.t
        scaler.step(opt, grads(step, scaler.get_scale(), bad))
        skipped.append(opt.t == t)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, skipped, params, scaler


def test_check_interval_one_equals_the_default_scaler_bit_for_bit():
    bad = {3, 4, 11}
    a = run(1, bad, 20)
    params = [np.zeros(s, np.float32) for s in SHAPES]
    opt = mojolike.SGD(params, lr=0.01, backend="oracle")
    scaler = mojolike.GradScaler(init_scale=2.0**8, growth_interval=4)
    scales, skipped = [], []
    for step in range(20):
        t = opt.t
        scaler.step(opt, grads(step, scaler.get_scale(), bad))
        skipped.append(opt.t == t)
        scaler.update()
        scales.append(scaler.get_scale())
    assert a[0] == scales and a[1] == skipped
    assert all((bits(x) == bits(y)).all() for x, y in zip(a[2], params))
    assert a[3].state_dict() == scaler.state_dict()  # torch's keys only


def test_an_overflow_inside_a_window_skips_its_step_and_backs_off_once_at_the_window_end():
    scales, skipped, _, _ = run(4, {5, 6}, 12, interval=100)
    assert skipped == [s in (5, 6) for s in range(12)]
    # the scale holds inside the window, then one backoff for two skips
    assert scales == [256.0] * 7 + [128.0] * 5


@pytest.mark.parametrize("edge", [4, 7], ids=["first", "last"])
def test_an_overflow_at_a_window_edge_backs_off_at_that_window_end(edge):
    scales, skipped, _, _ = run(4, {edge}, 8, interval=100)
    assert skipped == [s == edge for s in range(8)]
    assert scales == [256.0] * 7 + [128.0]


def test_clean_windows_credit_their_steps_and_grow_at_the_interval():
    scales, skipped, _, _ = run(3, set(), 12, interval=6)
    assert not any(skipped)
    # credit 3 per window: growth at update 6 and 12, as with k = 1 (6 is a multiple of 3)
    assert scales == [256.0] * 5 + [512.0] * 6 + [1024.0]
    assert run(1, set(), 12, interval=6)[0] == scales
    # an interval that is not a multiple: credit 3, 6 >= 5 grows at update 6, then 3, 6 at 12
    assert run(3, set(), 12, interval=5)[0] == [256.0] * 5 + [512.0] * 6 + [1024.0]


def test_a_window_with_a_skip_credits_none_of_its_clean_steps():
    scales, _, _, s = run(4, {1}, 8, interval=5)
    assert scales[:4] == [256.0] * 3 + [128.0] and s.state_dict()["_growth_tracker"] == 4
    assert scales[4:] == [128.0] * 4


@pytest.mark.parametrize("cut", [1, 2, 5, 6, 9])
def test_resume_mid_window_from_state_dict_gives_the_uninterrupted_bits(cut):
    bad = {2, 7, 8}
    whole = run(3, bad, 12, interval=3)
    first = run(3, bad, cut, interval=3)
    saved = first[3].state_dict()
    assert saved["_window_steps"] == cut % 3
    scaler = mojolike.GradScaler(check_interval=3)
    scaler.load_state_dict(saved)
    assert scaler.state_dict() == saved
    rest = run(3, bad, 12 - cut, interval=3, scaler=scaler,
               params=[p.copy() for p in first[2]], start=cut)
    assert first[0] + rest[0] == whole[0] and first[1] + rest[1] == whole[1]
    assert all((bits(x) == bits(y)).all() for x, y in zip(rest[2], whole[2]))
    assert rest[3].state_dict() == whole[3].state_dict()


def test_the_window_flag_is_sticky_across_the_window():
    s = run(4, {4}, 6, interval=100)[3]
    assert s.state_dict()["_window_found"] is True and s.state_dict()["_window_steps"] == 2


@pytest.mark.parametrize("backend", CPU_BACKENDS + ("cuda-sim",))
def test_every_backend_gives_the_oracles_scales_skips_and_parameters(backend):
    if not available(backend):
        pytest.skip(f"{backend} is not available here")
    bad, n = {2, 5}, (8 if backend == "cuda-sim" else 16)
    want, got = run(3, bad, n, interval=3), run(3, bad, n, backend=backend, interval=3)
    assert got[0] == want[0] and got[1] == want[1]
    assert all((bits(x) == bits(y)).all() for x, y in zip(got[2], want[2]))


@pytest.mark.parametrize("value, words", [(0, "[1, "), (-2, "[1, "), (2.0, "integer"),
                                          (True, "integer"), ("3", "integer")])
def test_check_interval_below_one_or_not_an_integer_is_refused_by_name(value, words):
    with pytest.raises(mojolike.Refusal) as r:
        mojolike.GradScaler(check_interval=value)
    assert "check_interval" in str(r.value) and words in str(r.value)
    assert "mojolike.GradScaler" in str(r.value)


def test_a_window_state_with_steps_beyond_the_window_is_refused_by_name():
    s = mojolike.GradScaler(check_interval=3)
    with pytest.raises(mojolike.Refusal) as r:
        s.load_state_dict(dict(s.state_dict(), _window_steps=3))
    assert "_window_steps" in str(r.value)
    assert s.state_dict()["_window_steps"] == 0
