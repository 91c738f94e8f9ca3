"""The mixed suite's range cases (the FMA path and the multiply-add fallback), windowed loss-scale
cases, twin-refresh cases, attention and embedding cases, negative controls and refusals (contracts/mixed.md): each control
changes the card where the contract says it must, the cases hold the inputs they claim, every
refusal names its option."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import available
from mojolike.contracts import (
    harness,
    mixed,
    mixed_attention,
    mixed_fma,
    mixed_refusals,
    mixed_scaler,
    mixed_twins,
)
from mojolike.oracles import f32

from mojolike.core import cardformat

BACKENDS = ("oracle", "cpu-numba", "cpu-cffi", "cuda-sim")
RANGE = [c[0] for c in mixed_fma.CASES]
WINDOWS = [w.id for w in mixed_scaler.WINDOWS]
TWINS = [t.id for t in mixed_twins.TWIN_CASES]
LOW_OPS = [c.id for c in mixed_attention.CASES]


def _case(cid):
    (c,) = [c for c in mixed.cases() if c.id == cid]
    return c


def _control(name):
    (c,) = [c for c in mixed.negative_controls() if c.name == name]
    return c


def _differing(outs, ref) -> set[str]:
    return {key for key, want in ref.items()
            if not ((outs[key].view(np.uint32) == want.view(np.uint32))
                    | (np.isnan(outs[key]) & np.isnan(want))).all()}


@pytest.fixture(scope="module")
def oracle():
    return harness.oracle_outputs(mixed)


@pytest.fixture(scope="module")
def control_outputs():
    return {c.name: harness._outputs(mixed, c) for c in mixed.negative_controls()}


def _products(cid):
    case = _case(cid)
    a = case.operands[0].astype(np.float32).astype(np.float64)
    b = case.operands[1].astype(np.float32).astype(np.float64)
    b = b if case.kind == "matmul" else b.T
    return [Fraction(u) * Fraction(v) for row in a for col in b.T for u, v in zip(row, col)]


def _representable(p: Fraction) -> bool:
    # float(p) is exact (at most 22 significant bits); f32.round_float is the exact rounding
    return f32.round_float(float(p)) == p


def _exact_in_float32(p: Fraction) -> bool:
    """A product a fused multiply-add may take: a float32 value in the normal range."""
    return p == 0 or (2.0**-126 <= abs(p) < 2.0**128 and _representable(p))


def test_every_negative_control_changes_the_card(oracle, control_outputs):
    true = harness._card(mixed, oracle)
    names = [c.name for c in mixed.negative_controls()]
    assert {"truncate", "low-products", "fma-underflow", "window-not-sticky", "twin-stale"} <= set(names)
    for name in names:
        card = harness._card(mixed, control_outputs[name])
        assert cardformat.count_differing_records(true, card) > 0, name


def test_the_float16_and_in_range_bfloat16_products_are_exact_and_the_others_are_not():
    assert all(_exact_in_float32(p) for p in _products("linear-float16-range"))
    assert all(_exact_in_float32(p) for p in _products("linear-bfloat16-wide"))
    under = _products("linear-bfloat16-underflow")
    assert all(0 < abs(p) < 2.0**-126 for p in under)
    assert sum(not _representable(p) for p in under) > len(under) // 4
    over = _products("matmul-bfloat16-overflow")
    assert any(abs(p) >= 2.0**128 for p in over)


def test_fma_everywhere_changes_only_the_bfloat16_cases_whose_products_leave_the_range(
        oracle, control_outputs):
    changed = _differing(control_outputs["fma-underflow"], oracle)
    assert changed == {"linear-bfloat16-underflow/linear", "matmul-bfloat16-overflow/matmul"}


def test_the_overflow_case_is_infinite_where_a_fused_multiply_add_would_be_finite(
        oracle, control_outputs):
    true = oracle["matmul-bfloat16-overflow/matmul"]
    fused = control_outputs["fma-underflow"]["matmul-bfloat16-overflow/matmul"]
    assert np.isinf(true[:2]).all() and np.isfinite(fused[:2]).all()
    assert np.isfinite(true[2:]).all() and (true[2:] == fused[2:]).all()


def test_rounding_products_to_the_low_precision_changes_every_contraction(oracle, control_outputs):
    changed = _differing(control_outputs["low-products"], oracle)
    contractions = {f"{c.id}/{c.kind}" for c in mixed.cases() if c.kind in ("linear", "matmul")}
    assert len(contractions) == 8 and contractions <= changed


def test_the_window_cases_give_the_scales_and_skips_the_windowed_clauses_say(oracle):
    scales = {w: oracle[f"{w}/scales"].tolist() for w in WINDOWS}
    skipped = {w: oracle[f"{w}/skipped"].tolist() for w in WINDOWS}
    # growth_interval = k: a clean window grows at its end; an overflowing one backs off once
    assert scales["window-second"] == [1024.0] * 3 + [2048.0] * 4 + [1024.0]
    assert skipped["window-second"] == [float(s == 5) for s in range(8)]
    assert scales["window-two"] == [1024.0] * 3 + [512.0] * 4 + [1024.0]
    assert skipped["window-two"] == [float(s in (1, 2)) for s in range(8)]
    assert scales["window-last"] == [1024.0, 1024.0, 2048.0] + [2048.0] * 2 + [1024.0] * 3 + [2048.0]
    assert skipped["window-last"] == [float(s == 5) for s in range(9)]


def test_a_window_flag_that_is_not_sticky_misses_an_overflow_followed_by_a_clean_step(
        oracle, control_outputs):
    changed = _differing(control_outputs["window-not-sticky"], oracle)
    # the overflow at a window's last step is seen either way
    assert changed == {"window-second/scales", "window-two/scales"}
    assert control_outputs["window-not-sticky"]["window-second/scales"][-1] == 4096.0


def test_a_skipped_step_writes_nothing_so_the_final_parameters_show_it(oracle):
    w = mixed_scaler.WINDOWS[0]
    clean = mixed_scaler.Window(w.id, w.k, w.steps, w.growth_interval, ())
    got = dict(mixed_scaler.run(clean, "oracle"))
    assert not (got["params"].view(np.uint32) == oracle[f"{w.id}/params"].view(np.uint32)).all()


@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_the_range_window_twin_attention_and_embedding_cases_equal_the_oracle_on_every_backend(
        oracle, backend):
    if not available(backend):
        pytest.skip(f"{backend} cannot run here")
    k = harness.registry.kernels("test", "mixed", backend, "identical")
    picked = RANGE + WINDOWS + TWINS + LOW_OPS
    outs = harness._outputs(mixed, k, cases=tuple(_case(c) for c in picked))
    assert {f"{t}/twins-1" for t in TWINS} <= set(outs)
    assert {f"attention-{t}/{n}" for t in ("bfloat16", "float16") for n in ("o", "dq", "dk", "dv")
            } | {"embedding-bfloat16/rows", "embedding-float16/rows"} <= set(outs)
    assert not _differing(outs, {key: oracle[key] for key in outs})


def test_every_refusal_of_the_suite_names_its_option():
    table, _ = mixed_refusals.table("oracle")
    assert len(table) >= 35
    assert {"params", "twin", "twins", "grads[0] and twins[1]", "frozen"} <= {o for o, _ in table[26:]}
    for expect, act in table:
        assert harness.refusal_failures(expect, act) == [], expect
    assert mixed.clause_refusals(type("K", (), {"backend": "oracle"})())[0] == "pass"


def test_a_refusal_expected_under_another_name_fails_the_clause():
    table, buffers = mixed_refusals.table("oracle")
    wrong = [("dtype" if opt != "dtype" else "x", act) for opt, act in table[-5:]]
    status, detail = harness.refusal_clause(wrong, buffers)
    assert status == "fail" and "5 of 5 refusals wrong" in detail


def test_the_float16_range_case_reaches_subnormals_and_the_largest_binade():
    x = _case("linear-float16-range").operands[0]
    fields = (x.view(np.uint16) >> 10) & 0x1F
    assert fields.min() == 0 and fields.max() == 30
    assert math.isfinite(float(np.abs(x.astype(np.float32)).max()))


def _u32(a) -> list[int]:
    return a.view(np.uint32).tolist()


def test_a_twin_not_refreshed_after_a_step_changes_every_stepped_twin_record_and_no_master(
        oracle, control_outputs):
    changed = _differing(control_outputs["twin-stale"], oracle)
    stepped = {f"{c.id}/twins-{s}" for c in mixed_twins.TWIN_CASES for s in range(1, c.steps + 1)}
    assert changed == stepped  # the masters without twins are the masters with them


def test_the_sgd_twin_case_lands_on_its_targets_then_their_halves_and_its_twins_are_their_casts(
        oracle):
    targets = np.array(mixed_twins.TARGETS, np.uint32).view(np.float32)
    first = np.concatenate([targets, -targets])
    assert _u32(oracle["twins-sgd/masters-1"]) == _u32(first)
    assert _u32(oracle["twins-sgd/masters-2"]) == _u32(first * np.float32(0.5))
    n = targets.size
    for s in (1, 2):
        masters, twins = oracle[f"twins-sgd/masters-{s}"], oracle[f"twins-sgd/twins-{s}"]
        for part, t in ((slice(0, n), "bfloat16"), (slice(n, 2 * n), "float16")):
            want = harness.registry.kernels("test", "mixed", "oracle", "identical")
            out = np.empty(n, np.uint16)
            getattr(want, "to_bf16" if t == "bfloat16" else "to_f16")(masters[part].copy(), out)
            assert twins[part].view(np.uint32).tolist() == out.tolist(), (s, t)


def test_the_sgd_twin_case_reaches_float16_infinity_zeros_of_both_signs_and_subnormals(oracle):
    n = len(mixed_twins.TARGETS)
    f16 = set(oracle["twins-sgd/twins-1"].view(np.uint32)[n:].tolist())
    bf16 = set(oracle["twins-sgd/twins-1"].view(np.uint32)[:n].tolist())
    assert {0x7C00, 0xFC00, 0x0000, 0x8000, 0x8001, 0x83FF} <= f16
    assert {0x7F80, 0x0002, 0x0000} <= bf16  # bfloat16 infinity and subnormals


def test_a_frozen_tensors_twin_keeps_the_bytes_of_the_step_before(oracle):
    step, tensor = mixed_twins.FROZEN
    assert tensor == 0
    n = int(np.prod(mixed_twins.ADAMW_SHAPES[0]))
    before, after = oracle[f"twins-adamw/twins-{step}"], oracle[f"twins-adamw/twins-{step + 1}"]
    assert _u32(after[:n]) == _u32(before[:n])
    assert _u32(after[n:]) != _u32(before[n:])


def test_the_attention_and_embedding_cases_take_low_precision_inputs_and_give_float32(oracle):
    for c in mixed_attention.CASES:
        ins = mixed_attention.inputs(c)
        assert all(a.dtype.name == c.t for a in ins[:3])
        if c.op == "attention":
            assert ins[3].dtype == np.float32 and ins[3].shape == mixed_attention.QKV_SHAPE
            assert oracle[f"{c.id}/dk"].size == np.prod(mixed_attention.QKV_SHAPE)
    ids = mixed_attention.IDS.reshape(-1).tolist()
    assert len(set(ids)) < len(ids) < 2 * mixed_attention.TABLE_SHAPE[0]  # repeats, rows untaken
    assert set(range(mixed_attention.TABLE_SHAPE[0])) - set(ids)


def test_the_embedding_cases_are_the_tables_rows_widened(oracle):
    for t in ("bfloat16", "float16"):
        (table,) = mixed_attention.inputs(_case(f"embedding-{t}").operands[0])
        want = table.astype(np.float32)[mixed_attention.IDS].reshape(-1)
        assert _u32(oracle[f"embedding-{t}/rows"]) == _u32(want)


def test_attention_results_kept_in_the_low_precision_change_every_attention_record_only(
        oracle, control_outputs):
    changed = _differing(control_outputs["low-attention"], oracle)
    assert changed == {f"attention-{t}/{n}" for t in ("bfloat16", "float16")
                       for n in ("o", "dq", "dk", "dv")}


def test_clause_g_covers_the_attention_and_embedding_cases():
    k = harness.registry.kernels("test", "mixed", "oracle", "identical")
    status, detail = mixed.clause_widened(k)
    assert status == "pass" and detail.startswith("12 cases")
