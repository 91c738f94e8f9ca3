"""The tape: every backward rule gives the oracle's bits on the CPU backends and agrees with torch
autograd, fan-in contributions are added in the documented order, mark/reset_to reuse the arena,
a refused op leaves the tape unchanged and usable, dropout runs on the tape's backend and mode, a
-0.0 seed keeps its sign, and backward frees its graph unless retain_graph=True.

Torch comparisons: the bits differ by design where a sum is involved (torch blocks its GEMMs
and reductions in its own order and may fuse multiply-adds; its exp/log are not correctly
rounded). On these shapes (at most 40 products or exponentials per sum, terms below about 10
in magnitude) each such difference is a few ulp of the largest term, so values and gradients
are compared within 1e-5 relative plus 1e-5 absolute; a wrong rule (a missing term, a
transposed operand, a wrong divisor) moves them by far more. Rules that are one IEEE operation
per element (relu's select, add, mul, dropout's scale, sum's and mean's broadcast) must agree
with torch bit for bit, and are checked so.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import CPU_BACKENDS
from conftest import assert_same_bits as _same

import mojolike
from mojolike import Generator, Refusal, Tape
from mojolike.core import registry
from mojolike.training import tape as _tape
from mojolike.training.tape import Value


def assert_same_bits(got, want, what=""):
    _same(np.asarray(got).reshape(-1), np.asarray(want).reshape(-1), what)


def data(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


IDS = np.int64([[3, 0, 3], [5, 3, 1]])
T5 = np.int64([2, 0, 6, -100, 6])


class TorchOps:
    """The tape's ops spelled in torch, for autograd to differentiate."""

    def __init__(self):
        self.params = []

    def param(self, a):
        t = torch.from_numpy(a.copy()).requires_grad_()
        self.params.append(t)
        return t

    def const(self, a):
        return torch.from_numpy(a.copy())

    def linear(self, x, w, b=None):
        return F.linear(x, w, b)

    def embedding(self, ids, w, padding_idx=None):
        return F.embedding(torch.from_numpy(ids), w, padding_idx=padding_idx)

    def rms_norm(self, x, w=None, eps=None):
        return F.rms_norm(x, (x.shape[-1],), w, eps)

    def relu(self, x):
        return torch.relu(x)

    def add(self, a, b):
        return a + b

    def mul(self, a, b):
        return a * b

    def dropout(self, x, generator, p, offset=0):
        # the same keep/scale pattern: our dropout of ones is scale or 0.0 per element
        m, _ = generator.dropout(np.ones(tuple(x.shape), np.float32), p, offset=offset)
        return x * torch.from_numpy(m)

    def cross_entropy(self, z, t, reduction="mean", **kw):
        return F.cross_entropy(z, torch.from_numpy(t), reduction=reduction, **kw)

    def chunked_lm_head_loss(self, h, w, t, reduction="mean", chunk_size=None, **kw):
        return F.cross_entropy(F.linear(h, w), torch.from_numpy(t), reduction=reduction, **kw)

    def sum(self, x):
        return x.sum()

    def mean(self, x):
        return x.mean()

    def backward(self, loss, seed=1.0):
        loss.backward(torch.tensor(seed, dtype=torch.float32))
        return [None if p.grad is None else p.grad.numpy() for p in self.params]


# Each case: (params, consts, build(ops, P, C) -> scalar loss, seed). `weigh` makes the upstream
# gradient of an op a random array rather than ones: sum(out * R).
def weigh(o, y, r):
    return o.sum(o.mul(y, r))


CASES = {
    "linear": ([data((4, 6), 1), data(4, 2)], [data((3, 6), 3), data((3, 4), 4)],
               lambda o, P, C: weigh(o, o.linear(C[0], P[0], P[1]), C[1]), 1.0),
    "linear_3d_no_bias": ([data((4, 6), 1)], [data((2, 3, 6), 3), data((2, 3, 4), 4)],
                          lambda o, P, C: weigh(o, o.linear(C[0], P[0]), C[1]), 1.0),
    "linear_both_grads": ([data((4, 6), 1), data((3, 6), 3)], [data((3, 4), 4)],
                          lambda o, P, C: weigh(o, o.linear(P[1], P[0]), C[0]), 1.0),
    "embedding": ([data((7, 4), 5)], [data((2, 3, 4), 6)],
                  lambda o, P, C: weigh(o, o.embedding(IDS, P[0]), C[0]), 1.0),
    "embedding_padding": ([data((7, 4), 5)], [data((2, 3, 4), 6)],
                          lambda o, P, C: weigh(o, o.embedding(IDS, P[0], padding_idx=3), C[0]), 1.0),
    "rms_norm": ([data((3, 5), 7), data(5, 8)], [data((3, 5), 9)],
                 lambda o, P, C: weigh(o, o.rms_norm(P[0], P[1], 1e-3), C[0]), 1.0),
    "rms_norm_no_weight": ([data((3, 5), 7)], [data((3, 5), 9)],
                           lambda o, P, C: weigh(o, o.rms_norm(P[0]), C[0]), 1.0),
    "relu": ([np.float32([[-1, 0, -0.0, 2], [3, -4, 1e-40, -1e-40]])], [data((2, 4), 10)],
             lambda o, P, C: weigh(o, o.relu(P[0]), C[0]), 1.0),
    "add": ([data((3, 4), 11), data((3, 4), 12)], [data((3, 4), 13)],
            lambda o, P, C: weigh(o, o.add(P[0], P[1]), C[0]), 1.0),
    "mul": ([data((3, 4), 11), data((3, 4), 12)], [data((3, 4), 13)],
            lambda o, P, C: weigh(o, o.mul(P[0], P[1]), C[0]), 1.0),
    "dropout": ([data((5, 7), 14)], [data((5, 7), 15)],
                lambda o, P, C: weigh(o, o.dropout(P[0], Generator(9), 0.3), C[0]), 1.0),
    "dropout_offset": ([data((5, 7), 14)], [data((5, 7), 15)],
                       lambda o, P, C: weigh(o, o.dropout(P[0], Generator(9), 0.5, offset=13),
                                             C[0]), 1.0),
    "cross_entropy_mean": ([data((5, 9), 16, 3.0)], [],
                           lambda o, P, C: o.cross_entropy(P[0], T5), 1.0),
    "cross_entropy_sum_smoothing_seed": (
        [data((5, 9), 16, 3.0)], [],
        lambda o, P, C: o.cross_entropy(P[0], T5, reduction="sum", label_smoothing=0.1), -0.37),
    "cross_entropy_upstream": ([data((5, 9), 16, 3.0)], [np.array(2.5, np.float32)],
                               lambda o, P, C: o.mul(o.cross_entropy(P[0], T5), C[0]), 1.0),
    "chunked_head": ([data((5, 6), 17), data((40, 6), 18)], [],
                     lambda o, P, C: o.chunked_lm_head_loss(P[0], P[1], T5 % 40, chunk_size=1024),
                     1.0),
    "chunked_head_sum_seed": ([data((5, 6), 17), data((40, 6), 18)], [],
                              lambda o, P, C: o.chunked_lm_head_loss(P[0], P[1], T5 % 40,
                                                                     reduction="sum"), 3.0),
    "sum": ([data((3, 5), 19)], [], lambda o, P, C: o.sum(P[0]), 0.75),
    "mean": ([data((3, 7), 19)], [], lambda o, P, C: o.mean(P[0]), 1.0),
    # 0.7 / 21 is not 0.7 * (1 / 21) in float32: the division is checked, not a reciprocal
    "mean_seed": ([data((3, 7), 19)], [], lambda o, P, C: o.mean(P[0]), 0.7),
}


def run(case, ops):
    params, consts, build, seed = CASES[case]
    P = [ops.param(a.copy()) for a in params]
    C = [ops.const(a) for a in consts]
    loss = build(ops, P, C)
    return loss, ops.backward(loss, seed=seed)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_every_backward_rule_gives_the_oracles_bits(case, backend):
    want_loss, want = run(case, Tape(backend="oracle"))
    got_loss, got = run(case, Tape(backend=backend))
    assert_same_bits(got_loss.data, want_loss.data, f"{case} loss on {backend}")
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape
        assert_same_bits(g, w, f"{case} gradient {i} on {backend}")


EXACT_WITH_TORCH = {"relu", "add", "mul", "dropout", "dropout_offset", "sum", "mean", "mean_seed"}


@pytest.mark.parametrize("case", list(CASES))
def test_every_backward_rule_agrees_with_torch_autograd(case):
    ours_loss, ours = run(case, Tape(backend="cpu-numba"))
    theirs_loss, theirs = run(case, TorchOps())
    np.testing.assert_allclose(ours_loss.item(), float(theirs_loss.detach()), rtol=1e-5, atol=1e-5)
    for g, t in zip(ours, theirs):
        np.testing.assert_allclose(g, t, rtol=1e-5, atol=1e-5)
        if case in EXACT_WITH_TORCH:  # one IEEE operation per element
            assert_same_bits(g, t, f"{case} against torch")


def test_relu_passes_the_gradient_of_nan_and_zeroes_that_of_minus_zero_as_torch_does():
    x = np.float32([np.nan, -0.0, 0.0, -1.0, 2.0, -np.inf, np.inf])
    dy = np.float32([3, 5, 7, 11, 13, 17, 19])
    tape = Tape(backend="oracle")
    p, r = tape.param(x.copy()), tape.const(dy)
    (g,) = tape.backward(tape.sum(tape.mul(tape.relu(p), r)))
    t = torch.from_numpy(x.copy()).requires_grad_()
    torch.relu(t).backward(torch.from_numpy(dy))
    assert_same_bits(g, t.grad.numpy(), "relu backward")
    assert g.tolist()[1:] == [0.0, 0.0, 0.0, 13.0, 0.0, 19.0] and g[0] == 3.0
    assert not np.signbit(g[1:4]).any()  # +0.0, a select, not dy * 0


# -- fan-in ---------------------------------------------------------------------------------------
def three_uses(tape):
    """x read by three muls: contributions c1 = 1, c2 = c3 = 2^-24 (each times an upstream 1)."""
    x = tape.param(np.float32([1.0]))
    k = [tape.const(np.float32([v])) for v in (1.0, 2.0**-24, 2.0**-24)]
    y1, y2, y3 = (tape.mul(x, ki) for ki in k)
    return tape.sum(tape.add(tape.add(y1, y2), y3))


class OldestFirst(Tape):
    """The negative control: contributions added oldest consumer first (the walk's reverse)."""

    def _contribute(self, slots, v, g, owned):
        slots.setdefault(v._index, []).append(g)

    def _gradient(self, slots, v):
        parts = slots.pop(v._index, None)
        if parts is None:
            return None
        acc = parts[-1].copy()
        for g in reversed(parts[:-1]):
            acc = np.add(acc, g)
        return [acc, True]


@pytest.mark.parametrize("backend", ("oracle",) + CPU_BACKENDS)
def test_fan_in_contributions_are_added_newest_consumer_first(backend):
    tape = Tape(backend=backend)
    (g,) = tape.backward(three_uses(tape))
    c1, c2, c3 = np.float32(1.0), np.float32(2.0**-24), np.float32(2.0**-24)
    documented, other = (c3 + c2) + c1, (c1 + c2) + c3
    assert documented != other  # the example tells the two orders apart
    assert_same_bits(g, documented, "(c3 + c2) + c1")
    assert g[0] == 1.0 + 2.0**-23
    control = OldestFirst(backend=backend)
    (h,) = control.backward(three_uses(control))
    assert_same_bits(h, other, "the other order")


def test_a_value_read_twice_by_one_op_gets_both_contributions():
    tape = Tape(backend="oracle")
    p = tape.param(np.float32([3.0, -2.0]))
    (g,) = tape.backward(tape.sum(tape.add(tape.mul(p, p), p)))
    assert g.tolist() == [7.0, -3.0]  # 2p + 1


def test_the_models_residual_fan_in_matches_a_hand_written_order():
    # x feeds rms_norm (older) and add (newer): its gradient is (add's dy) + (rms_norm's dx)
    tape = Tape(backend="cpu-numba")
    x = tape.param(data((3, 8), 20))
    r = tape.const(data((3, 8), 21))
    n = tape.rms_norm(x)
    loss = tape.sum(tape.mul(tape.add(x, tape.relu(n)), r))
    (g,) = tape.backward(loss)
    dy = r.data
    dn = np.where(n.data <= 0, np.float32(0), dy).astype(np.float32)
    dx_norm, _ = mojolike.rms_norm_backward(dn, x.data, None, None)
    assert_same_bits(g, dy + dx_norm, "newest first: add's, then rms_norm's")


# -- results: None, ownership, seed -----------------------------------------------------------------
def test_a_parameter_the_loss_does_not_reach_gets_none_as_in_torch():
    tape = Tape(backend="oracle")
    a, b = tape.param(data(3, 1)), tape.param(data(3, 2))
    dead = tape.param(data(3, 3))
    tape.relu(dead)  # used, but not by the loss
    ours = tape.backward(tape.sum(tape.mul(a, b)))
    ta, tb, td = (torch.from_numpy(v.data.copy()).requires_grad_() for v in (a, b, dead))
    torch.relu(td)
    (ta * tb).sum().backward()
    assert ours[2] is None and td.grad is None
    assert_same_bits(ours[0], ta.grad.numpy())
    c = Tape(backend="oracle")
    c.param(data(2, 4))
    const_only = c.sum(c.const(data(2, 5)))
    assert c.backward(const_only) == [None]


def test_returned_gradients_are_separate_arrays_the_caller_owns():
    tape = Tape(backend="cpu-numba")
    a, b = tape.param(data(4, 1)), tape.param(data(4, 2))
    loss = tape.sum(tape.add(a, b))  # both get the same upstream gradient
    ga, gb = tape.backward(loss)
    assert not np.shares_memory(ga, gb)
    ga *= 2  # an in-place clip of one leaves the other alone
    assert gb.tolist() == [1.0] * 4
    assert a.data is tape.params[0].data  # borrowed, never copied


def test_a_second_backward_through_consumed_nodes_is_refused_until_reset():
    tape = Tape(backend="cpu-numba")
    w = tape.param(data((3, 4), 1))
    m = tape.mark()
    loss = tape.chunked_lm_head_loss(tape.const(data((2, 4), 2)), w, [0, 2])
    first = tape.backward(loss)
    with pytest.raises(Refusal) as e:
        tape.backward(loss)
    assert e.value.option == "loss" and e.value.entry_point == "mojolike.Tape.backward"
    assert "retain_graph" in str(e.value)
    tape.reset_to(m)
    loss = tape.chunked_lm_head_loss(tape.const(data((2, 4), 2)), w, [0, 2])
    assert_same_bits(tape.backward(loss)[0], first[0], "after reset")


def test_a_seed_scales_the_gradient_with_one_rounding():
    tape = Tape(backend="cpu-numba")
    z = tape.param(data((4, 6), 3, 2.0))
    loss = tape.cross_entropy(z, [1, 2, 3, 0])
    (g,) = tape.backward(loss, seed=0.1)
    _, dz = mojolike.cross_entropy(z.data, [1, 2, 3, 0], return_grad=True)
    assert_same_bits(g, dz * np.float32(0.1), "dz * float32(0.1)")


# -- the arena -----------------------------------------------------------------------------------
def step(tape, w, b, seed):
    x = tape.const(data((4, 5), seed))
    return tape.backward(tape.mean(tape.relu(tape.linear(x, w, b))))


def test_reset_to_a_mark_keeps_the_parameters_and_repeats_the_step_bit_for_bit():
    tape = Tape(backend="cpu-numba")
    w, b = tape.param(data((3, 5), 1)), tape.param(data(3, 2))
    m = tape.mark()
    first = step(tape, w, b, 7)
    grown = tape.mark()
    assert grown > m
    tape.reset_to(m)
    assert tape.mark() == m and tape.params == (w, b)
    again = step(tape, w, b, 7)
    for g, h in zip(first, again):
        assert_same_bits(g, h, "the same step after reset_to")
    fresh = Tape(backend="cpu-numba")
    w2, b2 = fresh.param(w.data), fresh.param(b.data)
    for g, h in zip(first, step(fresh, w2, b2, 7)):
        assert_same_bits(g, h, "a fresh tape")


def test_values_dropped_by_reset_to_are_refused_by_name():
    tape = Tape(backend="oracle")
    w = tape.param(np.float32([1, 2]))
    m = tape.mark()
    late = tape.param(np.float32([3, 4]))
    y = tape.mul(w, w)
    tape.reset_to(m)
    assert tape.params == (w,)
    for bad in (y, late):
        with pytest.raises(Refusal) as e:
            tape.add(w, bad)
        assert e.value.option == "b" and "reset_to" in str(e.value)
    with pytest.raises(Refusal) as e:
        tape.reset_to(m + 1)
    assert e.value.option == "mark"


def test_the_parameter_is_borrowed_so_an_in_place_update_is_seen_by_the_next_forward():
    arr = np.float32([1.0, 2.0])
    tape = Tape(backend="oracle")
    p = tape.param(arr)
    m = tape.mark()
    assert tape.sum(p).item() == 3.0
    tape.reset_to(m)
    arr -= np.float32(1.0)
    assert tape.sum(p).item() == 1.0


# -- refusals ------------------------------------------------------------------------------------
def setup():
    tape = Tape(backend="cpu-numba")
    v = dict(w=tape.param(data((3, 4), 1)), x=tape.const(data((2, 4), 2)),
             emb=tape.param(data((5, 4), 3)), z=tape.const(data((2, 5), 4)))
    v["y"] = tape.linear(v["x"], v["w"])
    return tape, v


other = Tape(backend="cpu-numba")
OTHER = other.const(np.float32([1.0, 2.0, 3.0]))

REFUSED = [  # (call, entry, option)
    (lambda t, v: t.linear(v["z"], v["w"]), "linear", "weight"),
    (lambda t, v: t.linear(v["x"], v["w"], v["x"]), "linear", "bias"),
    (lambda t, v: t.linear(v["x"].data, v["w"]), "linear", "x"),
    (lambda t, v: t.linear(v["x"], v["w"], act="gelu"), "linear", "act"),
    (lambda t, v: t.param(np.zeros(3, np.float64)), "param", "array"),
    (lambda t, v: t.param(v["w"].data[:, :2]), "param", "array"),  # strided
    (lambda t, v: t.param(v["w"].data), "param", "array"),  # registered twice
    (lambda t, v: t.const(np.zeros(0, np.float32)), "const", "array"),
    (lambda t, v: t.embedding(np.int64([0, 5]), v["emb"]), "embedding", "ids[1]"),
    (lambda t, v: t.embedding(np.float32([0, 1]), v["emb"]), "embedding", "ids"),
    (lambda t, v: t.embedding(np.int64(1), v["emb"]), "embedding", "ids"),
    (lambda t, v: t.embedding(v["y"], v["emb"]), "embedding", "ids"),
    (lambda t, v: t.rms_norm(v["x"], v["w"]), "rms_norm", "weight"),
    (lambda t, v: t.rms_norm(v["x"], eps=-1.0), "rms_norm", "eps"),
    (lambda t, v: t.add(v["x"], v["y"]), "add", "b"),
    (lambda t, v: t.mul(v["x"], OTHER), "mul", "b"),
    (lambda t, v: t.dropout(v["y"], np.random.default_rng(0), 0.1), "dropout", "generator"),
    (lambda t, v: t.dropout(v["y"], Generator(0), 1.0), "dropout", "p"),
    (lambda t, v: t.cross_entropy(v["z"], [0, 9]), "cross_entropy", "targets[1]"),
    (lambda t, v: t.cross_entropy(v["z"], [0, 1], reduction="none"), "cross_entropy", "reduction"),
    (lambda t, v: t.cross_entropy(v["z"], [0, 1], return_grad=True), "cross_entropy", "return_grad"),
    (lambda t, v: t.cross_entropy(v["z"], [0, 1], backend="oracle"), "cross_entropy", "backend"),
    (lambda t, v: t.cross_entropy(v["z"], [0, 1], weight=np.ones(5)), "cross_entropy", "weight"),
    (lambda t, v: t.chunked_lm_head_loss(v["x"], v["emb"], [0, 1], chunk_size=100),
     "chunked_lm_head_loss", "chunk_size"),
    (lambda t, v: t.chunked_lm_head_loss(v["x"], v["y"], [0, 1]), "chunked_lm_head_loss", "weight"),
    (lambda t, v: t.sum(v["x"].data), "sum", "x"),
    (lambda t, v: t.mean(OTHER), "mean", "x"),
    (lambda t, v: t.backward(v["y"]), "backward", "loss"),
    (lambda t, v: t.backward(t.sum(v["y"]), seed=float("nan")), "backward", "seed"),
    (lambda t, v: t.reset_to(-1), "reset_to", "mark"),
]


@pytest.mark.parametrize("call,op,option", REFUSED, ids=[f"{op}-{opt}" for _, op, opt in REFUSED])
def test_a_refused_op_names_itself_and_leaves_the_tape_unchanged_and_usable(call, op, option):
    tape, v = setup()
    before = (tape.mark(), tape.params)
    if op == "backward" and option == "seed":
        before = (tape.mark() + 1, tape.params)  # the sum is made before the refusal
    with pytest.raises(Refusal) as e:
        call(tape, v)
    assert e.value.entry_point == f"mojolike.Tape.{op}", str(e.value)
    assert e.value.option == option, str(e.value)
    assert (tape.mark(), tape.params) == before
    # still usable: a step gives the bits of a fresh tape
    loss = tape.chunked_lm_head_loss(v["y"], tape.const(data((6, 3), 5)), [0, 1])
    got = tape.backward(loss)
    fresh, u = setup()
    want = fresh.backward(fresh.chunked_lm_head_loss(u["y"], fresh.const(data((6, 3), 5)), [0, 1]))
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if g is not None:
            assert_same_bits(g, w, "after a refusal")


def test_a_value_of_another_tape_is_refused():
    tape = Tape(backend="oracle")
    with pytest.raises(Refusal) as e:
        tape.relu(OTHER)
    assert e.value.option == "x" and "another tape" in str(e.value)
    assert isinstance(OTHER, Value) and OTHER.shape == (3,)


# -- dropout on the tape's backend ----------------------------------------------------------------
def rng_kernels_asked(monkeypatch):
    """The (backend, mode) of every rng kernel set loaded from now on."""
    asked, real = [], registry.kernels

    def spy(entry, family, backend=None, numeric_mode=None):
        k = real(entry, family, backend, numeric_mode)
        if family == "rng":
            asked.append((k.backend, k.numeric_mode))
        return k

    monkeypatch.setattr(registry, "kernels", spy)
    return asked


def test_dropout_runs_on_the_tapes_backend_and_mode_not_the_generators(monkeypatch):
    asked = rng_kernels_asked(monkeypatch)
    gen = Generator(9, backend="cpu-cffi", numeric_mode="fast")
    tape = Tape(backend="cpu-numba", numeric_mode="identical")
    x = tape.param(data((5, 7), 14))
    y = tape.dropout(x, gen, 0.3)
    assert (registry.backend_used(), registry.numeric_mode_used()) == ("cpu-numba", "identical")
    (g,) = tape.backward(tape.sum(tape.mul(y, tape.const(data((5, 7), 15)))))
    assert asked and set(asked) == {("cpu-numba", "identical")}, asked
    assert gen.state_dict() == {"seed": 9, "counter": 1}  # one stream taken, as generator.dropout
    want_tape = Tape(backend="oracle")
    want_x = want_tape.param(x.data.copy())
    want_y = want_tape.dropout(want_x, Generator(9), 0.3)
    (want,) = want_tape.backward(want_tape.sum(want_tape.mul(want_y, want_tape.const(
        data((5, 7), 15)))))
    assert_same_bits(y.data, want_y.data, "dropout forward")
    assert_same_bits(g, want, "dropout backward")
    # an explicit stream leaves the counter; a refusal leaves it and the tape
    ones = tape.const(np.ones(8, np.float32))
    del asked[:]
    z = tape.dropout(ones, gen, 0.5, stream=4, offset=3)
    assert asked == [("cpu-numba", "identical")], asked
    drawn, _ = Generator(9, backend="oracle").dropout(np.ones(8, np.float32), 0.5, offset=3,
                                                       stream=4)
    assert_same_bits(z.data, drawn, "stream 4 from offset 3")
    for p, offset, stream, option in [(1.0, 0, None, "p"), (0.5, -1, None, "offset"),
                                      (0.5, 0, 2**64, "stream")]:
        before = tape.mark()
        with pytest.raises(Refusal) as e:
            tape.dropout(ones, gen, p, offset=offset, stream=stream)
        assert e.value.entry_point == "mojolike.Tape.dropout" and e.value.option == option
        assert tape.mark() == before
    assert gen.state_dict()["counter"] == 1
    gen.load_state_dict({"seed": 9, "counter": 2**64})
    with pytest.raises(Refusal) as e:
        tape.dropout(ones, gen, 0.5)
    assert e.value.entry_point == "mojolike.Tape.dropout" and e.value.option == "stream counter"


# -- the sign of a zero seed ----------------------------------------------------------------------
@pytest.mark.parametrize("backend", ("oracle", "cpu-numba"))
@pytest.mark.parametrize("case", sorted(EXACT_WITH_TORCH))
def test_a_seed_of_minus_zero_gives_torchs_signed_zero_gradients(case, backend):
    params, consts, build, _ = CASES[case]
    ours, theirs = Tape(backend=backend), TorchOps()
    got = ours.backward(build(ours, [ours.param(a.copy()) for a in params],
                              [ours.const(a) for a in consts]), seed=-0.0)
    want = theirs.backward(build(theirs, [theirs.param(a.copy()) for a in params],
                                 [theirs.const(a) for a in consts]), seed=-0.0)
    for g, t in zip(got, want):
        assert (g == 0).all() and np.signbit(t).any()  # the example has negative zeros to keep
        assert_same_bits(g, t, f"{case} with seed -0.0 on {backend}")


@pytest.mark.parametrize("backend", ("oracle", "cpu-numba"))
def test_a_seed_of_minus_zero_scales_a_losss_kept_gradient_with_its_sign(backend):
    tape = Tape(backend=backend)
    z = tape.param(data((4, 6), 3, 2.0))
    (g,) = tape.backward(tape.cross_entropy(z, [1, 2, 3, 0]), seed=np.float32(-0.0))
    _, dz = mojolike.cross_entropy(z.data, [1, 2, 3, 0], return_grad=True, backend=backend)
    assert_same_bits(g, dz * np.float32(-0.0), "dz * -0.0")
    assert np.signbit(g).sum() == np.count_nonzero(dz > 0)


# -- retain_graph and the graph's memory ----------------------------------------------------------
def live_values(tape):
    """The live Values of `tape` (other tests' values may still be alive in this process)."""
    gc.collect()
    return [o for o in gc.get_objects() if type(o) is Value and o._tape is tape]


def test_backward_frees_the_graph_so_many_passes_without_reset_to_stay_bounded():
    tape = Tape(backend="cpu-numba")
    w, b = tape.param(data((32, 64), 1)), tape.param(data(32, 2))
    x = data((64, 64), 3)

    def one_pass():
        loss = tape.mean(tape.relu(tape.linear(tape.const(x), w, b)))
        return tape.backward(loss)

    first = one_pass()
    after_one = live_values(tape)
    for _ in range(49):
        last = one_pass()
    after_fifty = live_values(tape)
    assert len(after_fifty) == len(after_one) <= 3, (len(after_one), len(after_fifty))
    assert sum(v.data.nbytes for v in after_fifty) == sum(v.data.nbytes for v in after_one)
    for g, h in zip(first, last):
        assert_same_bits(g, h, "pass 50 equals pass 1")


def test_a_value_the_caller_holds_outlives_the_backward_that_freed_its_node():
    tape = Tape(backend="oracle")
    w = tape.param(np.float32([[1, -2], [3, 4]]))
    h = tape.linear(tape.const(np.float32([[1, 2]])), w)
    tape.backward(tape.sum(h))
    assert h.data.tolist() == [[-3.0, 11.0]] and h.shape == (1, 2)
    assert tape.sum(h).item() == 8.0  # a new forward may read it ...
    with pytest.raises(Refusal) as e:  # ... but no backward walks its freed node again
        tape.backward(tape.sum(h))
    assert e.value.option == "loss" and "retain_graph=True" in str(e.value)


@pytest.mark.parametrize("backend", ("oracle", "cpu-numba"))
def test_retain_graph_keeps_the_graph_for_another_backward_with_the_same_bits(backend):
    tape = Tape(backend=backend)
    h, w = tape.param(data((5, 6), 17)), tape.param(data((40, 6), 18))
    # h read twice: the head's kept d_hidden gets a second contribution, which must not write it
    loss = tape.add(tape.chunked_lm_head_loss(h, w, T5 % 40), tape.sum(h))
    kept = [a.copy() for a in loss._node.inputs[0]._node.saved]
    first = tape.backward(loss, retain_graph=True)
    assert [a.tolist() for a in loss._node.inputs[0]._node.saved] == [a.tolist() for a in kept]
    for g in first:
        g *= 2  # the caller owns what it got: the retained graph is not touched
    second = tape.backward(loss, retain_graph=True)
    third = tape.backward(loss)
    for g, s, t in zip(first, second, third):
        assert_same_bits(g, s * np.float32(2), "retained")
        assert_same_bits(s, t, "the last backward")
    with pytest.raises(Refusal) as e:
        tape.backward(loss)
    assert e.value.option == "loss" and "retain_graph=True" in str(e.value)


def test_retain_graph_must_be_a_bool_and_a_refusal_consumes_nothing():
    tape = Tape(backend="oracle")
    p = tape.param(np.float32([1.0, 2.0]))
    loss = tape.sum(tape.mul(p, p))
    with pytest.raises(Refusal) as e:
        tape.backward(loss, retain_graph=1)
    assert e.value.option == "retain_graph" and e.value.entry_point == "mojolike.Tape.backward"
    assert "True or False" in str(e.value)
    assert tape.backward(loss)[0].tolist() == [2.0, 4.0]


def test_an_interrupted_backward_consumes_nothing_and_can_be_run_again(monkeypatch):
    tape = Tape(backend="cpu-numba")
    w, h = tape.param(data((40, 6), 18)), tape.param(data((5, 6), 17))
    x = tape.const(data((5, 6), 19))
    loss = tape.chunked_lm_head_loss(tape.add(tape.linear(x, tape.param(data((6, 6), 20))), h),
                                     w, T5 % 40)
    kept = [a.copy() for a in loss._node.saved]

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(_tape, "linear_backward", interrupted)
        with pytest.raises(KeyboardInterrupt):
            tape.backward(loss)
    assert [a.tolist() for a in loss._node.saved] == [a.tolist() for a in kept]
    got = tape.backward(loss)
    fresh = Tape(backend="cpu-numba")
    fw, fh = fresh.param(w.data), fresh.param(h.data)
    fl = fresh.chunked_lm_head_loss(fresh.add(fresh.linear(fresh.const(x.data), fresh.param(
        tape.params[2].data)), fh), fw, T5 % 40)
    for g, want in zip(got, fresh.backward(fl)):
        assert_same_bits(g, want, "after the interrupt")
