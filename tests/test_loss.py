"""cross_entropy on the oracle backend: hand-checkable cases, ignored rows, reductions, the host
fallback for undecided rows, and every refusal of contracts/loss.md clause 8."""
from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import pytest
import torch
from conftest import assert_same_bits, available
from mojolike.oracles import crmath, f32
from mojolike.oracles import fold as fold_spec
from mojolike.oracles import loss as spec

from mojolike import Refusal
from mojolike.core import registry
from mojolike.ops.loss import cross_entropy, finish_rows
from mojolike.oracles.kernels.loss import OracleLoss

ce = functools.partial(cross_entropy, backend="oracle")
LN4 = f32.bits_to_f32(0x3FB17218)  # ln 4 rounded once


def logits(n, v, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal((n, v)) * scale).astype(np.float32)


def test_uniform_logits_give_ln_v_and_the_exact_softmax_gradient():
    z = np.zeros((2, 4), np.float32)
    loss, dz = ce(z, [0, 3], return_grad=True)
    assert loss == LN4 and crmath.logf(4.0) == LN4
    want = np.full((2, 4), 0.125, np.float32)  # (1/4 - q) * (1/2)
    want[0, 0] = want[1, 3] = -0.375
    assert_same_bits(dz, want)
    assert ce(z, [0, 3], reduction="sum") == f32.add(LN4, LN4)


def test_a_single_class_gives_positive_zero_loss_and_gradient():
    loss, dz = ce(np.float32([[7.5]]), [0], reduction="sum", return_grad=True)
    assert_same_bits(loss, 0.0)
    assert_same_bits(dz, np.zeros((1, 1), np.float32))


def test_two_classes_follow_the_contract_step_by_step():
    e1 = crmath.expf(-1.0)                   # d = [0, -1]
    s = f32.add(1.0, e1)                     # fold of two values: lane 0 + lane 1
    big_l = crmath.logf(s)
    loss, dz = ce(np.float32([[1.0, 0.0]]), [1], reduction="sum", return_grad=True)
    assert loss == f32.sub(big_l, -1.0)
    assert loss == pytest.approx(1.0 + np.log1p(np.exp(-1.0)), rel=1e-7)
    assert_same_bits(dz, np.float32([[f32.div(1.0, s), f32.sub(f32.div(e1, s), 1.0)]]))


def test_label_smoothing_on_uniform_logits_uses_the_rounded_host_scalars():
    # eps = 1/4, V = 4: c1 = 3/4, c2 = 1/16, qt = 13/16, all exact; A = fold of four L = 4L
    loss, dz = ce(np.zeros((1, 4), np.float32), [1], reduction="sum", label_smoothing=0.25,
                  return_grad=True)
    big_l = np.float32(LN4)
    assert_same_bits(loss, np.float32(0.75) * big_l + np.float32(0.0625) * (np.float32(4) * big_l))
    assert_same_bits(dz, np.float32([[0.1875, -0.5625, 0.1875, 0.1875]]))


def test_host_scalars_are_the_float32_nearest_the_exact_rationals():
    eps = float(np.float32(0.1))
    s = spec.host_scalars(0.1, 3, "mean", 7)
    assert s.c1 == f32.round_fraction(1 - Fraction(eps))
    assert s.c2 == f32.round_fraction(Fraction(eps) / 3)
    assert s.qt == f32.round_fraction(1 - Fraction(eps) + Fraction(eps) / 3)
    assert s.g == f32.round_fraction(Fraction(1, 7)) and s.smoothing
    plain = spec.host_scalars(0.0, 3, "sum")
    assert (plain.c1, plain.c2, plain.qt, plain.g, plain.smoothing) == (1.0, 0.0, 1.0, 1.0, False)


def test_ignored_rows_give_positive_zero_and_leave_the_mean_to_the_others():
    z = logits(3, 5, seed=1)
    none = ce(z, [1, -100, 4], reduction="none")
    assert_same_bits(none[1], 0.0)
    loss, dz = ce(z, [1, -100, 4], return_grad=True)
    kept, dkept = ce(z[[0, 2]], [1, 4], return_grad=True)
    assert_same_bits(loss, kept)  # fold([a, +0, b]) is a + b here, and both divide by 2
    assert_same_bits(dz[1], np.zeros(5, np.float32))
    assert_same_bits(dz[[0, 2]], dkept)


def test_ignore_index_may_name_a_real_class():
    z = logits(3, 5, seed=2)
    assert_same_bits(ce(z, [2, 0, 2], ignore_index=2, reduction="none"),
                     np.float32([0.0, ce(z[1:2], [0], reduction="sum"), 0.0]))


def test_a_mean_over_no_rows_is_nan_with_a_zero_gradient_as_in_torch():
    for eps in (0.0, 0.1):
        loss, dz = ce(logits(2, 3), [-100, -100], label_smoothing=eps, return_grad=True)
        assert np.isnan(loss)
        assert_same_bits(dz, np.zeros((2, 3), np.float32))
    assert ce(logits(2, 3), [-100, -100], reduction="sum") == 0.0


def test_num_items_divides_the_sum_and_scales_the_gradient_by_its_rounded_reciprocal():
    z, t = logits(4, 6, seed=3), [0, 5, -100, 2]
    total, dsum = ce(z, t, reduction="sum", return_grad=True)
    loss, dz = ce(z, t, num_items=7, return_grad=True)
    assert loss == f32.div(total, 7.0)
    assert_same_bits(dz, dsum * np.float32(f32.round_fraction(Fraction(1, 7))))


def test_reduction_none_over_chunks_of_rows_equals_the_unsplit_rows():
    z, t = logits(12, 30, seed=4), [3, 0, 29, -100, 7, 7, 1, 2, -100, 11, 5, 6]
    whole = ce(z, t, reduction="none", label_smoothing=0.1)
    pieces = [ce(z[a:b], t[a:b], reduction="none", label_smoothing=0.1)
              for a, b in ((0, 5), (5, 9), (9, 12))]
    assert_same_bits(np.concatenate(pieces), whole)
    assert ce(z, t, reduction="sum", label_smoothing=0.1) == fold_spec.fold(whole.tolist())


def test_targets_of_any_integer_dtype_or_a_list_give_the_same_bits():
    z, t = logits(4, 9, seed=5), [8, 0, 3, 3]
    want = ce(z, t, reduction="none")
    for targets in (np.array(t, np.uint8), np.array(t, np.int32), np.array(t, np.uint64), tuple(t)):
        assert_same_bits(ce(z, targets, reduction="none"), want)


def test_read_only_logits_are_read_and_torch_defaults_of_legacy_options_are_accepted():
    z = logits(2, 3, seed=6)
    z.flags.writeable = False
    assert ce(z, [0, 1], weight=None, size_average=None, reduce=None) == ce(z.copy(), [0, 1])


@pytest.mark.parametrize("backend", ["oracle", "cpu-numba"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_finish_rows_on_a_row_equals_the_oracles_row(backend, eps):
    if not available(backend):
        pytest.skip(f"{backend} cannot run here")
    z, t = logits(4, 40, seed=7), np.array([5, -100, 39, 1], np.int64)
    z[3, :2] = [3e38, -3e38]  # d = -3e38 - 3e38 overflows to -inf: loss +inf, p = 0
    s = spec.host_scalars(eps, 40, "mean", 3)
    scalars = (np.float32(s.c1), np.float32(s.c2), np.float32(s.qt), s.smoothing, np.float32(s.g))
    want_rows, want_grad = np.empty(4, np.float32), np.empty((4, 40), np.float32)
    OracleLoss().cross_entropy_into(z, t, -100, *scalars, True, want_grad, want_rows,
                                    np.empty(4, np.int32))
    rows, grad = np.full(4, np.nan, np.float32), np.full((4, 40), np.nan, np.float32)
    status = np.ones(4, np.int32)
    assert finish_rows(z, t, -100, *scalars, True, grad, rows, status, backend=backend) == 4
    assert_same_bits(rows, want_rows)
    assert_same_bits(grad, want_grad)
    assert not status.any()


class FlaggingKernel(OracleLoss):
    """The oracle, but it leaves rows 0 and 2 as garbage flagged undecided (status 1)."""

    def cross_entropy_into(self, *args) -> int:
        super().cross_entropy_into(*args)
        grad, rows, status = args[9], args[10], args[11]
        rows[[0, 2]] = np.float32(np.nan)
        if args[8]:  # want_grad
            grad[[0, 2]] = np.float32(np.nan)
        status[[0, 2]] = 1
        return 2


def test_rows_a_kernel_cannot_decide_are_redone_by_the_public_function():
    z, t = logits(3, 8, seed=8), [1, 2, 7]
    want = ce(z, t, label_smoothing=0.1, return_grad=True)
    with registry.override("loss", "oracle", "identical", FlaggingKernel()):
        got = ce(z, t, label_smoothing=0.1, return_grad=True)
    assert_same_bits(got[0], want[0])
    assert_same_bits(got[1], want[1])


# -- refusals (clause 8): by name, before any kernel runs, the caller's logits untouched -------

Z, T = logits(3, 5, seed=9), [0, 4, -100]
REFUSALS = [  # (what changes, the text the message must hold)
    (dict(weight=np.ones(5, np.float32)), "weight"),
    (dict(size_average=True), "size_average"),
    (dict(reduce=False), "reduce"),
    (dict(targets=np.full((3, 5), 0.2, np.float32)), "probability"),
    (dict(targets=np.float32([0, 4, 1])), "probability"),
    (dict(reduction="none", return_grad=True), "return_grad"),
    (dict(reduction="avg"), "reduction='avg'"),
    (dict(label_smoothing=1.0), "label_smoothing"),
    (dict(label_smoothing=-0.1), "label_smoothing"),
    (dict(label_smoothing=float("nan")), "label_smoothing"),
    (dict(label_smoothing=float("inf")), "label_smoothing"),
    (dict(label_smoothing=0.99999999), "rounds to 1.0"),
    (dict(num_items=0), "num_items"),
    (dict(num_items=True), "num_items"),
    (dict(num_items=2.0), "num_items"),
    (dict(num_items=3, reduction="sum"), "num_items"),
    (dict(logits=np.where(np.arange(15).reshape(3, 5) == 7, np.nan, Z)), "row 1, class 2"),
    (dict(logits=np.where(np.arange(15).reshape(3, 5) == 11, -np.inf, Z)), "row 2, class 1"),
    (dict(targets=[0, 4, 5]), "targets[2]"),
    (dict(targets=[0, -1, 2]), "targets[1]"),
    (dict(targets=np.array([0, 2**64 - 100, 1], np.uint64)), "targets[1]"),  # wraps to -100
    (dict(logits=Z[0]), "2-D"),
    (dict(logits=Z[None]), "2-D"),
    (dict(logits=np.zeros((0, 5), np.float32), targets=[]), "empty"),
    (dict(logits=np.zeros((3, 0), np.float32)), "empty"),
    (dict(logits=Z.astype(np.float16)), "float16"),
    (dict(logits=Z.astype(np.float64)), "float64"),
    (dict(logits=torch.from_numpy(Z).to(torch.bfloat16)), "tensor.numpy()"),
    (dict(targets=torch.tensor(T)), "tensor.numpy()"),
    (dict(targets=[0, 1]), "N=3"),
    (dict(targets=np.array([True, False, True])), "dtype bool"),
    (dict(ignore_index=None), "ignore_index"),
    (dict(ignore_index=1.5), "ignore_index"),
    (dict(return_grad="yes"), "return_grad"),
    (dict(dim=1), "dim"),
]


class UntouchableKernel(OracleLoss):
    def cross_entropy_into(self, *args) -> int:
        raise AssertionError("a refused call reached the kernel")


@pytest.mark.parametrize("change,text", REFUSALS, ids=[t for _, t in REFUSALS])
def test_every_refusal_names_the_option_before_the_kernel_runs(change, text):
    kw = dict(logits=Z, targets=T) | change
    z = kw["logits"]
    before = np.array(z, copy=True) if isinstance(z, np.ndarray) else None
    with registry.override("loss", "oracle", "identical", UntouchableKernel()):
        with pytest.raises(Refusal) as e:
            cross_entropy(kw.pop("logits"), kw.pop("targets"), backend="oracle", **kw)
    msg = str(e.value)
    assert "mojolike.cross_entropy" in msg and text in msg, msg
    if before is not None:
        np.testing.assert_array_equal(z, before)


def test_an_out_of_range_target_names_its_row_and_value():
    msg = str(pytest.raises(Refusal, ce, Z, [0, 7, 1]).value)
    assert "targets[1]" in msg and "is 7" in msg and "[0, 5)" in msg and "ignore_index=-100" in msg
