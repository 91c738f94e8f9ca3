"""The layers suite: linear, embedding, RMSNorm, the chunked LM head and MLP sessions
(contracts/layers.md): cases at the lane and chunk edges, batch invariance, threads, negative
controls and refusals.

>>> len(cases()) > 20
True
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

import mojolike

from ..core import registry
from ..ops import head as _layers_head
from ..oracles import codec, f32
from ..oracles import layers as spec
from ..oracles.fold import fold
from ..oracles.kernels.layers import OracleLayers
from .casegen import draw
from .crmath import known_fallback as _crmath_known
from .harness import refusal_clause, with_1_and_2_threads

NAME = "layers"
FAMILY = "layers"
PROFILE = "mojolike.identical.layers.fp32.v1"
EDGES = (1, 31, 32, 33, 1023, 1024, 1025, 3000)  # K, D and V at the lane and chunk edges
HEAD_CHUNKS = (1024, 2048, 4096)


@dataclass(frozen=True)
class Case:
    id: str
    op: str  # linear, embedding, rms_norm, head, mlp
    arrays: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)


def _m(family: str, key: str, shape) -> np.ndarray:
    return draw(family, f"layers/{key}", int(np.prod(shape))).reshape(shape)


def _ids(key: str, n: int, v: int) -> np.ndarray:
    from .casegen import SplitMix64
    r = SplitMix64(f"layers/{key}")
    return np.array([r.below(v) for _ in range(n)], np.int64)


def _linear(cid: str, m: int, n: int, k: int, family: str = "normal", bias: bool = True,
            lead: tuple = ()) -> Case:
    arrays = {"x": _m(family, f"{cid}/x", lead + (m, k)), "w": _m(family, f"{cid}/w", (n, k)),
              "dy": _m("normal", f"{cid}/dy", lead + (m, n))}
    if bias:
        arrays["b"] = _m(family, f"{cid}/b", (n,))
    return Case(cid, "linear", arrays)


def _equal_rows() -> Case:
    c = _linear("linear-equal-rows", 4, 3, 100)
    x = np.repeat(c.arrays["x"][:1], 4, axis=0)
    return Case(c.id, "linear", dict(c.arrays, x=x))


def _mixed(cid: str, shape) -> np.ndarray:
    """Subnormal, huge and signed-zero values side by side."""
    a = _m("normal", f"{cid}/base", shape).reshape(-1).copy()
    a[0::4] = _m("subnormal", f"{cid}/sub", a[0::4].shape)
    a[1::4] *= np.float32(1e30)
    a[2::7] = _m("zeros", f"{cid}/zeros", a[2::7].shape)
    return a.reshape(shape)


def _embedding(cid: str, t: int, v: int, d: int, padding_idx=None, same: bool = False) -> Case:
    ids = np.zeros(t, np.int64) if same else _ids(f"{cid}/ids", t, v)
    return Case(cid, "embedding", {"ids": ids, "w": _m("normal", f"{cid}/w", (v, d)),
                                   "dy": _m("normal", f"{cid}/dy", (t, d))},
                {"padding_idx": padding_idx})


def _rms(cid: str, m: int, d: int, weight: bool = True, eps=None, family: str = "normal") -> Case:
    x = _mixed(cid, (m, d)) if family == "mixed" else _m(family, f"{cid}/x", (m, d))
    arrays = {"x": x, "dy": _m("normal", f"{cid}/dy", (m, d))}
    if weight:
        arrays["w"] = _m("normal", f"{cid}/w", (d,))
    return Case(cid, "rms_norm", arrays, {"eps": eps})


def _head(cid: str, rows: int, width: int, vocab: int, ignore=(), smoothing: float = 0.0) -> Case:
    t = _ids(f"{cid}/t", rows, vocab)
    t[list(ignore)] = -100
    return Case(cid, "head", {"h": _m("normal", f"{cid}/h", (rows, width)),
                              "w": _m("normal", f"{cid}/w", (vocab, width)), "t": t},
                {"label_smoothing": smoothing})


def _mlp() -> Case:
    cid = "mlp-sessions"
    return Case(cid, "mlp", {"s0": _m("normal", f"{cid}/s0", (2, 33)), "s2": _m("normal", f"{cid}/s2", (3, 33)),
                             "s3": _m("normal", f"{cid}/s3", (1, 33)),
                             "w1": _m("normal", f"{cid}/w1", (17, 33)), "b1": _m("normal", f"{cid}/b1", (17,)),
                             "w2": _m("normal", f"{cid}/w2", (5, 17)), "b2": _m("normal", f"{cid}/b2", (5,))})


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    out = [_linear(f"linear-k{k}", 3, 2, k) for k in EDGES]
    out += [_linear("linear-rows64-k33", 64, 3, 33), _equal_rows(),
            Case("linear-mixed-k1025", "linear", {"x": _mixed("linear-mixed/x", (2, 1025)),
                                                   "w": _mixed("linear-mixed/w", (2, 1025)),
                                                   "b": np.float32([-0.0, 1e-40]),
                                                   "dy": _m("normal", "linear-mixed/dy", (2, 2))}),
            _linear("linear-3d-nobias", 2, 3, 40, bias=False, lead=(2,))]
    out += [_embedding("embedding-v31-d33", 50, 31, 33), _embedding("embedding-v1-d1", 7, 1, 1),
            _embedding("embedding-pad-v33-d5", 40, 33, 5, padding_idx=3),
            _embedding("embedding-pad-last-v5-d17", 30, 5, 17, padding_idx=-1),
            _embedding("embedding-same-id-t2100-d3", 2100, 4, 3, same=True)]
    out += [_rms(f"rms-d{d}", 2, d) for d in EDGES]
    out += [_rms("rms-noweight-d33", 3, 33, weight=False), _rms("rms-eps-1e-3-d64", 2, 64, eps=1e-3),
            _rms("rms-mixed-d1025", 2, 1025, family="mixed"), _rms("rms-zeros-eps0-d5", 2, 5, eps=0.0,
                                                                   family="zeros")]
    # the head's cells are rows x vocab per pass: small rows and widths keep the oracle quick
    out += [_head("head-v1", 3, 4, 1), _head("head-v1023", 2, 3, 1023, ignore=(1,)),
            _head("head-v1025-w9", 1, 9, 1025), _head("head-v3000-smooth", 2, 2, 3000,
                                                         ignore=(1,), smoothing=0.1)]
    out.append(_mlp())
    return tuple(out)


def control_cases() -> tuple[Case, ...]:
    """Cases only the negative controls run (on the oracle): five vocabulary chunks, where the
    pairwise tree over chunk partials differs from a serial sum (for three it is the same), too
    many GEMM cells for the simulator's card run."""
    return (_head("control-head-v5000", 2, 3, 5000),)


def _f(x) -> np.ndarray:
    return np.asarray(x, np.float32).reshape(-1)


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    """The case's outputs through the public API on k's backend (a control's kernels are served
    as the oracle's for the duration)."""
    ctx = k.patched() if isinstance(k, _Control) else contextlib.nullcontext()
    with ctx:
        return _outputs(k.backend, case)


def _outputs(backend: str, case: Case) -> list[tuple[str, np.ndarray]]:
    on = {"backend": backend}
    a, o = case.arrays, case.options
    if case.op == "linear":
        y = mojolike.linear(a["x"], a["w"], a.get("b"), **on)
        dx, dw, db = mojolike.linear_backward(a["dy"], a["x"], a["w"], "b" in a, **on)
        out = [("y", _f(y)), ("dx", _f(dx)), ("dw", _f(dw))]
        return out + ([("db", _f(db))] if db is not None else [])
    if case.op == "embedding":
        v = a["w"].shape[0]
        return [("y", _f(mojolike.embedding(a["ids"], a["w"], o["padding_idx"], **on))),
                ("dw", _f(mojolike.embedding_backward(a["dy"], a["ids"], v, o["padding_idx"], **on)))]
    if case.op == "rms_norm":
        w = a.get("w")
        y = mojolike.rms_norm(a["x"], w, o["eps"], **on)
        dx, dw = mojolike.rms_norm_backward(a["dy"], a["x"], w, o["eps"], **on)
        return [("y", _f(y)), ("dx", _f(dx))] + ([("dw", _f(dw))] if dw is not None else [])
    if case.op == "head":
        kw = dict(label_smoothing=o["label_smoothing"], chunk_size=1024, **on)
        none = mojolike.chunked_lm_head_loss(a["h"], a["w"], a["t"], reduction="none", **kw)
        loss, dh, dw = mojolike.chunked_lm_head_loss(a["h"], a["w"], a["t"], return_grad=True, **kw)
        return [("none", _f(none)), ("mean", np.float32([loss])), ("dh", _f(dh)), ("dw", _f(dw))]
    sessions = [a["s0"], np.zeros((0, 33), np.float32), a["s2"], a["s3"]]
    return [("y", _f(mojolike.mlp_inference_sessions(sessions, a["w1"], a["b1"], a["w2"], a["b2"],
                                                     **on)))]


def known_fallback(r) -> bool:
    """Clause (a): the head's expf/logf may leave crmath's known inputs to the host, nothing else."""
    return r.family == "crmath" and _crmath_known(r)


# -- clause (c): invariance ---------------------------------------------------------------------
def _bits(a) -> list[int]:
    return np.asarray(a, np.float32).view(np.uint32).ravel().tolist()


# The oracle (pure Python) and the simulator (a Python thread per CUDA thread) check the same
# properties on smaller shapes than the CPU and GPU backends.
_SMALL = ("oracle", "cuda-sim")


def _batch_invariance(backend: str) -> tuple[bool, list[str]]:
    """Every prefix of the rows (batch sizes 1..64 on the CPU and GPU backends) and rows alone
    give the full batch's bits, for linear, rms_norm, cross_entropy 'none', the chunked head
    'none' and the MLP."""
    on = {"backend": backend}
    rows, width, vocab = (8, 8, 40) if backend in _SMALL else (64, 40, 1100)
    x = _m("normal", f"inv/x{rows}", (rows, width))
    w, b = _m("normal", f"inv/w{width}", (7, width)), _m("normal", "inv/b", (7,))
    wr = _m("normal", f"inv/wr{width}", (width,))
    wh, t = _m("normal", f"inv/wh{vocab}", (vocab, width)), _ids(f"inv/t{vocab}", rows, vocab)
    w1, b1 = _m("normal", f"inv/w1{width}", (9, width)), _m("normal", "inv/b1", (9,))
    w2, b2 = _m("normal", "inv/w2", (3, 9)), _m("normal", "inv/b2", (3,))
    ops = {
        "linear": lambda r: mojolike.linear(x[r], w, b, **on),
        "rms_norm": lambda r: mojolike.rms_norm(x[r], wr, **on),
        "cross_entropy": lambda r: mojolike.cross_entropy(mojolike.linear(x[r], wh, **on), t[r],
                                                          reduction="none", **on),
        "head": lambda r: mojolike.chunked_lm_head_loss(x[r], wh, t[r], reduction="none",
                                                        chunk_size=1024, **on),
        "mlp": lambda r: mojolike.mlp_inference_sessions([x[r]], w1, b1, w2, b2, **on),
    }
    ok, notes = True, []
    sizes = (1, 2, 5) if backend in _SMALL else range(1, rows)
    single = (0, 3, rows - 1) if backend in _SMALL else (0, 17, rows - 1)
    for name, op in ops.items():
        full = np.asarray(op(slice(0, rows)))
        bad = [m for m in sizes if _bits(op(slice(0, m))) != _bits(full[:m])]
        alone = [i for i in single if _bits(op(slice(i, i + 1))) != _bits(full[i:i + 1])]
        ok &= not bad and not alone
        notes.append(f"{name}: {len(sizes)} smaller batches of {rows} rows and 3 rows alone "
                     + ("equal the full batch" if not bad and not alone else f"DIFFER at {bad + alone}"))
    return ok, notes


def _head_chunks(backend: str) -> tuple[bool, str]:
    """The chunked head with chunks of 1024, 2048 and 4096 equals the unfused composition."""
    on = {"backend": backend}
    # the simulator gets one vocabulary chunk (every chunk size is then one chunk)
    rows, width, vocab = {"oracle": (3, 3, 2100), "cuda-sim": (3, 3, 40)}.get(backend, (5, 33, 5000))
    h, w = _m("normal", f"chunks/h{rows}x{width}", (rows, width)), _m("normal", f"chunks/w{vocab}x{width}",
                                                                      (vocab, width))
    t = _ids(f"chunks/t{vocab}", rows, vocab)
    t[1] = -100
    z = mojolike.linear(h, w, **on)
    loss, dz = mojolike.cross_entropy(z, t, label_smoothing=0.1, return_grad=True, **on)
    dh, dw, _ = mojolike.linear_backward(dz, h, w, bias=False, **on)
    want = _bits([loss]) + _bits(dh) + _bits(dw)
    bad = []
    for size in HEAD_CHUNKS:
        got = mojolike.chunked_lm_head_loss(h, w, t, label_smoothing=0.1, return_grad=True,
                                            chunk_size=size, **on)
        if _bits([got[0]]) + _bits(got[1]) + _bits(got[2]) != want:
            bad.append(size)
    return not bad, (f"chunked head ({rows} x {width}, vocab {vocab}, smoothing 0.1) with chunks "
                     f"{', '.join(map(str, HEAD_CHUNKS))}: "
                     + ("equals cross_entropy(linear) + linear_backward" if not bad else f"DIFFERS for {bad}"))


def _threads(k) -> tuple[bool | None, str]:
    if not hasattr(k, "set_num_threads"):
        return None, f"{k.backend} has no host thread count"
    on = {"backend": k.backend}
    x, w = _m("normal", "thr/x", (130, 2500)), _m("normal", "thr/w", (70, 2500))
    dy = _m("normal", "thr/dy", (130, 70))
    ids = _ids("thr/ids", 3000, 50)
    g = _m("normal", "thr/g", (3000, 20))

    def run():
        out = _bits(mojolike.linear(x, w, **on))
        out += sum((_bits(v) for v in mojolike.linear_backward(dy, x, w, **on)), [])
        out += _bits(mojolike.rms_norm(x, x[0], **on))
        out += _bits(mojolike.embedding_backward(g, ids, 50, **on))
        return out

    seen, why = with_1_and_2_threads(k, run)
    if seen is None:
        return False, why
    same = seen[0] == seen[1]
    return same, ("linear 130x70x2500 with its backward, rms_norm and embedding_backward: 1 and 2 "
                  f"threads {'give the same bits' if same else 'DIFFER'}")


def clause_invariance(k) -> tuple[str, str]:
    ok, notes = _batch_invariance(k.backend)
    same, note = _head_chunks(k.backend)
    ok &= same
    notes.append(note)
    same, note = _threads(k)
    ok &= same is not False
    notes.append(note)
    return ("pass" if ok else "fail"), "; ".join(notes)


# -- clause (f): refusals -----------------------------------------------------------------------
def _refusal_table():
    x, w = _m("normal", "ref/x", (3, 8)), _m("normal", "ref/w", (2, 8))
    ids, ew = np.int64([0, 2, 1]), _m("normal", "ref/ew", (3, 4))
    hw = _m("normal", "ref/hw", (5, 8))
    huge = hw.copy()
    huge[:] = np.float32(3e38)
    return [
        ("weight", lambda: mojolike.linear(x, _m("normal", "ref/w9", (2, 9)))),
        ("x", lambda: mojolike.linear(x.astype(np.float64), w)),
        ("x", lambda: mojolike.linear(x[:, ::2], w[:, :4])),
        ("bias", lambda: mojolike.linear(x, w, np.zeros(3, np.float32))),
        ("dy", lambda: mojolike.linear_backward(np.zeros((3, 3), np.float32), x, w)),
        ("bias", lambda: mojolike.linear_backward(np.zeros((3, 2), np.float32), x, w, bias="yes")),
        ("ids[1]", lambda: mojolike.embedding(np.int64([0, 3]), ew)),
        ("ids[0]", lambda: mojolike.embedding(np.int64([-1]), ew)),
        ("ids", lambda: mojolike.embedding(np.float32([0, 1]), ew)),
        ("max_norm", lambda: mojolike.embedding(ids, ew, max_norm=1.0)),
        ("padding_idx", lambda: mojolike.embedding_backward(np.zeros((3, 4), np.float32), ids, 3, 3)),
        ("dy", lambda: mojolike.embedding_backward(np.zeros((2, 4), np.float32), ids, 3)),
        ("weight", lambda: mojolike.rms_norm(x, np.ones(7, np.float32))),
        ("weight", lambda: mojolike.rms_norm(x, (8,))),
        ("eps", lambda: mojolike.rms_norm(x, eps=-1.0)),
        ("normalized_shape", lambda: mojolike.rms_norm(x, normalized_shape=(3, 8))),
        ("chunk_size", lambda: mojolike.chunked_lm_head_loss(x, hw, [0, 1, 2], chunk_size=1000)),
        ("targets[0]", lambda: mojolike.chunked_lm_head_loss(x, hw, [5, 1, 2])),
        ("hidden", lambda: mojolike.chunked_lm_head_loss(x * np.float32(1e30), huge, [0, 1, 2])),
        ("weight", lambda: mojolike.chunked_lm_head_loss(x, _m("normal", "ref/h9", (5, 9)), [0, 1, 2])),
        ("sessions[1]", lambda: mojolike.mlp_inference_sessions(
            [x, np.zeros((2, 5), np.float32)], _m("normal", "ref/m1", (4, 8)), np.zeros(4, np.float32),
            _m("normal", "ref/m2", (2, 4)), np.zeros(2, np.float32))),
        ("transpose_b", lambda: mojolike.linear(x, w, transpose_b=True)),
    ], [x, w, ew, hw]


def clause_refusals(k) -> tuple[str, str]:
    return refusal_clause(*_refusal_table())


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_invariance(k), "f": clause_refusals(k)}


# -- clause (e): negative controls --------------------------------------------------------------
def _serial(values) -> float:
    acc = -0.0
    for v in values:
        acc = f32.add(acc, v)
    return acc


class _SerialGemm(OracleLayers):
    def gemm_nt(self, a, b, bias, has_bias, out):
        rows_a = [codec.decode(r) for r in a]
        rows_b = [codec.decode(r) for r in b]
        bs = codec.decode(bias) if has_bias else None
        y = [[_serial([f32.mul(p, q) for p, q in zip(ra, rb)]) for rb in rows_b] for ra in rows_a]
        if bs is not None:
            y = [[f32.add(v, c) for v, c in zip(row, bs)] for row in y]
        codec.store(out, [v for row in y for v in row])


class _DescendingEmbedding(OracleLayers):
    def segment_fold(self, dy, order, starts, rows, out):
        super().segment_fold(dy, np.ascontiguousarray(_reverse_segments(order, starts)), starts, rows,
                             out)


def _reverse_segments(order, starts):
    out = order.copy()
    for s in range(starts.size - 1):
        out[starts[s]:starts[s + 1]] = order[starts[s]:starts[s + 1]][::-1]
    return out


class _EpsAfterSqrt(OracleLayers):
    """r = 1 / (sqrt(ms) + eps): eps added after the square root."""

    def _scale(self, row, eps):
        ms = f32.div(fold([f32.mul(v, v) for v in row]), float(len(row)))
        return f32.div(1.0, f32.add(f32.sqrt(ms), eps))

    def rms_norm(self, x, w, has_w, eps, y):
        ep, ws = codec.decode_scalar(eps), codec.decode(w) if has_w else None
        vals = []
        for row in (codec.decode(r) for r in x):
            r = self._scale(row, ep)
            h = [f32.mul(v, r) for v in row]
            vals += h if ws is None else [f32.mul(a, b) for a, b in zip(h, ws)]
        codec.store(y, vals)


class _SerialCounter:
    """The chunk partials of the head's vocabulary sums added left to right."""

    def __init__(self):
        self._acc = None

    def push(self, p):
        self._acc = p.copy() if self._acc is None else np.add(self._acc, p)

    def finish(self):
        return self._acc


class _Control:
    """A deliberately wrong layers arithmetic; its card must differ from the oracle's."""

    backend = "oracle"
    numeric_mode = "identical"

    def __init__(self, name: str, describe: str, kernels=None, counter=None):
        self.name, self.describe, self._kernels, self._counter = name, describe, kernels, counter

    @contextlib.contextmanager
    def patched(self):
        with contextlib.ExitStack() as stack:
            if self._kernels is not None:
                stack.enter_context(registry.override(FAMILY, "oracle", "identical", self._kernels))
            if self._counter is not None:
                saved = _layers_head._PairwiseCounter
                _layers_head._PairwiseCounter = self._counter
                stack.callback(setattr, _layers_head, "_PairwiseCounter", saved)
            yield


def negative_controls() -> list[_Control]:
    return [
        _Control("serial-k", "the GEMM sums each cell's products left to right", kernels=_SerialGemm()),
        _Control("descending-positions", "embedding gradients summed in descending position order",
                 kernels=_DescendingEmbedding()),
        _Control("eps-after-sqrt", "RMSNorm's r = 1 / (sqrt(ms) + eps)", kernels=_EpsAfterSqrt()),
        _Control("serial-head-chunks", "the chunked head adds its vocabulary chunk partials serially",
                 counter=_SerialCounter),
    ]
