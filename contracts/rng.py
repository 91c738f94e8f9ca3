"""The rng suite: Philox blocks, draws, initializers and dropout; invariance, known answers, controls (contracts/rng.md).

>>> [c.id for c in cases()][:2]
['philox-kat', 'philox-blocks-n64']
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..core import registry
from ..ops.rng import Generator, philox4x32_10
from ..oracles import rng as spec
from ..oracles.kernels.rng import OracleRng
from .casegen import SplitMix64, draw
from .harness import refusal_clause, with_1_and_2_threads

NAME = "rng"
FAMILY = "rng"
PROFILE = "mojolike.identical.rng.fp32.v1"
KAT_FILE = "philox4x32_10_kat.txt"
# Random123's published vectors (tests/data/philox4x32_10_kat.txt, which says where they come
# from): counter, key -> expected words
KAT = (
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
)


@dataclass(frozen=True)
class Case:
    id: str
    op: str  # philox, uniform, normal, kaiming_uniform, ..., dropout
    seed: int = 0
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    x: np.ndarray | None = None  # dropout input


def _halves(words: np.ndarray) -> np.ndarray:
    """32-bit words as exact float32 halves (a raw word could be a NaN pattern, which cards fold)."""
    w = words.astype(np.uint32).reshape(-1)
    return np.stack([w >> 16, w & 0xFFFF], axis=1).astype(np.float32).reshape(-1)


@lru_cache(maxsize=1)
def cases() -> tuple[Case, ...]:
    r = SplitMix64("rng/cases")
    big = (1 << 64) - 1
    out = [
        Case("philox-kat", "philox", args=(np.array([c for c, _, _ in KAT], np.uint32),)),
        Case("philox-blocks-n64", "philox",
             args=(np.array([[r.next() & 0xFFFFFFFF for _ in range(4)] for _ in range(64)],
                            np.uint32),)),
        Case("uniform-n1", "uniform", 0, ((1,),)),
        Case("uniform-n1000", "uniform", 12345, ((1000,),)),
        Case("uniform-2d-offset3", "uniform", 7, ((13, 37),), {"offset": 3, "stream": 5}),
        Case("uniform-range", "uniform", big, ((517,), -2.0, 3.0), {"stream": big - 1}),
        Case("uniform-narrow", "uniform", 99, ((300,), -1e-3, 1e-3), {"offset": (1 << 40) + 1}),
        Case("normal-n1000", "normal", 3, ((1000,),)),
        Case("normal-odd-offset", "normal", 3, ((257,), 0.5, 2.0), {"offset": 5, "stream": 2}),
        Case("kaiming-uniform", "kaiming_uniform", 11, ((64, 50), 50)),
        Case("kaiming-normal-gain", "kaiming_normal", 11, ((40, 30), 30), {"gain": 1.5}),
        Case("xavier-uniform", "xavier_uniform", 13, ((30, 40), 40, 30)),
        Case("xavier-normal", "xavier_normal", 13, ((20, 25), 25, 20), {"gain": 0.5}),
    ]
    for p in (0.0, 0.1, 0.5, 0.9):
        out.append(Case(f"dropout-p{p}", "dropout", 21, (p,), {"offset": 6},
                        draw("normal", f"rng/dropout/{p}", 1029)))
    out.append(Case("dropout-specials", "dropout", 22, (0.3,), {},
                    np.concatenate([draw("inf-mixed", "rng/dropout/inf", 200),
                                    draw("nan", "rng/dropout/nan", 100),
                                    draw("negzero", "rng/dropout/zero", 100)])))
    return tuple(out)


def outputs(k, case: Case) -> list[tuple[str, np.ndarray]]:
    if isinstance(k, _Control):
        with registry.override(FAMILY, "oracle", registry.CONTRACT_MODE, k.kernels), k.patched():
            return _outputs("oracle", case)
    return _outputs(k.backend, case)


def known_fallback(r) -> bool:
    """Clause (a): no value may be left to the host: the fast logf, sinpif and cospif decide
    every u1 and u2 a normal draw can take (clause 4)."""
    return False


def _outputs(backend: str, case: Case) -> list[tuple[str, np.ndarray]]:
    if case.op == "philox":
        got = philox4x32_10(case.args[0], np.array(KAT[0][1], np.uint32), backend=backend) \
            if case.id != "philox-kat" else np.stack([
                philox4x32_10(np.array(c, np.uint32), np.array(kk, np.uint32), backend=backend)
                for c, kk, _ in KAT])
        return [("words", _halves(got))]
    g = Generator(case.seed, backend=backend)
    if case.op == "dropout":
        y, key = g.dropout(case.x, *case.args, **case.kwargs)
        dx = g.dropout_backward(np.full_like(case.x, np.float32(0.75)), key)
        return [("y", y), ("dx", dx)]
    return [(case.op, np.asarray(getattr(g, case.op)(*case.args, **case.kwargs), np.float32))]


# -- clause (c): invariance, and the known answers (k) -------------------------------------------

def _bits(a) -> list[int]:
    return np.asarray(a, np.float32).view(np.uint32).ravel().tolist()


def clause_invariance(k) -> tuple[str, str]:
    notes, ok = [], True
    g = Generator(2024, backend=k.backend)
    n = 1000
    for op, args in (("uniform", ()), ("normal", (0.0, 1.0))):
        whole = getattr(g, op)((n,), *args, stream=9)
        parts = [getattr(g, op)((b - a,), *args, stream=9, offset=a)
                 for a, b in ((0, 1), (1, 7), (7, 502), (502, n))]
        same = _bits(whole) == _bits(np.concatenate(parts))
        ok &= same
        notes.append(f"{op}: {n} values in 4 pieces at offsets 0, 1, 7, 502 "
                     f"{'equal' if same else 'differ from'} the unsplit draw")
    x = draw("normal", "rng/invariance/x", n)
    y, _ = g.dropout(x, 0.25, stream=4)
    pieces = [g.dropout(x[a:b], 0.25, offset=a, stream=4)[0] for a, b in ((0, 333), (333, n))]
    same = _bits(y) == _bits(np.concatenate(pieces))
    ok &= same
    notes.append(f"dropout: two microbatches with offsets {'equal' if same else 'differ from'} "
                 f"the unsplit tensor")
    if hasattr(k, "set_num_threads"):
        big = 1 << 20

        def run():
            g2 = Generator(77, backend=k.backend)
            return _bits(g2.uniform(big)) + _bits(g2.normal(big)) + \
                _bits(g2.dropout(np.ones(big, np.float32), 0.5)[0])

        seen, why = with_1_and_2_threads(k, run)
        if seen is None:
            return "fail", why
        same = seen[0] == seen[1]
        ok &= same
        notes.append(f"uniform, normal, dropout of 2^20: 1 and 2 threads "
                     f"{'give the same bits' if same else 'differ'}")
    else:
        notes.append(f"{k.backend} has no host thread count")
    return ("pass" if ok else "fail"), "; ".join(notes)


def _kat_lines() -> list[tuple[tuple, tuple, tuple]]:
    """The vectors of tests/data/philox4x32_10_kat.txt when it is there (a source checkout)."""
    path = Path(__file__).resolve().parents[1] / "tests" / "data" / KAT_FILE
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            w = [int(v, 16) for v in line.replace("|", " ").replace("->", " ").split()]
            rows.append((tuple(w[:4]), tuple(w[4:6]), tuple(w[6:10])))
    return rows


def clause_known_answers(k) -> tuple[str, str]:
    vectors = list(KAT) + [v for v in _kat_lines() if v not in KAT]
    bad = []
    for c, key, want in vectors:
        got = philox4x32_10(np.array(c, np.uint32), np.array(key, np.uint32), backend=k.backend)
        if tuple(int(w) for w in got) != want:
            bad.append(" ".join(f"{w:08x}" for w in c))
    if bad:
        return "fail", f"{len(bad)} of {len(vectors)} Random123 vectors wrong: counters " + "; ".join(bad)
    return "pass", f"{len(vectors)} Random123 known-answer vectors reproduced"


# -- clause (f): refusals -----------------------------------------------------------------------

def _refusal_table():
    x = np.ones(8, np.float32)
    g = Generator(1)
    full = Generator(1)
    full.load_state_dict({"seed": 1, "counter": 1 << 64})
    return [
        ("p", lambda: g.dropout(x, 1.0)),
        ("p", lambda: g.dropout(x, -0.1)),
        ("std", lambda: g.normal(4, 0.0, -1.0)),
        ("std", lambda: g.normal(4, 0.0, float("inf"))),
        ("shape", lambda: g.uniform((3, 0))),
        ("shape", lambda: g.uniform((2.5,))),
        ("fan_in", lambda: g.kaiming_uniform((4, 4), 0)),
        ("fan_out", lambda: g.xavier_normal((4, 4), 4, -1)),
        ("seed", lambda: Generator(-1)),
        ("seed", lambda: Generator(1 << 64)),
        ("stream counter", lambda: full.uniform(3)),
        ("offset", lambda: g.uniform(8, offset=(1 << 64) - 4)),
        ("x", lambda: g.dropout(x.astype(np.float64), 0.5)),
        ("dy", lambda: g.dropout_backward(np.ones(7, np.float32), g.dropout(x, 0.5)[1])),
        ("lo", lambda: g.uniform(3, lo=0.0)),
    ], [x]


def clause_refusals(k) -> tuple[str, str]:
    return refusal_clause(*_refusal_table())


def extra_clauses(k) -> dict[str, tuple[str, str]]:
    return {"c": clause_invariance(k), "f": clause_refusals(k), "k": clause_known_answers(k)}


# -- clause (e): negative controls --------------------------------------------------------------

class _Control:
    """The oracle with one deliberate change; its card must differ from the true one."""

    backend = "oracle"
    numeric_mode = "identical"

    def __init__(self, name: str, describe: str, kernels, patch=None):
        self.name, self.describe, self.kernels, self._patch = name, describe, kernels, patch

    @contextlib.contextmanager
    def patched(self):
        saved = {n: getattr(spec, n) for n in (self._patch or {})}
        try:
            for n, fn in (self._patch or {}).items():
                setattr(spec, n, fn)
            yield
        finally:
            for n, fn in saved.items():
                setattr(spec, n, fn)


def _chunk_keyed(b: int, stream: int) -> tuple[int, int, int, int]:
    """The block index split as (index within a 64-block chunk, chunk): a thread-style key."""
    return b & 63, (b >> 6) & spec.MASK32, stream & spec.MASK32, stream >> 32


def _low_bits(w: int) -> float:
    return (w & 0xFFFFFF) * spec.TWO_M24


def negative_controls() -> list[_Control]:
    return [
        _Control("chunk-keyed", "counter keyed by (block within a chunk of 64, chunk index)",
                 OracleRng(), {"block_counter": _chunk_keyed}),
        _Control("7-rounds", "Philox4x32 with 7 rounds instead of 10", OracleRng(rounds=7)),
        _Control("low-bits", "uniform from the low 24 bits of each word", OracleRng(),
                 {"unit": _low_bits}),
    ]
