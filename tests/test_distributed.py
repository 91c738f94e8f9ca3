"""mojolike.distributed on local gloo worlds of fresh processes: 1, 2, 3 and 4 ranks give one
process's bits after Adam with the clip, every rank refuses together, a rank that exits or stalls
makes the others fail within the timeout with nothing written, and the bytes sent are measured.

The functions named `job_*` run in the rank processes (`mojolike.contracts.ranks.launch`).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from mojolike.contracts.ranks import bytes_written, launch

import mojolike
from mojolike.distributed import wire

torch = pytest.importorskip("torch")  # the [test] extra installs it; `import mojolike` never needs it

SHAPES = ((1000,), (33, 17), (7,))
BACKEND = "cpu-cffi"
BIG = 1 << 20  # elements of the bandwidth measurement: gloo's framing is far below 1% of it
HERE = os.path.abspath(__file__)


def _microbatch(step: int, j: int) -> list[np.ndarray]:
    rng = np.random.default_rng([step, j])
    # magnitudes over 2^-8 .. 2^8: the sum's bits depend on the order of the additions
    return [(rng.standard_normal(s) * 2.0 ** rng.integers(-8, 9, s)).astype(np.float32)
            for s in SHAPES]


def _params() -> list[np.ndarray]:
    return [np.random.default_rng(99 + i).standard_normal(s).astype(np.float32)
            for i, s in enumerate(SHAPES)]


def _steps(local, reduce, steps: int = 3) -> np.ndarray:
    """Adam with the clip after `reduce`; the final parameters, moments and norms, flat."""
    params = _params()
    opt = mojolike.Adam(params, lr=1e-2, backend=BACKEND)
    norms = [reduce(opt, local(s)) for s in range(steps)]
    st = opt.state_dict()
    return np.concatenate([p.reshape(-1) for p in params + st["exp_avg"] + st["exp_avg_sq"]]
                          + [np.float32(norms)])


def _accumulate(step, which):
    return mojolike.accumulate_grads([_microbatch(step, j) for j in which], [2048] * len(which),
                                     backend=BACKEND)


def _single(m: int) -> np.ndarray:
    return _steps(lambda s: _accumulate(s, range(m)), lambda opt, g: opt.step(g, max_norm=1.0))


def _dp(which, group=None):
    from mojolike import distributed as md
    return _steps(lambda s: _accumulate(s, which),
                  lambda opt, g: md.step(opt, g, tokens=2048 * len(which), group=group,
                                         max_norm=1.0))


def _sent(fn):
    """(bytes this process handed to write calls during fn(), fn's result): gloo's sockets."""
    before = bytes_written()
    out = fn()
    return bytes_written() - before, out


# -- rank jobs ------------------------------------------------------------------------------------
def job_world(rank: int, world: int) -> dict:
    """4 microbatches over the world; with 4 ranks also singletons, the first three ranks and a
    pair as subgroups, and torch's own sum; the bytes sent by one reduction of BIG elements."""
    import torch.distributed as dist

    from mojolike import distributed as md
    per = 4 // world
    out = {f"w{world}": _dp(range(rank * per, rank * per + per))}
    if world == 4:
        singles = [dist.new_group([r]) for r in range(4)]
        three, pair = dist.new_group([0, 1, 2]), dist.new_group([0, 1])
        out["w1"] = _dp(range(4), singles[rank])
        if rank < 3:
            out["w3"] = _dp((rank,), three)
        g = _accumulate(0, (rank,))
        flat = torch.from_numpy(np.concatenate([x.reshape(-1) for x in g]))
        dist.all_reduce(flat)
        out["torch_sum"] = flat.numpy()
        tiny = [np.float32([rank + 0.5, -1.0, 2.0 ** -rank])]  # 3 elements: rank 3's slice is empty
        md.all_reduce_grads(tiny, backend=BACKEND)
        out["tiny"] = tiny[0]
        md.all_reduce_grads(g, tokens=2048, backend=BACKEND)
        out["ours_sum"] = np.concatenate([x.reshape(-1) for x in g])
        if rank < 2:
            x = np.random.default_rng(rank).standard_normal(BIG).astype(np.float32)
            out["sent_pair"], ex = _sent(lambda: md.all_reduce_grads(x, group=pair, backend=BACKEND))
            out["counted_pair"] = ex.bytes_sent
    x = np.random.default_rng(rank).standard_normal(BIG).astype(np.float32)
    out["sent"], ex = _sent(lambda: md.all_reduce_grads(x, backend=BACKEND))
    out["counted"] = ex.bytes_sent
    return out


def job_refusals(rank: int, world: int) -> dict:
    """Each row: one rank passes something wrong; every rank must raise the same option."""
    from mojolike import distributed as md
    rows = {
        "shape": ("grads", 1, lambda g, kw: ([g[0], g[1].reshape(17, 33), g[2]], kw)),
        "float64": ("grads[2]", 0, lambda g, kw: ([g[0], g[1], g[2].astype(np.float64)], kw)),
        "inf": ("grads", 1, lambda g, kw: (g[:2] + [np.full(7, np.inf, np.float32)], kw)),
        "unaligned": ("tokens", 0, lambda g, kw: (g, dict(kw, tokens=3072))),
        "mode": ("numeric_mode", 1, lambda g, kw: (g, dict(kw, backend="oracle",
                                                             numeric_mode="fast"))),
    }
    got = {}
    for name, (expect, bad, change) in rows.items():
        g, kw = _microbatch(0, rank), {"tokens": 2048, "backend": BACKEND}
        if rank == bad:
            g, kw = change(g, kw)
        before = [a.tobytes() for a in g]
        try:
            md.all_reduce_grads(g, **kw)
            got[name] = "not refused"
        except mojolike.Refusal as e:
            got[name] = e.option if e.option == expect else f"{e.option} ({e})"
        if [a.tobytes() for a in g] != before:
            got[name] = "a buffer changed"
    return got


def job_exits_midway(rank: int, world: int) -> dict:
    """Rank 1 agrees on the header, then exits inside the slice exchange."""
    from mojolike import distributed as md
    if rank == 1:
        md._reduce = lambda *a, **k: os._exit(7)
    g = _microbatch(0, rank)
    before = [a.tobytes() for a in g]
    t0 = time.monotonic()
    try:
        md.all_reduce_grads(g, tokens=2048, backend=BACKEND, timeout=30)
        return {"raised": "nothing"}
    except md.CollectiveFailed as e:
        return {"raised": "CollectiveFailed", "message": str(e), "seconds": time.monotonic() - t0,
                "untouched": [a.tobytes() for a in g] == before}


def job_stalls(rank: int, world: int) -> dict:
    """Rank 1 arrives 8 s late; rank 0 waits 1.5 s."""
    from mojolike import distributed as md
    g = _microbatch(0, rank)
    before = [a.tobytes() for a in g]
    if rank == 1:
        time.sleep(8)
    t0 = time.monotonic()
    try:
        md.all_reduce_grads(g, tokens=2048, backend=BACKEND, timeout=1.5 if rank == 0 else 5)
        return {"raised": "nothing"}
    except md.CollectiveFailed as e:
        return {"raised": "CollectiveFailed", "message": str(e), "seconds": time.monotonic() - t0,
                "untouched": [a.tobytes() for a in g] == before}


def job_step_refusals(rank: int, world: int) -> dict:
    """Each row: a step option that one rank or every rank gets wrong; every rank must refuse it
    by name as mojolike.distributed.step before anything moves. Then one good step."""
    from mojolike import distributed as md
    w = [np.zeros(3, np.float32)]
    opt = mojolike.SGD(w, lr=1.0, backend=BACKEND)
    other = mojolike.SGD([np.zeros(3, np.float32)], lr=0.5 if rank == 1 else 1.0, backend=BACKEND)
    rows = {  # name: (the expected option, the ranks that get it wrong, step's keywords there)
        "negative max_norm": ("max_norm", (0, 1), dict(max_norm=-1.0)),
        "clip on one rank": ("clip", (1,), dict(max_norm=1.0, clip="sideways")),
        "closure on one rank": ("closure", (0,), dict(closure=print)),
        "max_norm differs": ("max_norm", (1,), dict(max_norm=2.0)),
        "gate on one rank": ("update_gate", (1,), dict(max_norm=1.0, update_gate=False)),
        "grads of another shape": ("grads[0]", (0, 1), dict(grads=[np.ones(4, np.float32)])),
        "optimizer differs": ("optimizer", (0, 1), dict(optimizer=other, max_norm=1.0)),
        # every rank's gradient is finite, their sum is not: refused after the reduction
        "sums overflow": ("grads", (0, 1), dict(grads=[np.full(3, 3e38, np.float32)])),
    }
    got = {}
    for name, (expect, bad, change) in rows.items():
        g = [np.full(3, rank + 1.0, np.float32)]
        kw = dict(optimizer=opt, grads=g, max_norm=1.0)
        if rank in bad:
            kw.update(change)
        before = [a.tobytes() for a in kw["grads"] + w]
        try:
            md.step(tokens=None, **kw)
            got[name] = "not refused"
        except mojolike.Refusal as e:
            named = e.option == expect and e.entry_point == "mojolike.distributed.step" and \
                str(e).startswith(f"mojolike.distributed.step: {expect}")
            got[name] = e.option if named else f"{e.option} ({e})"
        if [a.tobytes() for a in kw["grads"] + w] != before or opt.t != 0:
            got[name] = "a buffer or the step count changed"
    g = [np.full(3, rank + 1.0, np.float32)]
    md.step(opt, g, max_norm=100.0)
    return {"refused": got, "params": w[0], "grads": g[0], "t": opt.t}


def job_transport_raises(rank: int, world: int, name: str) -> dict:
    """Rank 1 exits where it would make the transport call `name`; rank 0's call raises what gloo
    raises when the peer is gone, from the call itself."""
    import torch.distributed as dist

    from mojolike import distributed as md

    def gone(*args, **kwargs):
        if rank == 1:
            os._exit(7)
        raise (dist.DistBackendError if name == "batch_isend_irecv" else RuntimeError)(
            "[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1 (injected)")
    setattr(dist, name, gone)
    g = _microbatch(0, rank)
    before = [a.tobytes() for a in g]
    try:
        md.all_reduce_grads(g, tokens=2048, backend=BACKEND, timeout=30)
        return {"raised": "nothing"}
    except Exception as e:
        return {"raised": type(e).__name__, "message": str(e),
                "untouched": [a.tobytes() for a in g] == before}


def job_last_round_fails_on_one_rank(rank: int, world: int) -> dict:
    """Rank 1's last round completes and is then reported failed (its timeout, injected): rank 0
    writes the sums, rank 1 raises. Every later call on the group must refuse on both ranks; a
    new group works."""
    import torch.distributed as dist

    from mojolike import distributed as md
    if rank == 1:
        real = md._Clock.wait

        def wait(self, works, what):
            real(self, works, what)
            if what == "the final agreement":
                self.fail(what, "injected: the wait timed out after the round completed")
        md._Clock.wait = wait
    g = [np.full(5, rank + 1.0, np.float32)]
    out = {}
    try:
        md.all_reduce_grads(g, backend=BACKEND)
        out["first"] = "returned"
    except md.CollectiveFailed as e:
        out["first"] = "CollectiveFailed"
        out["first_message"] = str(e)
    if rank == 1:
        md._Clock.wait = real
    out["after_first"] = g[0].tolist()
    w = [np.zeros(5, np.float32)]
    opt = mojolike.SGD(w, lr=1.0, backend=BACKEND)
    for i, call in enumerate((lambda: md.all_reduce_grads(g, backend=BACKEND),
                              lambda: md.step(opt, g, max_norm=10.0))):
        before = g[0].tobytes() + w[0].tobytes()
        try:
            call()
            out[f"later{i}"] = "returned"
        except md.RanksDiverged as e:
            out[f"later{i}"] = [e.option, str(e)]
        out[f"later{i}_untouched"] = g[0].tobytes() + w[0].tobytes() == before
    fresh = dist.new_group([0, 1])
    h = [np.full(5, rank + 1.0, np.float32)]
    md.all_reduce_grads(h, group=fresh, backend=BACKEND)
    out["fresh"] = h[0].tolist()
    return out


# -- tests ----------------------------------------------------------------------------------------
def _ok(runs):
    for r in runs:
        assert r.ok, (r.rank, r.returncode, r.error, r.stderr[-2000:])
    return runs


@pytest.fixture(scope="module")
def four():
    return _ok(launch(4, f"{HERE}:job_world", timeout=300))


@pytest.fixture(scope="module")
def two():
    return _ok(launch(2, f"{HERE}:job_world", timeout=300))


def _same(a, b) -> bool:
    return a.shape == b.shape and bool((a.view(np.uint32) == b.view(np.uint32)).all())


def test_two_ranks_step_to_one_process_bits_with_adam_and_the_clip(two):
    want = _single(4)
    for r in two:
        assert _same(r.arrays["w2"], want), r.rank


def test_four_ranks_and_singletons_step_to_one_process_bits_with_adam_and_the_clip(four):
    want = _single(4)
    for r in four:
        assert _same(r.arrays["w4"], want) and _same(r.arrays["w1"], want), r.rank


def test_three_ranks_follow_the_pairwise_tree_with_the_odd_one_carried(four):
    want = _single(3)
    for r in four[:3]:
        assert _same(r.arrays["w3"], want), r.rank
    assert "w3" not in four[3].arrays


def test_torchs_own_all_reduce_sum_differs_from_one_process_at_four_ranks(four):
    ours, theirs = four[0].arrays["ours_sum"], four[0].arrays["torch_sum"]
    want = np.concatenate([x.reshape(-1) for x in _accumulate(0, range(4))])
    assert _same(ours, want)
    differ = int((theirs.view(np.uint32) != want.view(np.uint32)).sum())
    assert differ > 0, "gloo's ring sum happened to equal the pairwise tree everywhere"


def test_fewer_elements_than_ranks_leave_a_rank_an_empty_slice_and_still_reduce(four):
    want = mojolike.accumulate_grads([np.float32([r + 0.5, -1.0, 2.0 ** -r]) for r in range(4)],
                                     [2048] * 4, backend="oracle")  # aligned counts: the sum alone
    for r in four:
        assert _same(r.arrays["tiny"], want), r.rank


def test_the_slice_tree_is_the_pairwise_tree_for_every_world_size_up_to_nine():
    from mojolike.oracles.fold import pairwise

    from mojolike import distributed as md
    from mojolike.core import registry
    k = registry.kernels("test", "optim", BACKEND)
    rng = np.random.default_rng(5)
    for w in range(1, 10):
        rows = [(rng.standard_normal(64) * 2.0 ** rng.integers(-20, 20, 64)).astype(np.float32)
                for _ in range(w)]
        got = np.empty(64, np.float32)
        md._tree(rows, k, got)
        want = pairwise(rows, lambda a, b: a + b)  # numpy float32 addition: one rounding each
        assert _same(got, want), w


@pytest.mark.parametrize("world", [2, 4])
def test_no_rank_sends_more_than_a_ring_all_reduce_measured_at_the_socket(two, four, world):
    bound = 2 * (world - 1) / world * 4 * BIG
    for r in (two if world == 2 else four):
        measured, counted = int(r.values["sent"]), int(r.values["counted"])
        assert counted <= bound + 4 * world
        assert counted <= measured <= 1.01 * bound, (r.rank, measured, bound)
    for r in four[:2]:  # a pair inside the world of four sends what a world of two does
        counted, measured = int(r.values["counted_pair"]), int(r.values["sent_pair"])
        assert counted <= 4 * BIG and counted <= measured <= 1.01 * 4 * BIG, (r.rank, measured)


def test_every_rank_refuses_together_when_one_rank_passes_something_wrong():
    runs = _ok(launch(2, f"{HERE}:job_refusals", timeout=300))
    want = {"shape": "grads", "float64": "grads[2]", "inf": "grads", "unaligned": "tokens",
            "mode": "numeric_mode"}
    for r in runs:
        assert r.values == want, r.rank


def test_a_rank_that_exits_midway_makes_the_other_fail_clearly_with_nothing_written():
    runs = launch(2, f"{HERE}:job_exits_midway", timeout=120)
    assert runs[1].returncode == 7
    v = runs[0].values
    assert v["raised"] == "CollectiveFailed" and v["untouched"], v
    assert v["seconds"] < 30 and "rank 0 of 2" in v["message"] and "Nothing was written" in v["message"]


def test_a_rank_that_stalls_makes_the_other_time_out_with_nothing_written():
    runs = launch(2, f"{HERE}:job_stalls", timeout=120)
    v = runs[0].values
    assert v["raised"] == "CollectiveFailed" and v["untouched"], v
    assert 1.4 < v["seconds"] < 6 and "timeout=1.5 s" in v["message"], v


def test_without_a_process_group_the_call_is_refused_and_nothing_written():
    from mojolike import distributed as md
    g = np.ones(3, np.float32)
    with pytest.raises(mojolike.Refusal, match="init_process_group") as e:
        md.all_reduce_grads(g)
    assert e.value.option == "group" and g.tolist() == [1, 1, 1]


def test_a_timeout_that_is_not_positive_is_refused_by_name(tmp_path):
    import torch.distributed as dist

    from mojolike import distributed as md
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "s"), 1), rank=0,
                            world_size=1)
    try:
        for bad in (0, -1.0, float("nan"), "5"):
            with pytest.raises(mojolike.Refusal) as e:
                md.all_reduce_grads(np.ones(3, np.float32), timeout=bad)
            assert e.value.option == "timeout"
    finally:
        dist.destroy_process_group()


def test_mixed_numeric_modes_are_refused_by_the_same_rule_on_every_rank():
    h = [wire.Header(False, 1, 3, 1, True, -1, 0), wire.Header(False, 1, 3, 1, True, -1, 1)]
    for rank in (0, 1):
        with pytest.raises(mojolike.Refusal) as e:
            wire.agree("e", rank, h, h[rank])
        assert e.value.option == "numeric_mode"


def test_a_header_carries_a_refusal_reason_to_the_other_ranks():
    h = wire.Header(True, 0, 0, 0, True, -1, 0, "grads[1]", "has dtype float64; " + "x" * 400)
    back = wire.Header.unpack(h.pack())
    assert back.option == "grads[1]" and back.reason.startswith("has dtype float64")
    with pytest.raises(mojolike.Refusal, match="was refused on rank 0") as e:
        wire.agree("e", 1, [back, wire.Header(False, 1, 3, 1, True, -1, 0)], None)
    assert e.value.option == "grads[1]"


def test_slices_cover_the_gradient_once_and_differ_by_at_most_one_element():
    from mojolike.distributed import slices
    for n, w in ((10, 4), (3, 4), (1 << 20, 3), (7, 1)):
        cuts = slices(n, w)
        assert cuts[0][0] == 0 and cuts[-1][1] == n and len(cuts) == w
        assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
        assert max(b - a for a, b in cuts) - min(b - a for a, b in cuts) <= 1


def test_import_mojolike_does_not_import_torch_and_without_torch_the_call_is_refused():
    code = ("import sys; sys.modules['torch'] = None; import mojolike, numpy as np; "
            "assert 'torch.distributed' not in sys.modules\n"
            "from mojolike import distributed as md\n"
            "try:\n    md.all_reduce_grads(np.ones(2, np.float32))\n"
            "except mojolike.Refusal as e:\n    print(e.option, '|', e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("torch | mojolike.distributed.all_reduce_grads: torch is not "
                                 "installed") and "mojolike[distributed]" in out.stdout


def test_certify_leaves_the_distributed_suite_out_by_name_when_torch_is_missing(tmp_path, monkeypatch,
                                                                               capsys):
    import importlib.util

    from mojolike import cli, contracts
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert cli.main(["certify", "--backend", "cpu-cffi", "--suite", "distributed", "--out", str(tmp_path)]) == 2
    assert "torch is not installed: pip install 'mojolike[distributed]'" in capsys.readouterr().err
    monkeypatch.setattr(contracts, "SUITES", ("fold", "distributed"))
    assert cli.main(["certify", "--backend", "cpu-cffi", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "not run: suite distributed (torch is not installed" in out
    assert (tmp_path / "cpu-cffi" / "fold.card").exists()
    assert not (tmp_path / "cpu-cffi" / "distributed.card").exists()


def test_the_readme_torchrun_example_gives_both_ranks_one_process_bits(tmp_path):
    import re
    import subprocess
    import sys
    from pathlib import Path
    example = Path(__file__).resolve().parent.parent / "examples" / "data_parallel.py"
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2", str(example)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    # Unbuffered ranks may write a line and its newline separately, so lines can interleave:
    # read each rank's number by its pattern, not by line.
    sums = dict(re.findall(r"rank (\d+): checksum (-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)", run.stdout))
    assert sorted(sums) == ["0", "1"] and sums["0"] == sums["1"], run.stdout
    assert "rank 0: equal to one process: True" in run.stdout, run.stdout


def test_step_refuses_every_bad_step_option_on_every_rank_before_anything_moves():
    runs = _ok(launch(2, f"{HERE}:job_step_refusals", timeout=120))
    want = {"negative max_norm": "max_norm", "clip on one rank": "clip",
            "closure on one rank": "closure", "max_norm differs": "max_norm",
            "gate on one rank": "update_gate", "grads of another shape": "grads[0]",
            "optimizer differs": "optimizer", "sums overflow": "grads"}
    for r in runs:
        assert r.values["refused"] == want, r.rank
        # one good step after the refusals: the sum 1 + 2 stepped once, as in one process
        assert r.arrays["params"].tolist() == [-3.0] * 3 and r.values["t"] == 1, r.rank
        assert r.arrays["grads"].tolist() == [3.0] * 3, r.rank


@pytest.mark.parametrize("name", ["all_gather", "all_to_all_single", "batch_isend_irecv",
                                  "all_reduce"])
def test_a_transport_call_that_raises_becomes_collective_failed_naming_its_round(name):
    runs = launch(2, f"{HERE}:job_transport_raises", {"name": name}, timeout=120)
    assert runs[1].returncode == 7
    v = runs[0].values
    rounds = {"all_gather": "the header exchange", "all_to_all_single": "the slice exchange",
              "batch_isend_irecv": "the gather of the reduced slices",
              "all_reduce": "the final agreement"}
    assert v["raised"] == "CollectiveFailed" and v["untouched"], v
    assert rounds[name] in v["message"] and "Connection closed by peer" in v["message"], v
    assert "Nothing was written to grads on this rank" in v["message"], v


def test_a_last_round_that_fails_on_one_rank_only_makes_every_later_call_refuse_on_every_rank():
    runs = _ok(launch(2, f"{HERE}:job_last_round_fails_on_one_rank", timeout=120))
    zero, one = runs[0].values, runs[1].values
    assert zero["first"] == "returned" and zero["after_first"] == [3.0] * 5
    assert one["first"] == "CollectiveFailed" and one["after_first"] == [2.0] * 5
    assert "clause 18" in one["first_message"], one["first_message"]
    for v in (zero, one):
        option, message = v["later0"]
        assert option == "group" and "diverged" in message and "call 1" in message, message
        assert "ranks [0]" in message and "ranks [1]" in message and "checkpoint" in message
        option, message = v["later1"]
        assert option == "group" and message.startswith("mojolike.distributed.step: group "), message
        assert v["later0_untouched"] and v["later1_untouched"]
        assert v["fresh"] == [3.0] * 5  # a new process group starts clean


def _header(**kw):
    return wire.Header(False, 1, 3, 1, True, -1, 0, **kw)


def test_ranks_at_different_calls_refuse_together_as_diverged():
    h = [_header(sequence=4), _header(sequence=3)]
    for rank in (0, 1):
        with pytest.raises(wire.RanksDiverged) as e:
            wire.agree("e", rank, h, h[rank])
        assert e.value.option == "group" and "rank 0: call 4, rank 1: call 3" in str(e.value)


def test_a_group_that_diverged_stays_refused_on_every_later_call():
    ledger, group = wire.Ledger(), type("Group", (), {})()
    assert ledger.begin(group) == (1, wire.NOTHING)
    ledger.end(group, wire.DIVERGED)
    for n in (2, 3):
        number, previous = ledger.begin(group)
        ledger.end(group, wire.WROTE)
        assert (number, previous) == (n, wire.DIVERGED)
        h = [_header(sequence=n, previous=previous), _header(sequence=n, previous=wire.NOTHING)]
        with pytest.raises(wire.RanksDiverged, match="diverged in an earlier call on ranks \\[0\\]"):
            wire.agree("e", 1, h, h[1])


def test_step_options_that_differ_between_ranks_are_refused_by_name_with_both_values():
    one = (1, int(np.float64(1.0).view(np.int64)), -1, 0, 1)
    two = (1, int(np.float64(2.0).view(np.int64)), -1, 0, 1)
    h = [_header(step=one), _header(step=two)]
    for rank in (0, 1):
        with pytest.raises(mojolike.Refusal) as e:
            wire.agree("e", rank, h, h[rank])
        assert e.value.option == "max_norm" and "1.0 on rank 0, 2.0 on rank 1" in str(e.value)
    with pytest.raises(mojolike.Refusal) as e:
        wire.agree("e", 0, [_header(step=one), _header()], None)
    assert e.value.option == "optimizer" and "all_reduce_grads" in str(e.value)


def test_a_header_keeps_the_call_number_the_previous_outcome_and_the_step_through_the_wire():
    h = _header(sequence=9, previous=wire.WROTE, step=(1, 5, -1, 1, 0), optimizer=-77)
    assert wire.Header.unpack(h.pack()) == h
    with pytest.raises(ValueError, match="another format"):
        wire.Header.unpack(h.pack()[:-1])


def test_a_call_beside_another_gets_its_own_workspace_and_the_next_call_reuses_it():
    from mojolike import distributed as md
    key, first = md._workspace(6, 4)
    _, beside = md._workspace(6, 4)
    assert not np.shares_memory(first[1], beside[1]) and not np.shares_memory(first[0], beside[0])
    md._release(key, first)
    assert md._workspace(6, 4)[1][1] is first[1]
