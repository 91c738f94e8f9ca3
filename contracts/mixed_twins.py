"""The mixed suite's twin-refresh cases (contracts/mixed.md, the twin clauses): a few SGD and
AdamW steps with bfloat16 and float16 cast twins, each step's twins and masters recorded.

`twins-sgd` lands its first step exactly on chosen float32 values (ties of both roundings,
float16 overflow and subnormals, bfloat16 overflow and subnormals) and its second step on
their halves; `twins-adamw` takes three AdamW steps from masters spread over float16's range,
the first tensor frozen (gradient None) at the second step. The negative control's twins are
written once, before the first step, and never again (a twin not refreshed after a step).

Reproducibility: the steps and the twins are the optimizer's (contracts/optim.md clauses 21-24),
the same bits on every backend; inputs are integer patterns from SplitMix64 and exact float32
halvings and doublings.

>>> [t.id for t in TWIN_CASES]
['twins-sgd', 'twins-adamw']
>>> [name for name, _ in run(TWIN_CASES[0], "oracle")][:3]
['twins-0', 'twins-1', 'masters-1']
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.checks import cast_types
from ..ops.mixed import cast
from ..optim.optimizers import SGD, AdamW
from .casegen import SplitMix64

# float32 patterns a step lands on exactly (twins-sgd, first step)
TARGETS = (
    0x3F808000, 0x3F818000, 0x3F807FFF, 0xC0C18000,  # bfloat16 ties (kept bit even, odd), below
    0x3F801000, 0x3F803000,  # float16 ties: 1 + 2^-11 (to 1), 1 + 3 2^-11 (up)
    0x477FF000, 0x477FEFFF, 0xC77FF000, 0x477FE000,  # 65520 (float16 inf), below, -65520, 65504
    0x33000000, 0x33C00000, 0xB3000000,  # 2^-25 (to +0), 3 2^-25 (to 2^-23), -2^-25 (to -0)
    0x33800000, 0x387FC000, 0x38800000,  # float16's least and greatest subnormal, least normal
    0x7F7F8000, 0x7F7F7FFF,  # bfloat16 overflow to inf, and just below it
    0x00018000, 0x00008000,  # float32 subnormals on bfloat16 ties (kept bit odd, even)
)


@dataclass(frozen=True)
class TwinCase:
    id: str
    optimizer: str  # "sgd" or "adamw"
    twin_types: tuple  # the twins' dtype names, one per parameter
    steps: int


TWIN_CASES = (
    TwinCase("twins-sgd", "sgd", ("bfloat16", "float16"), 2),
    TwinCase("twins-adamw", "adamw", ("float16", "bfloat16"), 3),
)
ADAMW_SHAPES = ((4, 5), (12,))
FROZEN = (1, 0)  # twins-adamw: (step, tensor) whose gradient is None


def _f32(patterns) -> np.ndarray:
    return np.array(patterns, np.uint32).view(np.float32)


def _sgd_inputs() -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """Masters and gradients for lr = 1: p - 1 * g is exact, so step 1 gives TARGETS (tensor 1:
    their negatives) and step 2 their halves."""
    two, half = np.float32(2.0), np.float32(0.5)
    t0 = _f32(TARGETS)
    targets = [t0, -t0]
    params, first, second = [], [], []
    for t in targets:  # both branches are computed: the unchosen doubling may overflow
        normal = (t.view(np.uint32) & 0x7F800000) >= 0x01000000  # t * 0.5 exact
        with np.errstate(over="ignore"):
            p0 = np.where(normal, t * half, t * two)
        params.append(p0.astype(np.float32))
        first.append(np.where(normal, -(t * half), t).astype(np.float32))
        second.append((t * half).astype(np.float32))
    return params, [first, second]


def _random(key: str, shape, lo: int, span: int) -> np.ndarray:
    r = SplitMix64(key)
    n = int(np.prod(shape))
    return _f32([(r.next() & 1) << 31 | (lo + r.below(span)) << 23 | (r.next() & 0x7FFFFF)
                 for _ in range(n)]).reshape(shape)


def _adamw_inputs(case: TwinCase) -> tuple[list[np.ndarray], list[list]]:
    """Masters with exponent fields 100 to 142 (float16 subnormals to its top binade), both
    signs; gradients in [2^-7, 1)."""
    params = [_random(f"mixed/{case.id}/params/{i}", s, 100, 43) for i, s in enumerate(ADAMW_SHAPES)]
    grads = [[_random(f"mixed/{case.id}/grads/{step}/{i}", s, 120, 7)
              for i, s in enumerate(ADAMW_SHAPES)] for step in range(case.steps)]
    step, tensor = FROZEN
    grads[step][tensor] = None
    return params, grads


def _patterns(twins) -> np.ndarray:
    """The twins' uint16 patterns end to end, zero-extended into float32 cells (as
    mixed._patterns16: never a NaN pattern)."""
    return np.concatenate([t.view(np.uint16).reshape(-1) for t in twins]).astype(
        np.uint32).view(np.float32)


def run(case: TwinCase, backend: str, stale: bool = False) -> list[tuple[str, np.ndarray]]:
    """The case's records: the twins after the constructor (`twins-0`), then after each step s
    the twins (`twins-s`) and the masters (`masters-s`). With `stale`, the negative control:
    the twins are cast once before the optimizer exists, which steps without them."""
    params, grads = _sgd_inputs() if case.optimizer == "sgd" else _adamw_inputs(case)
    low = cast_types()
    twins = [np.zeros(p.shape, low[t]) for p, t in zip(params, case.twin_types)]
    if stale:
        for p, t, name in zip(params, twins, case.twin_types):
            cast(p, name, out=t, backend=backend)
    given = None if stale else twins
    if case.optimizer == "sgd":
        opt = SGD(params, lr=1.0, backend=backend, twins=given)
    else:
        opt = AdamW(params, lr=0.001, weight_decay=0.1, backend=backend, twins=given)
    out = [("twins-0", _patterns(twins))]
    for s, g in enumerate(grads, 1):
        opt.step([None if x is None else x.copy() for x in g])
        out.append((f"twins-{s}", _patterns(twins)))
        out.append((f"masters-{s}", np.concatenate([p.reshape(-1) for p in params])))
    return out
