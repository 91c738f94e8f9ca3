"""The transformer suite: softmax, layer_norm, GELU with tanhf/erff, batched matmul and attention
(contracts/transformer.md): cases at the lane and chunk edges, the batch, prefix and block
invariances, 1 and 2 threads, negative controls and refusals.

>>> len(cases()) > 30
True
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import ClassVar

import numpy as np

from ..core import registry
from ..ops import attention as aops
from ..ops import crmath as cops
from ..ops import transformer as tops
from ..ops.rng import Generator
from ..oracles import attention as aspec
from ..oracles import codec, erf_tanh, f32
from ..oracles import transformer as tspec
from ..oracles.crmath import expf
from ..oracles.kernels.crmath import OracleCrmath
from ..oracles.kernels.transformer import OracleTransformer
from .casegen import draw
from .crmath import known_fallback as _crmath_known
from .erf_tanh_hard import HARD_ERF, HARD_TANH
from .erf_tanh_hard import known_fallback as _erf_tanh_known
from .harness import refusal_clause, with_1_and_2_threads

NAME = "transformer"
FAMILY = "transformer"
PROFILE = "mojolike.identical.transformer.fp32.v1"
EDGES = (1, 31, 32, 33, 1025)  # E, Ev, D and row lengths at the lane and chunk edges
SEED = 20261202
BLOCKS = (16, 32, 64, 96)  # clause 18's key and query block sizes


@dataclass(frozen=True)
class Case:
    id: str
    op: str  # softmax, layer_norm, gelu, erf_tanh, matmul, attention
    arrays: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)


def _m(family: str, key: str, shape) -> np.ndarray:
    return draw(family, f"transformer/{key}", int(np.prod(shape))).reshape(shape)


def _bits_array(patterns) -> np.ndarray:
    return np.array(patterns, np.uint32).view(np.float32)


# -- cases --------------------------------------------------------------------------------------
def _softmax(cid: str, x: np.ndarray, dim: int = -1) -> Case:
    return Case(cid, "softmax", {"x": x, "dy": _m("normal", f"{cid}/dy", x.shape)}, {"dim": dim})


def _softmax_specials() -> np.ndarray:
    big = np.float32(3.4e38)
    rows = [[np.nan, 1, 2, 3], [np.inf, 1, 2, 3], [-np.inf, 0, -np.inf, 1], [big, -big, 0, 1],
            [0.0, -0.0, 0.0, -0.0], [1e-45, -1e-45, 1e-40, 0], [-np.inf] * 4, [big, big, big, -big]]
    return np.array(rows, np.float32)


def _layer_norm(cid: str, x: np.ndarray, dims, affine: bool = True, eps=None) -> Case:
    arrays = {"x": x, "dy": _m("normal", f"{cid}/dy", x.shape)}
    if affine:
        arrays["w"] = _m("normal", f"{cid}/w", dims)
        arrays["b"] = _m("normal", f"{cid}/b", dims)
    return Case(cid, "layer_norm", arrays, {"dims": tuple(dims), "eps": eps})


def _gelu_inputs() -> np.ndarray:
    x = list(_m("normal", "gelu/x", (200,)))
    x += list(_m("subnormal", "gelu/sub", (8,))) + list(_m("wide", "gelu/wide", (24,)))
    x += [0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 10.0, -10.0, 5.0, -5.0, 1e-20]
    return np.array(x, np.float32)


def _erf_tanh_inputs() -> np.ndarray:
    """tanhf/erff: the oracle's thresholds and their neighbours, the kernels' undecided inputs
    (HARD_TANH, HARD_ERF: the cards record the hard cases), specials."""
    one = [erf_tanh.TANH_ONE, erf_tanh.ERF_ONE]
    pats = []
    for v in one:
        u = int(np.float32(v).view(np.uint32))
        pats += [u - 1, u, u + 1, u | 0x80000000]
    pats += [0x3AC37DE2, 0x39800000, 0x39800001, 0x397FFFFF, 0x00000001, 0x80000001, 0x7F7FFFFF]
    pats += list(HARD_TANH) + list(HARD_ERF)
    x = np.concatenate([_bits_array(pats), _m("bits", "erf_tanh/bits", (64,)),
                        np.float32([0.0, -0.0, np.inf, -np.inf, np.nan])])
    return x


def _matmul(cid: str, ashape, bshape) -> Case:
    a, b = _m("normal", f"{cid}/a", ashape), _m("normal", f"{cid}/b", bshape)
    out = np.broadcast_shapes(ashape[:-2], bshape[:-2]) + (ashape[-2], bshape[-1])
    return Case(cid, "matmul", {"a": a, "b": b, "dy": _m("normal", f"{cid}/dy", out)})


def _attention(cid: str, b: int, h: int, nl: int, ns: int, e: int, ev: int | None = None, *,
               family: str = "unit", causal: bool = False, mask=None, p: float = 0.0,
               scale=None) -> Case:
    ev = e if ev is None else ev
    # "unit" values halved (exactly): scores of a few units, where every rounding shows
    half = np.float32(0.5) if family == "unit" else np.float32(1.0)
    q = _m(family, f"{cid}/q", (b, h, nl, e)) * half
    k = _m(family, f"{cid}/k", (b, h, ns, e)) * half
    v = _m("normal", f"{cid}/v", (b, h, ns, ev))
    arrays = {"q": q, "k": k, "v": v, "do": _m("normal", f"{cid}/do", (b, h, nl, ev))}
    if mask is not None:
        arrays["mask"] = mask
    return Case(cid, "attention", arrays, {"causal": causal, "p": p, "scale": scale})


def _bool_mask(cid: str, shape, empty_row: int | None = 1) -> np.ndarray:
    m = _m("normal", f"{cid}/mask", shape) > 0
    if empty_row is not None:
        m[..., empty_row, :] = False
    return m


def _add_mask(cid: str, shape) -> np.ndarray:
    m = _m("normal", f"{cid}/addmask", shape)
    m[..., ::3] = -np.inf
    m[..., 0, :] = -np.inf  # a row every key of which is -inf: empty
    return m


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    out = [_softmax(f"softmax-n{n}", _m("normal", f"softmax/n{n}", (3, n))) for n in EDGES]
    out += [_softmax("softmax-specials", _softmax_specials()),
            _softmax("softmax-dim0", _m("normal", "softmax/dim0", (5, 3)), dim=0),
            _softmax("softmax-wide", _m("wide", "softmax/wide", (4, 40)))]
    out += [_layer_norm(f"layer_norm-d{d}", _m("normal", f"ln/d{d}", (3, d)), (d,)) for d in EDGES]
    big_mean = np.float32(1e4) + _m("unit", "ln/bigmean", (2, 64))
    out += [_layer_norm("layer_norm-plain-d33", _m("normal", "ln/plain", (4, 33)), (33,), affine=False),
            _layer_norm("layer_norm-two-dims", _m("normal", "ln/two", (2, 3, 4)), (3, 4)),
            _layer_norm("layer_norm-big-mean", big_mean, (64,), eps=1e-3),
            _layer_norm("layer_norm-constant-eps0", np.full((2, 5), 0.5, np.float32), (5,), eps=0.0),
            _layer_norm("layer_norm-subnormal", _m("subnormal", "ln/sub", (2, 32)), (32,))]
    out += [Case("gelu-none", "gelu", {"x": _gelu_inputs()}, {"approximate": "none"}),
            Case("gelu-tanh", "gelu", {"x": _gelu_inputs()}, {"approximate": "tanh"}),
            Case("tanhf-erff-hard", "erf_tanh", {"x": _erf_tanh_inputs()})]
    out += [_matmul(f"matmul-k{k}", (2, k), (k, 3)) for k in EDGES]
    out += [_matmul("matmul-broadcast-a", (2, 1, 3, 5), (4, 5, 2)),
            _matmul("matmul-broadcast-b", (3, 4), (2, 4, 5)),
            _matmul("matmul-batch", (3, 2, 7), (3, 7, 2))]
    out += [_attention(f"attention-e{e}", 1, 2, 9, 9, e) for e in (1, 31, 32, 33)]
    out += [_attention("attention-e1025", 1, 1, 2, 3, 1025, 2),
            _attention("attention-causal", 2, 1, 9, 9, 5, causal=True),
            _attention("attention-causal-l-lt-s", 1, 2, 5, 9, 4, causal=True),
            _attention("attention-causal-l-gt-s", 1, 2, 9, 5, 4, causal=True),
            _attention("attention-bool-mask", 2, 2, 6, 7, 3, mask=_bool_mask("bm", (2, 1, 6, 7))),
            _attention("attention-add-mask", 1, 2, 6, 7, 3, mask=_add_mask("am", (6, 7))),
            _attention("attention-huge", 1, 1, 4, 6, 3, family="huge-tiny"),
            _attention("attention-zeros", 1, 1, 4, 5, 3, family="zeros"),
            _attention("attention-scale", 1, 1, 5, 6, 4, scale=-0.75),
            _attention("attention-dropout-0.1", 1, 2, 6, 8, 3, p=0.1),
            _attention("attention-dropout-0.5", 2, 1, 6, 8, 3, p=0.5, causal=True),
            _attention("attention-long", 1, 1, 2, 1100, 1, 2)]
    return tuple(out)


# -- outputs ------------------------------------------------------------------------------------
def _f(x) -> np.ndarray:
    return np.asarray(x, np.float32).reshape(-1)


def _attention_kw(case: Case, on: dict, gen: Generator | None = None) -> dict:
    o = case.options
    kw = dict(attn_mask=case.arrays.get("mask"), is_causal=o["causal"], scale=o["scale"], **on)
    if o["p"] > 0:
        kw.update(dropout_p=o["p"], generator=gen or Generator(SEED, backend=on["backend"]),
                  stream=7)
    return kw


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    """The case's outputs through the public API on k's backend (a control's kernels are served
    as the oracle's for the duration)."""
    if isinstance(k, _Control):
        return k.outputs(case)
    return _outputs(k.backend, case)


def _outputs(backend: str, case: Case) -> list[tuple[str, np.ndarray]]:
    on = {"backend": backend}
    a, o = case.arrays, case.options
    if case.op == "softmax":
        d = o["dim"]
        y = tops.softmax(a["x"], d, **on)
        ly = tops.log_softmax(a["x"], d, **on)
        return [("y", _f(y)), ("log_y", _f(ly)), ("dx", _f(tops.softmax_backward(a["dy"], y, d, **on))),
                ("log_dx", _f(tops.log_softmax_backward(a["dy"], ly, d, **on)))]
    if case.op == "layer_norm":
        eps = tops.EPS_DEFAULT if o["eps"] is None else o["eps"]
        w, b = a.get("w"), a.get("b")
        y = tops.layer_norm(a["x"], o["dims"], w, b, eps, **on)
        dx, dw, db = tops.layer_norm_backward(a["dy"], a["x"], o["dims"], w, b, eps, **on)
        out = [("y", _f(y)), ("dx", _f(dx))]
        return out + ([("dw", _f(dw)), ("db", _f(db))] if w is not None else [])
    if case.op == "gelu":
        x = a["x"]
        dy = _m("normal", f"{case.id}/dy", x.shape)
        return [("y", _f(tops.gelu(x, o["approximate"], **on))),
                ("dx", _f(tops.gelu_backward(dy, x, o["approximate"], **on)))]
    if case.op == "erf_tanh":
        return [("tanhf", _f(cops.tanhf(a["x"], **on))), ("erff", _f(cops.erff(a["x"], **on)))]
    if case.op == "matmul":
        y = tops.matmul(a["a"], a["b"], **on)
        da, db = tops.matmul_backward(a["dy"], a["a"], a["b"], **on)
        return [("y", _f(y)), ("da", _f(da)), ("db", _f(db))]
    kw = _attention_kw(case, on)
    y = aops.scaled_dot_product_attention(a["q"], a["k"], a["v"], **kw)
    dq, dk, dv = aops.scaled_dot_product_attention_backward(a["do"], a["q"], a["k"], a["v"], **kw)
    return [("o", _f(y)), ("dq", _f(dq)), ("dk", _f(dk)), ("dv", _f(dv))]


def known_fallback(r) -> bool:
    """Clause (a): the host may finish crmath's and erf_tanh's listed inputs, and redo a row or
    head only when its recomputation finished at least one listed value and nothing else."""
    def listed(f) -> bool:
        return f.family == "crmath" and (_crmath_known(f) or _erf_tanh_known(f))
    if r.family == "crmath":
        return listed(r)
    return r.family == FAMILY and bool(r.finished) and all(listed(f) for f in r.finished)


# -- clause (c): invariance ---------------------------------------------------------------------
def _bits(a) -> list[int]:
    return np.asarray(a, np.float32).view(np.uint32).ravel().tolist()


_SMALL = ("oracle", "cuda-sim")


def _attention_inputs(tag: str, b: int, h: int, n: int, e: int):
    half = np.float32(0.5)
    return (_m("unit", f"inv/{tag}/q", (b, h, n, e)) * half, _m("unit", f"inv/{tag}/k", (b, h, n, e)) * half,
            _m("normal", f"inv/{tag}/v", (b, h, n, e)), _m("normal", f"inv/{tag}/do", (b, h, n, e)))


def _batch_invariance(backend: str) -> tuple[bool, str]:
    """Each sequence and head alone gives its bits inside the batch (attention forward and
    backward, causal and with dropout, softmax, layer_norm, matmul rows and entries)."""
    on = {"backend": backend}
    b, h, n, e = (2, 2, 6, 3) if backend in _SMALL else (3, 4, 70, 33)
    q, k, v, do = _attention_inputs("batch", b, h, n, e)
    bad = []
    for p in (0.0, 0.5):
        gen = Generator(SEED, backend=backend)
        kw = dict(is_causal=True, dropout_p=p, generator=gen if p else None, stream=3 if p else None, **on)
        full = [aops.scaled_dot_product_attention(q, k, v, **kw)]
        full += list(aops.scaled_dot_product_attention_backward(do, q, k, v, **kw))
        for bi in range(b):
            for hi in range(h):
                if p and (bi, hi) != (0, 0):
                    continue  # dropout's positions count (b, h): only the first head keeps them alone
                sl = (slice(bi, bi + 1), slice(hi, hi + 1))
                one = [aops.scaled_dot_product_attention(q[sl], k[sl], v[sl], **kw)]
                one += list(aops.scaled_dot_product_attention_backward(do[sl], q[sl], k[sl], v[sl], **kw))
                if any(_bits(x) != _bits(f[sl]) for x, f in zip(one, full)):
                    bad.append(f"attention p={p} (b={bi}, h={hi})")
    x = _m("normal", "inv/rows", (b * n, 2 * e + 1))
    w = _m("normal", "inv/w", (2 * e + 1,))
    for name, op in (("softmax", lambda r: tops.softmax(x[r], **on)),
                     ("layer_norm", lambda r: tops.layer_norm(x[r], (x.shape[1],), w, w, **on)),
                     ("matmul", lambda r: tops.matmul(x[r], x[:3].T.copy(), **on))):
        full = op(slice(0, x.shape[0]))
        if any(_bits(op(slice(i, i + 1))) != _bits(full[i:i + 1]) for i in (0, 1, x.shape[0] - 1)):
            bad.append(name)
    return not bad, (f"attention ({b}, {h}, {n}, {e}) causal, without and with dropout p=0.5: every "
                     f"sequence and head alone equals the batch; softmax, layer_norm and matmul rows "
                     f"alone equal the batch" if not bad else f"batch invariance FAILS: {bad}")


def _prefix_invariance(backend: str) -> tuple[bool, str]:
    """A causal row i (output and dq) equals the non-causal call with query i over keys 0..i."""
    on = {"backend": backend}
    n, e = (6, 3) if backend in _SMALL else (40, 33)
    q, k, v, do = _attention_inputs("prefix", 1, 1, n, e)
    o = aops.scaled_dot_product_attention(q, k, v, is_causal=True, **on)
    dq = aops.scaled_dot_product_attention_backward(do, q, k, v, is_causal=True, **on)[0]
    bad = []
    for i in range(n):
        qi, di = q[:, :, i:i + 1], do[:, :, i:i + 1]
        kk, vv = k[:, :, :i + 1], v[:, :, :i + 1]
        oi = aops.scaled_dot_product_attention(qi, kk, vv, **on)
        gi = aops.scaled_dot_product_attention_backward(di, qi, kk, vv, **on)[0]
        if _bits(oi) != _bits(o[:, :, i:i + 1]) or _bits(gi) != _bits(dq[:, :, i:i + 1]):
            bad.append(i)
    return not bad, (f"causal ({n} x {n}, E={e}): every row's output and dq equal the call with "
                     f"that query alone over its prefix" if not bad else f"prefix invariance FAILS at rows {bad}")


def _block_invariance(backend: str) -> tuple[bool, str]:
    """The fused kernels give the API's bits for key and query blocks of 16, 32, 64 and 96
    (and for one block over the whole sequence)."""
    n, e = (20, 3) if backend in _SMALL else (200, 17)
    q, k, v, do = _attention_inputs("blocks", 1, 2, n, e)
    entry = "mojolike.contracts.transformer"
    for causal in (False, True):
        call, _, _ = aops.check_call(entry, q, k, v, None, 0.0, causal, None, False, None, None,
                                 backward=False)
        o, stats, ker = aops.forward(entry, call, backend, "identical")
        want = _bits(o) + sum((_bits(g) for g in aops.backward(entry, call, do, o, stats, ker)), [])
        for blk in (*BLOCKS, n):
            o2, st2, _ = aops.forward(entry, call, backend, "identical", block_k=blk)
            got = _bits(o2) + sum((_bits(g) for g in aops.backward(entry, call, do, o2, st2, ker,
                                                                   block_q=blk, block_k=blk)), [])
            if got != want:
                return False, f"block invariance FAILS for block {blk} (causal={causal})"
    return True, (f"attention (1, 2, {n}, {e}) causal and not: key and query blocks of "
                  f"{', '.join(map(str, BLOCKS))} and {n} give the same bits")


def _threads(k) -> tuple[bool | None, str]:
    if not hasattr(k, "set_num_threads"):
        return None, f"{k.backend} has no host thread count"
    on = {"backend": k.backend}
    q, kk, v, do = _attention_inputs("threads", 2, 3, 130, 33)
    x = _m("normal", "thr/x", (300, 1100))

    def run():
        out = _bits(aops.scaled_dot_product_attention(q, kk, v, is_causal=True, **on))
        out += sum((_bits(g) for g in aops.scaled_dot_product_attention_backward(
            do, q, kk, v, is_causal=True, **on)), [])
        y = tops.softmax(x, **on)
        out += _bits(y) + _bits(tops.softmax_backward(x, y, **on))
        out += _bits(tops.layer_norm(x, (1100,), x[0], x[1], **on))
        out += sum((_bits(g) for g in tops.layer_norm_backward(x, x, (1100,), x[0], x[1], **on)), [])
        return out

    seen, why = with_1_and_2_threads(k, run)
    if seen is None:
        return False, why
    same = seen[0] == seen[1]
    return same, ("attention (2, 3, 130, 33) causal forward and backward, softmax and layer_norm "
                  f"(300 x 1100) with their backward: 1 and 2 threads "
                  f"{'give the same bits' if same else 'DIFFER'}")


def clause_invariance(k) -> tuple[str, str]:
    ok, notes = True, []
    for check in (_batch_invariance, _prefix_invariance, _block_invariance):
        same, note = check(k.backend)
        ok &= same
        notes.append(note)
    same, note = _threads(k)
    ok &= same is not False
    notes.append(note)
    return ("pass" if ok else "fail"), "; ".join(notes)


# -- clause (f): refusals -----------------------------------------------------------------------
def _refusal_table():
    x = _m("normal", "ref/x", (3, 4))
    q = _m("normal", "ref/q", (1, 2, 3, 4))
    kv = _m("normal", "ref/kv", (1, 2, 5, 4))
    a, b = _m("normal", "ref/a", (2, 3, 4)), _m("normal", "ref/b", (3, 4, 5))
    w = np.ones(4, np.float32)
    att = aops.scaled_dot_product_attention
    return [
        ("x", lambda: tops.softmax(x.astype(np.float64))),
        ("x", lambda: tops.softmax(x.astype(np.float16))),
        ("x", lambda: tops.softmax(x[:, ::2])),
        ("x", lambda: tops.softmax(np.zeros((0, 3), np.float32))),
        ("dim", lambda: tops.softmax(x, dim=2)),
        ("dy", lambda: tops.softmax_backward(x[:2], x)),
        ("normalized_shape", lambda: tops.layer_norm(x, (3,))),
        ("weight", lambda: tops.layer_norm(x, (4,), np.ones(3, np.float32))),
        ("bias", lambda: tops.layer_norm(x, (4,), w, np.ones((1, 4), np.float32))),
        ("eps", lambda: tops.layer_norm(x, (4,), eps=-1e-5)),
        ("eps", lambda: tops.layer_norm(x, (4,), eps=float("nan"))),
        ("approximate", lambda: tops.gelu(x, approximate="sigmoid")),
        ("a", lambda: tops.matmul(x[0], x)),
        ("b", lambda: tops.matmul(x, x)),
        ("b", lambda: tops.matmul(a, b)),
        ("dy", lambda: tops.matmul_backward(np.zeros((3, 4), np.float32), x, x.T.copy())),
        ("query", lambda: att(q[0], kv[0], kv[0])),
        ("key", lambda: att(q, kv[:, :1], kv[:, :1])),
        ("key", lambda: att(q, kv[..., :3].copy(), kv)),
        ("value", lambda: att(q, kv, kv[:, :, :4].copy())),
        ("attn_mask", lambda: att(q, kv, kv, attn_mask=np.ones((3, 4), bool))),
        ("attn_mask", lambda: att(q, kv, kv, attn_mask=np.ones((3, 5), np.int32))),
        ("is_causal", lambda: att(q, kv, kv, attn_mask=np.ones((3, 5), bool), is_causal=True)),
        ("dropout_p", lambda: att(q, kv, kv, dropout_p=1.0)),
        ("dropout_p", lambda: att(q, kv, kv, dropout_p=float("inf"))),
        ("generator", lambda: att(q, kv, kv, dropout_p=0.1)),
        ("stream", lambda: aops.scaled_dot_product_attention_backward(
            q, q, kv, kv, dropout_p=0.1, generator=Generator(1))),
        ("scale", lambda: att(q, kv, kv, scale=float("nan"))),
        ("enable_gqa", lambda: att(q, kv, kv, enable_gqa=True)),
        ("need_weights", lambda: att(q, kv, kv, need_weights=True)),
    ], [x, q, kv, a, b, w]


def clause_refusals(k) -> tuple[str, str]:
    return refusal_clause(*_refusal_table())


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_invariance(k), "f": clause_refusals(k)}


# -- clause (e): negative controls --------------------------------------------------------------
def _online_row(s_row, v):
    """One score row by online softmax: a running max, the running sum and the weighted sums
    rescaled by expf(old max - new max) at every key (one pass, no second pass over the keys)."""
    m, big_s, acc = -math.inf, 0.0, [0.0] * len(v[0])
    for j, s in enumerate(s_row):
        if s is None:
            continue
        new = max(m, s)
        r = expf(f32.sub(m, new)) if m != -math.inf else 0.0
        ej = expf(f32.sub(s, new))
        big_s = f32.add(f32.mul(big_s, r), ej)
        acc = [f32.add(f32.mul(a, r), f32.mul(ej, vd)) for a, vd in zip(acc, v[j])]
        m = new
    if m == -math.inf:
        return [0.0] * len(v[0])
    return [f32.div(a, big_s) for a in acc]


def _decoded_heads(a):
    nb, nh, n, w = a.shape
    flat = codec.decode(a.reshape(-1))
    return [[[flat[((b * nh + h) * n + i) * w:((b * nh + h) * n + i + 1) * w] for i in range(n)]
             for h in range(nh)] for b in range(nb)]


class _OnlineSoftmax(OracleTransformer):
    def attention_forward(self, q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal,
                          scale, p, keep_scale, k0, k1, stream, block_k, o, stats, status):
        ret = super().attention_forward(q, k, v, mask_bool, mask_add, mask_kind, mask_strides,
                                        causal, scale, p, keep_scale, k0, k1, stream, block_k, o,
                                        stats, status)
        if float(p) > 0:
            return ret  # the control's point is the rescaling; dropout cases keep the oracle's
        sc, mask, shape, _, _ = self._setup(q, k, mask_bool, mask_add, mask_kind, mask_strides,
                                            scale, p, k0, k1, stream)
        qs, ks, vs = _decoded_heads(q), _decoded_heads(k), _decoded_heads(v)
        vals = []
        for b in range(shape[0]):
            for h in range(shape[1]):
                for s_row in aspec.head_scores(qs[b][h], ks[b][h], sc, mask, shape, bool(causal), b, h):
                    vals += _online_row(s_row, vs[b][h])
        codec.store(o, vals)
        return ret


class _CompletionOrderDq(OracleTransformer):
    """dQ as per-key-block partial folds (blocks of 4 keys) added in the reverse of block order,
    the order a parallel run may complete them in, instead of one fold over j."""

    def attention_backward(self, do, q, k, v, o, stats, mask_bool, mask_add, mask_kind,
                           mask_strides, causal, scale, p, keep_scale, k0, k1, stream, block_q,
                           block_k, dq, dk, dv, status):
        ret = super().attention_backward(do, q, k, v, o, stats, mask_bool, mask_add, mask_kind,
                                         mask_strides, causal, scale, p, keep_scale, k0, k1, stream,
                                         block_q, block_k, dq, dk, dv, status)
        sc, mask, shape, keep, p_scale = self._setup(q, k, mask_bool, mask_add, mask_kind,
                                                     mask_strides, scale, p, k0, k1, stream)
        gs, qs, ks, vs = (_decoded_heads(t) for t in (do, q, k, v))
        vals = []
        for b in range(shape[0]):
            for h in range(shape[1]):
                kp = None if keep is None else keep[b][h]
                vals += _completion_dq(gs[b][h], qs[b][h], ks[b][h], vs[b][h], sc, mask, shape,
                                       bool(causal), kp, p_scale, b, h)
        codec.store(dq, vals)
        return ret


def _completion_dq(do, q, k, v, scale, mask, shape, causal, keep, p_scale, b, h, block=4):
    o, st = aspec.head_forward(q, k, v, scale, mask, shape, causal, keep, p_scale, b, h)
    out = []
    for i, row in enumerate(st):
        if row is None:
            out += [f32.mul(scale, 0.0)] * len(q[0])
            continue
        e, big_s = row
        d_i = aspec.dot(do[i], o[i])
        ds = []
        for j, ej in enumerate(e):
            if ej is None:
                ds.append(None)
                continue
            c = None if keep is None else (p_scale if keep[i][j] else 0.0)
            pij = f32.div(ej, big_s)
            dp = aspec.dot(do[i], v[j]) if c is None else f32.mul(aspec.dot(do[i], v[j]), c)
            ds.append(f32.mul(pij, f32.sub(dp, d_i)))
        for x in range(len(q[0])):
            parts = [aspec.fold_present([None if t is None else f32.mul(t, k[j][x])
                                         for j, t in enumerate(ds[s:s + block], s)])
                     for s in range(0, len(ds), block)]
            acc = -0.0
            for part in reversed(parts):
                acc = f32.add(acc, part)
            out.append(f32.mul(scale, acc))
    return out


class _ScaleOnQ(OracleTransformer):
    """The scale applied to q before the dot (s = dot(scale * q_i, k_j))."""

    def attention_forward(self, q, k, v, mask_bool, mask_add, mask_kind, mask_strides, causal,
                          scale, p, keep_scale, k0, k1, stream, block_k, o, stats, status):
        qs = (q * np.float32(scale)).astype(np.float32)
        return super().attention_forward(qs, k, v, mask_bool, mask_add, mask_kind, mask_strides,
                                         causal, np.float32(1.0), p, keep_scale, k0, k1, stream,
                                         block_k, o, stats, status)


class _LibmTanhGelu(OracleCrmath):
    """GELU's tanh from numpy (libm's tanhf) instead of the correctly rounded tanhf."""

    def gelu_into(self, x, tanh, out):
        if not tanh:
            return super().gelu_into(x, tanh, out)
        saved = erf_tanh.tanhf
        erf_tanh.tanhf = lambda v: float(np.tanh(np.float32(v)))
        try:
            return super().gelu_into(x, tanh, out)
        finally:
            erf_tanh.tanhf = saved


class _OnePassLayerNorm(OracleTransformer):
    def layer_norm_rows(self, x, w, has_w, b, has_b, eps, y):
        rows = [codec.decode(r) for r in x]
        out = tspec.layer_norm_rows(rows, codec.decode(w) if has_w else None,
                                    codec.decode(b) if has_b else None, codec.decode_scalar(eps),
                                    one_pass=True)
        codec.store(y, [v for row in out for v in row])


class _Control:
    """A deliberately wrong transformer arithmetic; its card must differ from the oracle's. Only
    the cases of its op run the wrong kernels; the others are the oracle's by construction (the
    control changes nothing they call), so their outputs are the oracle's, computed once."""

    backend = "oracle"
    numeric_mode = "identical"
    _oracle: ClassVar[dict] = {}

    def __init__(self, name: str, describe: str, family: str, kernels, ops: tuple[str, ...]):
        self.name, self.describe = name, describe
        self._family, self._kernels, self._ops = family, kernels, ops

    def outputs(self, case: Case):
        if case.op not in self._ops:
            if case.id not in _Control._oracle:
                _Control._oracle[case.id] = _outputs("oracle", case)
            return _Control._oracle[case.id]
        with registry.override(self._family, "oracle", "identical", self._kernels):
            return _outputs("oracle", case)


def negative_controls() -> list[_Control]:
    return [
        _Control("online-softmax", "attention's forward in one pass, the running sum and weighted "
                 "sums rescaled by expf(old max - new max)", FAMILY, _OnlineSoftmax(), ("attention",)),
        _Control("dq-completion-order", "dQ from per-key-block partials added in reverse block "
                 "order", FAMILY, _CompletionOrderDq(), ("attention",)),
        _Control("scale-on-q", "the scale applied to q before the dot", FAMILY, _ScaleOnQ(),
                 ("attention",)),
        _Control("libm-tanh-gelu", "GELU's tanh from numpy / libm", "crmath", _LibmTanhGelu(),
                 ("gelu",)),
        _Control("one-pass-variance", "layer_norm's variance as fold(x*x)/D - mean*mean",
                 FAMILY, _OnePassLayerNorm(), ("layer_norm",)),
    ]

