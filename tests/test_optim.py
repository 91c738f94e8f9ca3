"""The optimizers' public behaviour: torch's names and defaults, in-place updates, registry,
state, clip, accumulation and refusals."""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from conftest import CPU_BACKENDS, assert_same_bits
from mojolike.contracts import optim as suite
from mojolike.contracts.casegen import bulk_normal
from mojolike.oracles import fold as fold_spec

import mojolike
from mojolike import Refusal


def params():
    return [bulk_normal(1500, "t/p0"), bulk_normal(40, "t/p1").reshape(5, 8)]


def grads(step=0):
    return [bulk_normal(1500, f"t/g{step}/0") * np.float32(0.01),
            (bulk_normal(40, f"t/g{step}/1") * np.float32(0.01)).reshape(5, 8)]


def test_defaults_are_torchs():
    p = np.ones(3, np.float32)
    sgd, adam, adamw = mojolike.SGD(p), mojolike.Adam(p), mojolike.AdamW(p)
    assert (sgd.lr, sgd.momentum, sgd.dampening, sgd.weight_decay, sgd.nesterov, sgd.maximize) == \
        (1e-3, 0.0, 0.0, 0.0, False, False)
    assert (adam.lr, adam.betas, adam.eps, adam.weight_decay, adam.maximize) == \
        (1e-3, (0.9, 0.999), 1e-8, 0.0, False)
    assert adamw.weight_decay == 0.01
    assert mojolike.Adam(p, decoupled_weight_decay=True).weight_decay == 0.0  # torch's Adam default


@pytest.mark.parametrize("backend", ("oracle",) + CPU_BACKENDS)
def test_step_updates_the_callers_arrays_in_place_and_reports_what_it_used(backend):
    ps = params()
    ids = [id(p) for p in ps]
    before = [p.copy() for p in ps]
    opt = mojolike.AdamW(ps, lr=0.01, backend=backend)
    assert opt.step(grads()) is None and opt.t == 1 and opt.lr_ == pytest.approx(0.01)
    assert opt.total_norm_ is None and opt.clip_coef_ is None
    assert [id(p) for p in ps] == ids
    assert all((p != b).any() for p, b in zip(ps, before))


def test_adam_and_adamw_differ_by_where_the_decay_goes():
    a, b = params(), params()
    mojolike.Adam(a, lr=0.01, weight_decay=0.1).step(grads())
    mojolike.AdamW(b, lr=0.01, weight_decay=0.1).step(grads())
    assert (a[0] != b[0]).any()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_list_flat_and_arena_layouts_give_the_same_bits(backend):
    flat = np.concatenate([p.reshape(-1) for p in params()])
    arena = flat.copy()
    views = [arena[:1500], arena[1500:].reshape(5, 8)]
    lst = params()
    flat_g = np.concatenate([g.reshape(-1) for g in grads()])
    opts = [mojolike.Adam(flat, lr=0.01, backend=backend), mojolike.Adam(views, lr=0.01, backend=backend),
            mojolike.Adam(lst, lr=0.01, backend=backend)]
    assert [o.packed_ for o in opts] == [False, False, False]  # separate arrays: updated where they lie
    opts[0].step(flat_g.copy(), max_norm=0.1)
    opts[1].step(grads(), max_norm=0.1)
    opts[2].step(grads(), max_norm=0.1)
    assert_same_bits(arena, flat)
    assert_same_bits(np.concatenate([p.reshape(-1) for p in lst]), flat)


def test_separate_arrays_are_packed_only_for_kernels_that_take_flat_arrays():
    assert mojolike.Adam(params(), lr=0.01, backend="oracle").packed_
    lst = params()
    before = [p.copy() for p in lst]
    opt = mojolike.Adam(lst, lr=0.01, backend="oracle")
    opt.step(grads(), max_norm=0.1)  # gathered, stepped, scattered back into the caller's arrays
    assert all((p != b).any() for p, b in zip(lst, before))


def test_clip_scales_the_callers_gradients_and_step_returns_the_pre_clip_norm():
    ps, gs = params(), grads()
    norms = [np.float32(np.sqrt(np.float32(fold_spec.sumsq(g.reshape(-1).tolist())))) for g in gs]
    total = mojolike.SGD(ps, lr=0.1, backend="cpu-numba").step(gs, max_norm=0.05)
    want = float(np.sqrt(np.float32(fold_spec.fold([float(n * n) for n in norms]))))
    assert total == want
    after = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in gs))
    assert after == pytest.approx(0.05, rel=1e-5)


def test_without_max_norm_the_gradients_are_untouched():
    ps, gs = params(), grads()
    before = [g.copy() for g in gs]
    mojolike.Adam(ps).step(gs)
    assert all((a == b).all() for a, b in zip(gs, before))


def test_clip_grad_norm_matches_the_optimizer_clip_and_refuses_other_norms():
    gs1, gs2 = grads(), grads()
    total = mojolike.clip_grad_norm_(gs1, 0.05)
    assert total == mojolike.SGD(params(), backend="cpu-cffi").step(gs2, max_norm=0.05)
    for a, b in zip(gs1, gs2):
        assert_same_bits(a, b)
    with pytest.raises(Refusal, match="norm_type"):
        mojolike.clip_grad_norm_(grads(), 1.0, norm_type="inf")
    with pytest.raises(Refusal, match="error_if_nonfinite"):
        mojolike.clip_grad_norm_(grads(), 1.0, error_if_nonfinite=False)


def test_a_non_finite_total_norm_raises_before_any_gradient_is_scaled():
    gs = [np.float32([3e38, 3e38]), np.float32([1.0])]
    before = [g.copy() for g in gs]
    with pytest.raises(Refusal, match="total norm"):
        mojolike.clip_grad_norm_(gs, 1.0)
    assert all((a == b).all() for a, b in zip(gs, before))


def test_non_finite_gradients_are_refused_before_anything_is_written():
    ps, gs = params(), grads()
    gs[1][2, 3] = np.nan
    p_before, g_before = [p.copy() for p in ps], [g.copy() for g in gs]
    opt = mojolike.Adam(ps)
    with pytest.raises(Refusal, match="inf or NaN"):
        opt.step(gs)
    with pytest.raises(Refusal, match="inf or NaN"):
        opt.step(gs, max_norm=1.0)
    assert opt.t == 0
    assert all(np.array_equal(a, b) for a, b in zip(ps, p_before))
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(gs, g_before))


def test_deterministic_mode_does_not_check_finiteness_and_says_it_has_no_contract():
    gs = grads()
    gs[0][0] = np.inf
    opt = mojolike.SGD(params(), numeric_mode="deterministic")
    opt.step(gs)
    assert opt.numeric_mode == "deterministic"


def test_zero_grad_writes_positive_zero():
    gs = grads()
    mojolike.SGD(params()).zero_grad(gs)
    assert all((g.view(np.uint32) == 0).all() for g in gs)


def test_lr_schedule_sets_lr_before_each_step():
    class Halving:
        def lr_at(self, t):
            return 0.5 ** t

    opt = mojolike.SGD(params(), lr=1.0, lr_schedule=Halving())
    opt.step(grads())
    assert opt.lr_ == 0.5
    opt.step(grads(1))
    assert opt.lr_ == 0.25


@pytest.mark.parametrize("kind,kw", [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.01)),
                                     ("AdamW", dict(lr=0.01))])
def test_state_dict_round_trips_through_npz_and_resumes_bit_for_bit(tmp_path, kind, kw):
    full, half = params(), params()
    a = getattr(mojolike, kind)(full, **kw)
    for t in range(4):
        a.step(grads(t))
    b = getattr(mojolike, kind)(half, **kw)
    for t in range(2):
        b.step(grads(t))
    mojolike.save_state(tmp_path / "s.npz", b.state_dict())
    c = getattr(mojolike, kind)(half, **kw)
    c.load_state_dict(mojolike.load_state(tmp_path / "s.npz"))
    assert c.t == 2
    for t in range(2, 4):
        c.step(grads(t))
    for x, y in zip(full, half):
        assert_same_bits(x, y)


def test_load_state_dict_validates_before_copying():
    opt = mojolike.Adam(params())
    opt.step(grads())
    state = opt.state_dict()
    bad = dict(state, exp_avg=[state["exp_avg"][0], state["exp_avg"][1].astype(np.float64)])
    with pytest.raises(Refusal, match=r"exp_avg\[1\]"):
        opt.load_state_dict(bad)
    with pytest.raises(Refusal, match="kind"):
        mojolike.SGD(params(), momentum=0.9).load_state_dict(state)
    assert opt.t == 1


def test_accumulate_grads_is_the_pairwise_tree_in_the_structure_of_one_entry():
    mbs = [[np.float32([1.0, 2.0]), np.float32([[3.0]])] for _ in range(3)]
    mbs[1][0][0] = 2.0 ** 24
    mbs[2][0][0] = 1.0
    out = mojolike.accumulate_grads(mbs, [4, 4, 4], aligned=False)
    assert isinstance(out, list) and out[1].shape == (1, 1) and out.aligned is False
    assert out[0][0] == np.float32(np.float32(1.0) + np.float32(2.0 ** 24)) + np.float32(1.0)


SPLITS = [[1024] * 2, [2048] * 4, [1024] * 8, [2048] * 3, [2048, 1024], [4096], [3000], [1, 1],
          [3072] * 2, [512] * 4, [1024, 2048], [1000] * 2, [2048, 3072], [1, 1, 1], [32, 32],
          [4096, 1, 1]]


@pytest.mark.parametrize("sizes", SPLITS, ids=str)
def test_accumulation_is_aligned_exactly_when_the_split_keeps_the_unsplit_bits(sizes):
    aligned = mojolike.accumulation_is_aligned(sizes, len(sizes))
    edges = np.cumsum([0] + sizes)
    differs = False
    for trial in range(30):  # differences show quickly on inputs of mixed magnitude
        tokens = bulk_normal(sum(sizes), f"t/split/{sizes}/{trial}") * np.float32(2.0 ** (trial % 7 * 3))
        whole = fold_spec.fold(tokens.tolist())
        parts = [np.float32([fold_spec.fold(tokens[a:b].tolist())]) for a, b in zip(edges[:-1], edges[1:])]
        split = mojolike.accumulate_grads(parts, sizes, aligned=False, backend="oracle")[0]
        differs |= bool(np.float32(whole).view(np.uint32) != split.view(np.uint32))
        if differs and not aligned:
            break
    assert differs != aligned, f"{sizes}: predicted aligned={aligned}, differs={differs}"
    assert aligned == (sizes in SPLITS[:8])  # the first eight are the aligned ones


def test_accumulate_grads_refuses_an_unaligned_split_by_name_in_identical_mode():
    mbs = [grads(j) for j in range(4)]
    before = [[g.tobytes() for g in mb] for mb in mbs]
    with pytest.raises(Refusal) as err:
        mojolike.accumulate_grads(mbs, [128] * 4, backend="oracle")
    assert err.value.option == "tokens" and "aligned=False" in str(err.value)
    assert [[g.tobytes() for g in mb] for mb in mbs] == before
    with pytest.raises(Refusal) as err:  # aligned=True asserts it, in any mode
        mojolike.accumulate_grads(mbs, [128] * 4, aligned=True, numeric_mode="deterministic")
    assert err.value.option == "tokens"
    with pytest.raises(Refusal) as err:
        mojolike.accumulate_grads(mbs, [128] * 4, aligned="no")
    assert err.value.option == "aligned"
    # outside identical mode no bits are promised: the same split is summed, unlabelled
    out = mojolike.accumulate_grads(mbs, [128] * 4, numeric_mode="deterministic")
    assert type(out) is list and not hasattr(out, "aligned")


@pytest.mark.parametrize("tokens, aligned", [([128] * 4, False), ([2048] * 4, True)])
def test_accumulate_grads_with_aligned_false_labels_the_result_with_the_truth(tokens, aligned):
    mbs = [grads(j) for j in range(4)]
    labelled = mojolike.accumulate_grads(mbs, tokens, aligned=False, backend="oracle")
    one = mojolike.accumulate_grads([mb[0] for mb in mbs], tokens, aligned=False, backend="oracle")
    assert labelled.aligned is aligned and one.aligned is aligned and one[1:].aligned is aligned
    plain = mojolike.accumulate_grads(mbs, [2048] * 4, backend="oracle")  # same tree, same bits
    assert not hasattr(plain, "aligned") and type(plain) is list
    for a, b in zip(labelled, plain):
        assert_same_bits(a, b)
    assert_same_bits(one, plain[0])


def test_step_accumulated_refuses_an_unaligned_split_unless_asked_and_says_which_it_took():
    p = params()
    opt = mojolike.SGD(p, lr=0.1, accumulation_steps=2)
    before = [a.tobytes() for a in p]
    with pytest.raises(Refusal) as err:
        opt.step_accumulated([grads(0), grads(1)], [128, 128])
    assert err.value.entry_point == "mojolike.SGD" and err.value.option == "tokens"
    assert "aligned=False" in str(err.value) and opt.t == 0 and opt.aligned_ is None
    assert [a.tobytes() for a in p] == before
    opt.step_accumulated([grads(0), grads(1)], [128, 128], aligned=False)
    assert opt.t == 1 and opt.aligned_ is False


def test_step_accumulated_sums_microbatches_and_refuses_another_count():
    opt = mojolike.SGD(params(), lr=0.1, accumulation_steps=2)
    with pytest.raises(Refusal, match="accumulation_steps"):
        opt.step_accumulated([grads()], [1024])
    ref = params()
    summed = mojolike.accumulate_grads([grads(0), grads(1)], [1024, 1024])
    mojolike.SGD(ref, lr=0.1).step(summed)
    opt.step_accumulated([grads(0), grads(1)], [1024, 1024])
    assert opt.aligned_ is True
    assert_same_bits(opt._reg.views[0], ref[0].reshape(-1))


def test_a_warm_step_allocates_no_registry_sized_temporaries():
    n = 1 << 20
    p = [bulk_normal(n // 2, "t/alloc/p0"), bulk_normal(n // 2, "t/alloc/p1")]
    g = [bulk_normal(n // 2, "t/alloc/g0") * np.float32(1e-3), bulk_normal(n // 2, "t/alloc/g1")]
    opt = mojolike.Adam(p, backend="cpu-numba")
    opt.step(g, max_norm=1.0)
    tracemalloc.start()
    opt.step(g, max_norm=1.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * n // 16, f"a warm step allocated {peak} bytes at peak"


def test_params_to_device_is_refused_off_the_gpu():
    with pytest.raises(Refusal, match="cuda"):
        mojolike.Adam(params(), backend="cpu-numba").params_to_device()


def test_sparse_gradients_are_refused_by_name():
    class Sparse:
        nnz = 3
    opt = mojolike.SGD(params())
    with pytest.raises(Refusal, match="sparse"):
        opt.step([Sparse(), Sparse()])


def test_the_suite_refusal_table_holds_on_the_default_backend():
    status, detail = suite.clause_refusals(mojolike.core.registry.kernels("t", "optim", "cpu-numba"))
    assert status == "pass", detail


_RESIDENT = """
import numpy as np, mojolike
from mojolike.contracts.casegen import bulk_normal
def run(backend, resident):
    p = [bulk_normal(1100, 'r/p0'), bulk_normal(30, 'r/p1')]
    opt = mojolike.Adam(p, lr=0.01, weight_decay=0.1, backend=backend)
    if resident:
        opt.params_to_device()
    for t in range(2):
        opt.step([bulk_normal(1100, f'r/g{t}/0') * np.float32(0.01), bulk_normal(30, f'r/g{t}/1')],
                 max_norm=1.0)
    if resident:
        opt.params_to_host()
    sd = opt.state_dict()
    return np.concatenate([x.reshape(-1) for x in p] + sd['exp_avg'] + sd['exp_avg_sq'])
print(bool((run('cpu-numba', False).view(np.uint32) == run('cuda-sim', True).view(np.uint32)).all()))
"""


def test_parameters_kept_on_the_device_give_the_same_bits():
    # in a simulator process the CUDA kernels run in-process, so parameters can stay resident
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", _RESIDENT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True"
