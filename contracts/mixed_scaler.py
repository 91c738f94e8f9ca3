"""The mixed suite's windowed loss-scale cases (contracts/mixed.md, the windowed scaler clauses):
a few SGD steps under `GradScaler(check_interval=k)` with overflows placed inside windows.

Each case records the scale after every update, which steps skipped, and the final
parameters. The negative control's scaler forgets an overflow when a later step of the
window is clean (a window flag that is not sticky).

>>> [w.id for w in WINDOWS]
['window-second', 'window-two', 'window-last']
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..optim.optimizers import SGD
from ..optim.scaler import GradScaler
from .casegen import SplitMix64

SHAPES = ((5,), (2, 3))
INIT_SCALE = 2.0**10


@dataclass(frozen=True)
class Window:
    id: str
    k: int  # check_interval
    steps: int
    growth_interval: int
    bad: tuple  # (step, tensor, cell, value): a non-finite gradient cell in that step


# steps count from 0; window w holds steps w*k .. w*k + k - 1
WINDOWS = (
    # an inf at the second step of the second window, the first window clean (growth at 4)
    Window("window-second", 4, 8, 4, ((5, 1, 2, np.inf),)),
    # an inf and a NaN in one window: one backoff; the next window clean grows
    Window("window-two", 4, 8, 4, ((1, 0, 3, np.inf), (2, 1, 0, np.nan))),
    # a -inf at a window's last step, with k = 3
    Window("window-last", 3, 9, 3, ((5, 0, 0, -np.inf),)),
)


def _grads(w: Window, step: int, scale: float) -> list[np.ndarray]:
    """The step's gradients times the scale (a power of two: the product is exact): float32
    values in [2^-8, 2^-4), both signs, from SplitMix64 patterns; then the case's bad cells."""
    r = SplitMix64(f"mixed/{w.id}/grads/{step}")
    out = []
    for shape in SHAPES:
        n = int(np.prod(shape))
        pats = [(r.next() & 1) << 31 | (119 + r.below(4)) << 23 | (r.next() & 0x7FFFFF)
                for _ in range(n)]
        g = np.array(pats, np.uint32).view(np.float32) * np.float32(scale)
        out.append(g.reshape(shape))
    for s, t, cell, v in w.bad:
        if s == step:
            out[t].reshape(-1)[cell] = np.float32(v)
    return out


def _params() -> list[np.ndarray]:
    r = SplitMix64("mixed/window/params")
    return [np.array([(r.next() & 1) << 31 | (125 + r.below(3)) << 23 | (r.next() & 0x7FFFFF)
                      for _ in range(int(np.prod(s)))], np.uint32).view(np.float32).reshape(s)
            for s in SHAPES]


def run(w: Window, backend: str, scaler_type=GradScaler) -> list[tuple[str, np.ndarray]]:
    """The case's records: the scale after each update, 1.0 for each skipped step, and the
    final parameters laid end to end (SGD with momentum, so a skip that wrote would show)."""
    params = _params()
    opt = SGD(params, lr=0.25, momentum=0.5, backend=backend)
    scaler = scaler_type(init_scale=INIT_SCALE, growth_interval=w.growth_interval,
                         check_interval=w.k, backend=backend)
    scales, skipped = [], []
    for step in range(w.steps):
        t = opt.t
        scaler.step(opt, _grads(w, step, scaler.get_scale()))
        skipped.append(1.0 if opt.t == t else 0.0)
        scaler.update()
        scales.append(scaler.get_scale())
    return [("scales", np.float32(scales)), ("skipped", np.float32(skipped)),
            ("params", np.concatenate([p.reshape(-1) for p in params]))]


class ForgetfulScaler(GradScaler):
    """The negative control's scaler: each step sets the window flag to its own decision, so a
    clean step after an overflow in the same window clears it (a flag that is not sticky)."""

    def _record(self, optimizer, stage: str, found_inf: bool) -> None:
        super()._record(optimizer, stage, found_inf)
        if self._check_interval > 1 and stage == "stepped":
            self._window_flag[0] = found_inf
