"""The cpu-numba transformer kernels (native/transformer.py, native/attention.py,
native/attention_backward.py) give the
oracle kernel set's bits (oracles/kernels/transformer.py) for every method of the family's
interface, whatever the block sizes and thread count, and mark the rows and heads whose
expf they cannot decide.

The kernel sets are loaded directly: the family is not yet in mojolike.core.families.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_bits
from mojolike.contracts.crmath import HARD_EXP
from mojolike.native import transformer as numba_transformer
from mojolike.oracles import attention as spec
from mojolike.oracles.kernels import transformer as oracle_transformer

K = numba_transformer.load("identical")
ORACLE = oracle_transformer.load("identical")
FMAX = np.float32(np.finfo(np.float32).max)
TINY = np.float32(1e-45)  # the least subnormal
HARD_NEGATIVE = [np.uint32(u).view(np.float32) for u in HARD_EXP if u & 0x80000000]
NO_BOOL, NO_ADD, NO_STRIDES = np.zeros(1, np.uint8), np.zeros(1, np.float32), np.zeros(4, np.int64)


def data(shape, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def special_rows(n, seed):
    """Rows of n values: plain, one NaN, +inf, -inf, values FLT_MAX apart, signed zeros, subnormals."""
    x = data((8, n), seed, 3.0)
    x[1, n // 2] = np.nan
    x[2, 0] = np.inf
    x[3, n - 1] = -np.inf
    x[4, 0], x[4, n - 1] = FMAX, -FMAX
    x[5, :] = np.where(np.arange(n) % 2, np.float32(-0.0), np.float32(0.0))
    x[6, :] = TINY * np.arange(n, dtype=np.float32)
    x[7, :] = -x[6, :]
    return x


def rows_both(method, *args):
    """(numba outputs, oracle outputs) of a row method, output buffers shaped like args[0]."""
    got = [np.empty_like(args[0]), np.zeros(args[0].shape[0], np.int32)]
    want = [np.empty_like(args[0]), np.zeros(args[0].shape[0], np.int32)]
    n_got = getattr(K, method)(*args, *got)
    getattr(ORACLE, method)(*args, *want)
    return got, want, n_got


# 17 and 48: a row's last step runs a 16-lane vector past its whole blocks of 32 (the
# loop that also finds the next row's max takes whole blocks only)
@pytest.mark.parametrize("n", [1, 17, 31, 32, 33, 48, 1025])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_rows_and_their_backward_equal_the_oracle(n, log):
    x = special_rows(n, n)
    got, want, marked = rows_both("softmax_rows", x, log)
    assert marked == 0 and not got[1].any()
    assert_same_bits(got[0], want[0], f"softmax log={log} n={n}")
    dy = data(x.shape, n + 1)
    y = want[0]
    got, want, marked = rows_both("softmax_backward_rows", dy, y, log)
    assert marked == 0
    assert_same_bits(got[0], want[0], f"softmax backward log={log} n={n}")


def test_a_nan_row_is_nan_throughout_and_others_are_untouched_by_it():
    x = special_rows(33, 3)
    got, _, _ = rows_both("softmax_rows", x, False)
    assert np.isnan(got[0][1]).all() and np.isnan(got[0][2]).all()
    assert not np.isnan(got[0][[0, 3, 4, 5, 6, 7]]).any()


def ln_rows(d, seed):
    x = data((5, d), seed)
    x[1] = np.float32(1000.0) + data(d, seed + 1, 1e-3)  # a large mean over a small spread
    x[2] = np.float32(7.0)  # a constant row
    x[3, 0] = -0.0
    return x


@pytest.mark.parametrize("d", [1, 31, 32, 33, 1025])
@pytest.mark.parametrize("has_w,has_b", [(False, False), (True, False), (False, True), (True, True)])
def test_layer_norm_rows_and_their_backward_equal_the_oracle(d, has_w, has_b):
    x, w, b = ln_rows(d, d), data(d, d + 2), data(d, d + 3)
    for eps in (np.float32(1e-5), np.float32(0.0)):  # eps 0 on the constant row: rstd inf, y NaN
        got, want = np.empty_like(x), np.empty_like(x)
        K.layer_norm_rows(x, w, has_w, b, has_b, eps, got)
        ORACLE.layer_norm_rows(x, w, has_w, b, has_b, eps, want)
        assert_same_bits(got, want, f"layer_norm d={d} w={has_w} b={has_b} eps={eps}")
        dy = data(x.shape, d + 4)
        got = [np.empty_like(x), np.empty_like(x)]
        want = [np.empty_like(x), np.empty_like(x)]
        K.layer_norm_backward_rows(dy, x, w, has_w, eps, *got)
        ORACLE.layer_norm_backward_rows(dy, x, w, has_w, eps, *want)
        assert_same_bits(got[0], want[0], f"layer_norm backward dx d={d} w={has_w} eps={eps}")
        assert_same_bits(got[1], want[1], f"layer_norm backward h d={d} eps={eps}")


def test_eps_zero_on_a_constant_row_gives_nan():
    x = np.full((1, 4), 3.0, np.float32)
    y = np.empty_like(x)
    K.layer_norm_rows(x, NO_ADD, False, NO_ADD, False, np.float32(0.0), y)
    assert np.isnan(y).all()


@pytest.mark.parametrize("n, at", [(2, 1), (48, 5), (48, 20), (48, 40)])
def test_a_row_with_an_undecided_expf_is_marked(n, at):
    # at < 32: in the kernels' vector loops (native/vexp.py); at >= 32: their scalar tail
    assert HARD_NEGATIVE
    for h in HARD_NEGATIVE:  # d_at = h - 0 = h, a known undecided input of the fast path
        x = np.full((2, n), -1.0, np.float32)
        x[:, 0] = 0.0
        x[0, at] = h
        for log in (False, True):
            y, status = np.empty_like(x), np.zeros(2, np.int32)
            assert K.softmax_rows(x, log, y, status) == 1
            assert status.tolist() == [1, 0]
        dy = np.ones_like(x)
        y = np.full((2, n), -2.0, np.float32)
        y[0, at] = h  # log_softmax backward takes expf(y_j)
        dx, status = np.empty_like(x), np.zeros(2, np.int32)
        assert K.softmax_backward_rows(dy, y, True, dx, status) == 1
        assert status.tolist() == [1, 0]


# -- attention ----------------------------------------------------------------------------------

def attention_inputs(b, h, nl, ns, e, ev, seed, scale=1.0):
    return (data((b, h, nl, e), seed, scale), data((b, h, ns, e), seed + 1, scale),
            data((b, h, ns, ev), seed + 2), data((b, h, nl, ev), seed + 3))


def attend(kset, q, k, v, do, mask=(NO_BOOL, NO_ADD, 0, NO_STRIDES), causal=False, scale=None,
           p=0.0, block_k=16, block_q=16, key=(5, 7, 3)):
    """(o, stats, dq, dk, dv, forward marks, backward marks) of one kernel set."""
    nb, nh, nl, e = q.shape
    sc = np.float32(spec.default_scale(e) if scale is None else scale)
    pp = np.float32(p)
    keep = np.float32(spec.rng.dropout_scale(float(pp))) if p > 0 else np.float32(1.0)
    o = np.empty((nb, nh, nl, v.shape[3]), np.float32)
    stats = np.empty((nb, nh, nl, 2), np.float32)
    status = np.zeros((nb, nh), np.int32)
    n_fwd = kset.attention_forward(q, k, v, *mask, causal, sc, pp, keep, *key, block_k, o, stats,
                                   status)
    fwd_status = status.copy()
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    n_bwd = kset.attention_backward(do, q, k, v, o, stats, *mask, causal, sc, pp, keep, *key,
                                    block_q, block_k, dq, dk, dv, status)
    return o, stats, dq, dk, dv, (n_fwd, fwd_status), (n_bwd, status.copy())


NAMES = ("o", "stats", "dq", "dk", "dv")


def assert_attention_equal(got, want, what):
    for name, g, w in zip(NAMES, got[:5], want[:5]):
        assert_same_bits(g, w, f"{what} {name}")


def bool_mask(b, h, nl, ns, seed, empty_row=None):
    m = (np.random.default_rng(seed).random((b, h, nl, ns)) < 0.7).astype(np.uint8)
    if empty_row is not None:
        m[0, 0, empty_row, :] = 0
    return m.reshape(-1), NO_ADD, 1, np.int64([h * nl * ns, nl * ns, ns, 1])


def add_mask(b, h, nl, ns, seed):
    m = data((b, h, nl, ns), seed)
    m[m < -1.0] = -np.inf
    m[0, 0, 0, :] = -np.inf  # a row whose max is -inf: empty
    return NO_BOOL, m.reshape(-1), 2, np.int64([h * nl * ns, nl * ns, ns, 1])


CASES = {  # name: (B, H, L, S, E, Ev, options)
    "plain": (2, 2, 5, 7, 3, 2, {}),
    "lane edges": (1, 2, 9, 33, 31, 33, {}),
    "E 32 Ev 1": (2, 1, 6, 40, 32, 1, {}),
    "E 33 Ev 32": (1, 1, 4, 17, 33, 32, {}),
    "causal L == S": (2, 2, 12, 12, 4, 3, {"causal": True}),
    "causal L < S": (1, 2, 5, 20, 4, 3, {"causal": True}),
    "causal L > S": (2, 1, 20, 6, 4, 3, {"causal": True}),
    "custom scale": (1, 1, 6, 9, 5, 4, {"scale": -0.75}),
    "zero scale": (1, 1, 3, 5, 2, 2, {"scale": 0.0}),
    "dropout 0.1": (2, 2, 6, 10, 4, 3, {"p": 0.1}),
    "dropout 0.5": (1, 2, 7, 33, 3, 5, {"p": 0.5, "causal": True}),
    "E past one chunk": (1, 1, 2, 3, 1030, 2, {}),  # the dot products' pairwise tree
}


@pytest.mark.parametrize("name", list(CASES))
def test_attention_forward_and_backward_equal_the_oracle(name):
    b, h, nl, ns, e, ev, opts = CASES[name]
    inputs = attention_inputs(b, h, nl, ns, e, ev, len(name))
    want = attend(ORACLE, *inputs, **opts)
    got = attend(K, *inputs, **opts)
    assert_attention_equal(got, want, name)
    assert got[5][0] == 0 and got[6][0] == 0


@pytest.mark.parametrize("kind", ["bool with an empty row", "additive with -inf", "broadcast"])
def test_attention_with_masks_equals_the_oracle(kind):
    b, h, nl, ns = 2, 2, 6, 11
    inputs = attention_inputs(b, h, nl, ns, 5, 4, 11)
    if kind == "bool with an empty row":
        mask = bool_mask(b, h, nl, ns, 3, empty_row=2)
    elif kind == "additive with -inf":
        mask = add_mask(b, h, nl, ns, 4)
    else:  # one (L, S) mask over every b and h
        m = (np.random.default_rng(5).random((nl, ns)) < 0.6).astype(np.uint8)
        m[1, :] = 0
        mask = m.reshape(-1), NO_ADD, 1, np.int64([0, 0, ns, 1])
    got, want = attend(K, *inputs, mask=mask), attend(ORACLE, *inputs, mask=mask)
    assert_attention_equal(got, want, kind)
    if kind != "additive with -inf":  # the empty row: o = +0.0, stats (-inf, +0.0), no gradient
        row = 1 if kind == "broadcast" else 2
        assert not np.signbit(got[0][0, 0, row]).any() and not got[0][0, 0, row].any()
        assert got[1][0, 0, row].tolist() == [-np.inf, 0.0]
        assert not got[2][0, 0, row].any()


def test_attention_with_scores_near_flt_max_equals_the_oracle():
    q, k, v, do = attention_inputs(1, 2, 4, 6, 2, 3, 21)
    q = q * np.float32(1e19)
    k = k * np.float32(1e19)  # products near 1e38: scores near FLT_MAX and past it
    got, want = attend(K, q, k, v, do, scale=1.0), attend(ORACLE, q, k, v, do, scale=1.0)
    assert_attention_equal(got, want, "huge scores")


def test_long_rows_give_the_same_bits_for_every_block_size():
    ns = 1100  # two fold chunks over the keys (and over the queries for dK, dV)
    q, k, v, do = attention_inputs(1, 1, 3, ns, 1, 1, 31)
    want = attend(ORACLE, q, k, v, do)
    for bk in (16, 32, 64, 96, 1024, ns):
        got = attend(K, q, k, v, do, block_k=bk, block_q=2)
        assert_attention_equal(got, want, f"S={ns} block_k={bk}")
    q, k, v, do = attention_inputs(1, 1, 1050, 3, 1, 1, 32)  # a long fold over i
    want = attend(ORACLE, q, k, v, do, causal=True)
    for bq in (16, 64, 1050):
        got = attend(K, q, k, v, do, causal=True, block_k=2, block_q=bq)
        assert_attention_equal(got, want, f"L=1050 block_q={bq}")


def test_a_long_fold_over_the_queries_through_whole_key_tiles_equals_the_oracle():
    # no mask, not causal, 16-key tiles inside one key block: the dK/dV pass's unmasked tiles
    # carry their folds over i across the 1024-row chunk boundary
    q, k, v, do = attention_inputs(1, 1, 1050, 20, 1, 2, 33)
    want = attend(ORACLE, q, k, v, do)
    for bk in (16, 64):
        got = attend(K, q, k, v, do, block_k=bk, block_q=64)
        assert_attention_equal(got, want, f"L=1050 S=20 block_k={bk}")


def test_block_sizes_never_reach_a_bit():
    inputs = attention_inputs(2, 2, 40, 37, 33, 31, 41)
    mask = bool_mask(2, 2, 40, 37, 6, empty_row=5)
    base = attend(K, *inputs, mask=mask, p=0.1)
    for bk, bq in ((1, 1), (32, 32), (64, 7), (96, 64), (37, 40)):
        assert_attention_equal(attend(K, *inputs, mask=mask, p=0.1, block_k=bk, block_q=bq), base,
                               f"block_k={bk} block_q={bq}")


def test_a_head_with_an_undecided_expf_is_marked():
    h = HARD_NEGATIVE[0]
    q = np.zeros((1, 2, 1, 2), np.float32)  # scores scale * 0 + m: the mask sets them
    k = data((1, 2, 2, 2), 51)
    v, do = data((1, 2, 2, 3), 52), data((1, 2, 1, 3), 53)
    m = np.float32([0.0, h, 0.0, -1.0])  # head 0: d = h - 0 = h; head 1 decided
    mask = NO_BOOL, m, 2, np.int64([0, 2, 2, 1])
    got = attend(K, q, k, v, do, mask=mask)
    assert got[5][0] == 1 and got[5][1].tolist() == [[1, 0]]
    assert got[6][0] == 1 and got[6][1].tolist() == [[1, 0]]
    want = attend(ORACLE, q, k, v, do, mask=mask)
    for name, g, w in zip(NAMES, got[:5], want[:5]):  # the decided head is the oracle's
        assert_same_bits(g[0, 1], w[0, 1], f"decided head {name}")


def with_threads(n, fn):
    before = K.get_num_threads()
    try:
        K.set_num_threads(n)
        return fn()
    finally:
        K.set_num_threads(before)


def test_one_and_two_threads_give_the_same_bits():
    if K.max_threads() < 2:
        pytest.skip("one thread only")
    x = data((300, 257), 61)  # past native/threads.PARALLEL_MIN elements: the parallel kernels
    inputs = attention_inputs(2, 2, 64, 70, 16, 8, 62)
    mask = bool_mask(2, 2, 64, 70, 7, empty_row=3)

    def run():
        y, st = np.empty_like(x), np.zeros(300, np.int32)
        K.softmax_rows(x, True, y, st)
        ln, dx, hh = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        K.layer_norm_rows(x, x[0], True, x[1], True, np.float32(1e-5), ln)
        K.layer_norm_backward_rows(x, ln, x[0], True, np.float32(1e-5), dx, hh)
        return (y, ln, dx, hh) + attend(K, *inputs, mask=mask, p=0.1, block_k=32, block_q=16)[:5]

    one, two = with_threads(1, run), with_threads(2, run)
    for i, (a, b) in enumerate(zip(one, two)):
        assert_same_bits(a, b, f"output {i}: 1 vs 2 threads")
