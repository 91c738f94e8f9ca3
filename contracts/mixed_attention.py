"""The mixed suite's attention and embedding cases (contracts/mixed.md clause 29):
`scaled_dot_product_attention`, its backward and `embedding` on bfloat16 and float16 inputs.

`attention-<type>`: query, key and value (1, 2, 5, 8) of one low type, is_causal, and a float32
grad_out (1, 2, 5, 8); the records are the forward's o and the backward's dq, dk, dv.
`embedding-<type>`: a (7, 5) low-precision table and ids (2, 4) with repeats (and rows never
taken); the record is the float32 rows. Clause (g) compares each case with the same public op
on the exactly widened inputs (`run(..., widen=True)`).

Reproducibility: inputs are integer patterns from SplitMix64 keyed by the case ids, rounded
once by the oracle's cast; the ops are the float32 ops on the widened inputs (clause 29), the
same bits on every backend.

>>> [c.id for c in CASES]
['attention-bfloat16', 'attention-float16', 'embedding-bfloat16', 'embedding-float16']
>>> [name for name, _ in run(CASES[2], "oracle")]
['rows']
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.checks import cast_types
from ..ops import attention, layers
from ..oracles import mixed as spec
from .casegen import SplitMix64

QKV_SHAPE = (1, 2, 5, 8)
TABLE_SHAPE = (7, 5)
# rows 1 and 4 twice, row 6 three times, rows 2 and 5 never: repeats and untaken rows
IDS = np.int64([[6, 1, 4, 6], [0, 4, 1, 6]])


@dataclass(frozen=True)
class LowCase:
    id: str
    op: str  # "attention" or "embedding"
    t: str  # the inputs' low type: "bfloat16" or "float16"


CASES = tuple(LowCase(f"{op}-{t}", op, t) for op in ("attention", "embedding")
              for t in ("bfloat16", "float16"))


def _patterns(key: str, n: int) -> list[int]:
    """float32 patterns with full significands over six binades ([2^-3, 2^3)), both signs."""
    r = SplitMix64(key)
    return [(r.next() & 1) << 31 | (124 + r.below(6)) << 23 | (r.next() & 0x7FFFFF)
            for _ in range(n)]


def low(key: str, shape, t: str) -> np.ndarray:
    """Low-precision values: the patterns rounded once by the oracle's cast."""
    cast = spec.to_bf16_bits if t == "bfloat16" else spec.to_f16_bits
    pats = [cast(u) for u in _patterns(key, int(np.prod(shape)))]
    return np.array(pats, np.uint16).view(cast_types()[t]).reshape(shape)


def inputs(case: LowCase) -> tuple[np.ndarray, ...]:
    """attention: (q, k, v, grad_out float32); embedding: (table,)."""
    if case.op == "embedding":
        return (low(f"mixed/{case.id}/0", TABLE_SHAPE, case.t),)
    qkv = tuple(low(f"mixed/{case.id}/{i}", QKV_SHAPE, case.t) for i in range(3))
    n = int(np.prod(QKV_SHAPE))
    do = np.array(_patterns(f"mixed/{case.id}/grad_out", n), np.uint32).view(np.float32)
    return qkv + (do.reshape(QKV_SHAPE),)


def _widen(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.float32 else a.astype(np.float32)  # exact (clause 6)


def run(case: LowCase, backend: str, widen: bool = False) -> list[tuple[str, np.ndarray]]:
    """The case's records through the public ops on `backend`; with `widen`, the float32 op on
    the exactly widened inputs (clause (g)'s reference)."""
    ins = inputs(case)
    if widen:
        ins = tuple(_widen(a) for a in ins)
    if case.op == "embedding":
        return [("rows", layers.embedding(IDS, ins[0], backend=backend))]
    q, k, v, do = ins
    o = attention.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend)
    dq, dk, dv = attention.scaled_dot_product_attention_backward(do, q, k, v, is_causal=True,
                                                                 backend=backend)
    return [("o", o), ("dq", dq), ("dk", dk), ("dv", dv)]


def rounded(records, t: str) -> list[tuple[str, np.ndarray]]:
    """A negative control's records: each float32 result rounded to the inputs' low type and
    widened back (results kept in the low precision)."""
    dtype = cast_types()[t]
    return [(name, np.asarray(a, np.float32).astype(dtype).astype(np.float32))
            for name, a in records]
