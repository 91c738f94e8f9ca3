"""Dynamic loss scaling: `GradScaler` (torch.amp.GradScaler's names, defaults and semantics)
and `grad_checksum`, the inf/NaN test it takes its decisions from.

The scale is a binary32 value. Its reciprocal is computed as torch computes it,
binary32(1 / binary64(scale)); update multiplies the scale by a factor in
binary64 and rounds the product once to binary32 (torch's CPU `_amp_update_scale_`).
A step is skipped when `grad_checksum` of the unscaled gradients is non-finite:
the `fold` of every cell, non-finite exactly when some cell is or the finite sum
overflows (a false alarm costs one extra backoff). A skipped step writes nothing.

Reproducibility: the scales and skip decisions depend on the gradients' bits
alone; the same on every backend and thread count (numeric_mode="identical").

>>> import numpy as np, mojolike
>>> mojolike.grad_checksum([np.float32([1.5, -0.5]), None, np.float32([3e38, 3e38])],
...                        backend="oracle")
inf
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..core import checks, registry
from ..core.entry import entry_point
from ..core.pieces import Pieces
from ..core.refusals import refuse
from ..ops.fold import fold
from ..oracles import codec, f32
from .base import _Optimizer
from .grads import CLIP_EPS, get_total_norm
from .params import as_list, end_to_end

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"  # torch's OptState
# the optimizer step's options that step(optimizer, grads, ...) passes on
_STEP_OPTIONS = ("update_gate", "clip")
# the optimizer step's options the scaler sets itself
_OWN = {
    "grad_scale": "is the scaler's to set (its inverse scale); unscale the gradients with the "
                  "scaler, or step the optimizer directly",
    "sumsqs": "is the scaler's to set, from its own pass over the gradients",
}


# -- the checksum ---------------------------------------------------------------------------------
def _segments(entry: str, grads, k, *, writable: bool = False) -> tuple:
    """(the gradients present as the kernels `k` take them, their offsets, a flat copy's
    caller views to write back into, else None), None entries skipped: one buffer, or cells
    laid end to end, as one flat view; else pieces where the kernels take them; else a
    flat copy. Without `writable` the buffers are only read (read-only ones are fine)."""
    items, listed = as_list(entry, "grads", grads, none=True)
    name = (lambda i: f"grads[{i}]") if listed else (lambda i: "grads")
    named = [(name(i), checks.as_f32(entry, name(i), g, writable=writable))
             for i, g in enumerate(items) if g is not None]
    if writable:
        checks.disjoint(entry, named)  # a buffer passed twice would be scaled twice
    views = [v for _, v in named]
    offsets = np.concatenate([[0], np.cumsum([v.size for v in views])]).astype(np.int64)
    flat = views[0] if len(views) == 1 else end_to_end(views)
    if flat is not None and (not writable or flat.flags.writeable):
        return flat, offsets, None
    if k.takes_pieces:
        return Pieces(views, offsets), offsets, None
    return np.concatenate(views), offsets, views


def _fold_of(sums, k) -> float:
    """The fold of the per-tensor sums, by the fold kernels of k's backend (mojolike.fold: the
    oracle's tree, without the host's Python arithmetic on a few hundred values)."""
    return float(fold(np.asarray(sums, np.float32), backend=k.backend, numeric_mode=k.numeric_mode))


@entry_point("mojolike.grad_checksum")
def grad_checksum(grads, *, backend=None, numeric_mode=None, entry, **unknown) -> float:
    """The fold of every gradient cell: per tensor the `fold` of its cells, then the fold of
    those sums in list order; None entries (frozen parameters) are skipped.

    The result is non-finite exactly when some cell is inf or NaN or the sum of finite
    cells overflows; `GradScaler` skips a step on it.

    Reproducibility: the fold tree over each tensor, then over the tensors; the same
    bits on every backend and thread count (numeric_mode="identical").

    >>> import numpy as np, mojolike
    >>> mojolike.grad_checksum([np.float32([1.0, 2.0]), None, np.float32([0.5])], backend="oracle")
    3.5
    """
    e = entry
    k = registry.kernels(e, "optim", backend, numeric_mode)
    x, offsets, _ = _segments(e, grads, k)
    return _fold_of(k.segment_fold(x, offsets), k)


# -- argument checks ------------------------------------------------------------------------------
def _factor(entry: str, name: str, v, *, above_one: bool) -> float:
    """A growth (> 1) or backoff (in (0, 1)) factor as the binary64 value torch multiplies by."""
    x = checks.exact(entry, name, v)
    try:
        d = float(x)
    except OverflowError:
        d = math.inf
    if above_one and not (1.0 < d < math.inf):
        refuse(entry, name, "must be > 1.0 and finite in binary64 (as in torch: the growth factor "
                            "must be > 1.0)", value=v)
    if not above_one and not 0.0 < d < 1.0:
        refuse(entry, name, "must be in (0, 1) (as in torch: the backoff factor must be < 1.0; a "
                            "factor <= 0 would make the scale 0 or negative)", value=v)
    return d


def _scale_value(entry: str, name: str, v, *, zero: bool = False) -> float:
    """A positive scale as its binary32 value (torch fills a float32 tensor with it); with
    `zero`, 0.0 too: update() backs off to 0 after enough skips, and a saved state holds it."""
    r = checks.real32(entry, name, v) + 0.0  # one zero: the scale is a magnitude
    if r < 0.0 or (r == 0.0 and not zero):
        refuse(entry, name, f"must be {'>= 0' if zero else '> 0'} (it is {r!r} in float32)",
               value=v)
    return r


_INT32_MAX = 2**31 - 1  # torch's growth interval and tracker are int32


def _interval(entry: str, v, name: str = "growth_interval") -> int:
    return checks.integer(entry, name, v, low=1, high=_INT32_MAX)


# the state_dict keys of the window, present when check_interval > 1 (torch's keys otherwise)
_WINDOW_KEYS = ("check_interval", "_window_steps", "_window_found")


def _inverse(scale: float) -> float:
    """binary32(1 / binary64(scale)): torch's scale.double().reciprocal().float()."""
    return math.inf if scale == 0.0 else f32.round_float(1.0 / scale)


def _alarm(k, sums, sumsqs, max_norm) -> bool:
    """A non-finite checksum, or, with a clip, a non-finite total norm (the clip needs one)."""
    if not math.isfinite(_fold_of(sums, k)):
        return True
    return max_norm is not None and not math.isfinite(
        float(k.clip_coef(sumsqs, np.float32(1.0), CLIP_EPS)[0]))


class GradScaler:
    """Dynamic loss scaling with torch.amp.GradScaler's methods, defaults and semantics.

    scale(loss) multiplies by the scale; step(optimizer, grads, ...) steps the optimizer
    with every gradient read as g * inv_scale (the buffers are left as they are), or
    skips it, writing nothing, when the unscaled gradients' checksum is non-finite;
    update() then multiplies the scale by backoff_factor after a skip, or by
    growth_factor after growth_interval steps in a row without one. unscale_(optimizer,
    grads) multiplies the gradients in place instead (for code that reads them first).

    The one pass that takes the checksum also takes each tensor's sum of squares, so
    with max_norm the optimizer folds the clip coefficient and inv_scale into its read
    and the gradients are read twice in all. The step is skipped when the checksum (the
    fold of every cell, `grad_checksum`) or, with max_norm, the total norm is non-finite:
    torch skips exactly when a cell is inf or NaN, so a sum that overflows while every
    cell is finite is a false alarm here, which costs one extra backoff. A norm that
    overflows only because of the scale is taken again on the unscaled values, in a
    copy, which the step then reads; one that overflows unscaled skips the step (torch
    would clip by 0). Below scale 1 (inv_scale > 1) the unscaled copy comes first,
    since g * inv_scale may overflow where g does not.

    Reproducibility: inv_scale = binary32(1 / binary64(scale)); update rounds the
    binary64 product scale * factor to binary32 once (torch's CPU kernel), so the
    scales and the skips are torch's, given the same skip decisions; the decisions
    come from the fold, the same bits on every backend (numeric_mode="identical").

    >>> import numpy as np, mojolike
    >>> w = np.float32([1.0, 2.0])
    >>> opt = mojolike.SGD(w, lr=0.5, backend="oracle")
    >>> scaler = mojolike.GradScaler(init_scale=4.0)
    >>> scaler.scale(np.float32(0.5))
    np.float32(2.0)
    >>> scaler.step(opt, np.float32([4.0, np.inf])); scaler.update(); scaler.get_scale(), w
    (2.0, array([1., 2.], dtype=float32))
    >>> scaler.step(opt, np.float32([2.0, -2.0])); scaler.update(); scaler.get_scale(), w
    (2.0, array([0.5, 2.5], dtype=float32))

    check_interval=k > 1, the windowed loss scale (OCANNL's gated step): the iterations
    (update() calls) fall into windows of k. Every step still gates itself: it is skipped,
    writing nothing, exactly when its own checksum says so (the same decision as with
    k = 1, from the same bits), and the decision is also OR-ed into a sticky window flag
    (a 1-element array). The host acts on the flag only at the window's k-th update():
    it reads and clears it, then multiplies the scale by backoff_factor once if any step
    of the window was skipped (the growth tracker goes to 0), else credits the window's
    k iterations to the tracker and, once the tracker reaches growth_interval or more,
    multiplies the scale by growth_factor (never to inf) and sets the tracker to 0. The
    other updates change neither the scale nor the tracker. So, against k = 1, on the
    same gradients: the scale changes only at updates k, 2k, 3k, ...; the steps of a
    window all use the scale of its start, so after an overflow the rest of the window
    runs at the scale that overflowed (it may skip more steps than k = 1 would); a
    window with several skipped steps backs off once, not once per skip; the clean
    steps of a window that also skipped one are not credited (k = 1 credits those after
    the skip); growth comes at the end of the first clean window whose credit reaches
    growth_interval (with no overflow and growth_interval a multiple of k: the same
    updates as k = 1), and a tracker above the interval grows at the next clean window
    (k = 1 would never grow again, torch's ==). update(new_scale) sets the scale and
    leaves the window (its count and flag) as it is. k = 1 is torch's scheme exactly.
    state_dict adds check_interval, _window_steps and _window_found when k > 1; saved
    between update() and the next step, a reload resumes mid-window with the same bits.

    >>> scaler = mojolike.GradScaler(init_scale=4.0, check_interval=2)
    >>> opt = mojolike.SGD(w, lr=0.5, backend="oracle")
    >>> scaler.step(opt, np.float32([4.0, np.inf])); scaler.update(); scaler.get_scale(), w
    (4.0, array([0.5, 2.5], dtype=float32))
    >>> scaler.step(opt, np.float32([4.0, 4.0])); scaler.update(); scaler.get_scale(), w
    (2.0, array([0., 2.], dtype=float32))
    """

    @entry_point(torch=("device",))
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True, check_interval=1, *, backend=None,
                 numeric_mode=None, entry, **unknown):
        e = entry
        self._enabled = checks.switch(e, "enabled", enabled)
        self._scale = _scale_value(e, "init_scale", init_scale)
        self._growth_factor = _factor(e, "growth_factor", growth_factor, above_one=True)
        self._backoff_factor = _factor(e, "backoff_factor", backoff_factor, above_one=False)
        self._growth_interval = _interval(e, growth_interval)
        self._growth_tracker = 0
        self._check_interval = _interval(e, check_interval, "check_interval")
        self._window_steps = 0  # the updates of the current window so far, < check_interval
        self._window_flag = np.zeros(1, np.uint8)  # sticky: some step of the window skipped
        if backend is not None or numeric_mode is not None:
            registry.resolve(e, backend, numeric_mode)  # a bad name is refused here, not later
        self._backend, self._numeric_mode = backend, numeric_mode
        # id(optimizer) -> its stage and found_inf this iteration (torch's per-optimizer state)
        self._states: dict[int, dict] = {}

    # -- scaling ----------------------------------------------------------------------------------
    @entry_point()
    def scale(self, outputs, *, entry, **unknown):
        """outputs * scale in float32: a real number (returned as numpy.float32), a float32
        array (a new array), or a list/tuple of them; unchanged when disabled."""
        e = entry
        if not self._enabled:
            return outputs
        return self._scaled(e, "outputs", outputs)

    def _scaled(self, e: str, name: str, v):
        if isinstance(v, (list, tuple)):
            return type(v)(self._scaled(e, f"{name}[{i}]", x) for i, x in enumerate(v))
        if isinstance(v, (numbers.Real, np.floating, np.integer)) and \
                not isinstance(v, (bool, np.bool_)):
            x = codec.decode_scalar(v) if isinstance(v, np.float32) else f32.round_float(float(v))
            return codec.scalar(f32.mul(x, self._scale))  # a loss may be inf or NaN: no refusal
        a = checks.as_f32(e, name, v)
        out = a.copy()
        registry.kernels(e, "optim", self._backend, self._numeric_mode).scale(
            out, codec.scalar(self._scale))
        return out.reshape(checks.shape_of(v))

    def _kernels(self, e: str, optimizer):
        """The optimizer's kernels; a scaler given a backend or mode must agree with it."""
        if not isinstance(optimizer, _Optimizer):
            refuse(e, "optimizer", f"must be a mojolike optimizer (SGD, Adam, AdamW), not "
                                   f"{type(optimizer).__name__}")
        for name, mine, theirs in (("backend", self._backend, optimizer.backend),
                                   ("numeric_mode", self._numeric_mode, optimizer.numeric_mode)):
            if mine is not None and mine != theirs:
                refuse(e, name, f"differs from the optimizer's ({theirs!r}); the gradients are "
                                f"checked and unscaled by the optimizer's kernels", value=mine)
        return registry.kernels(e, "optim", optimizer.backend, optimizer.numeric_mode)

    def _stage(self, optimizer) -> str:
        return self._states.get(id(optimizer), {"stage": _READY})["stage"]

    def _record(self, optimizer, stage: str, found_inf: bool) -> None:
        # the optimizer is held so that its id stays its own until update()
        self._states[id(optimizer)] = {"stage": stage, "found_inf": found_inf,
                                       "optimizer": optimizer}
        if self._check_interval > 1 and stage == _STEPPED:  # the window's sticky flag
            np.bitwise_or(self._window_flag, np.uint8(found_inf), out=self._window_flag)

    # -- unscale_, step, update -------------------------------------------------------------------
    @entry_point()
    def unscale_(self, optimizer, grads, *, entry, **unknown) -> None:
        """Multiply `grads` in place by inv_scale (the optimizer's kernels) and record whether
        their checksum is finite; once per optimizer between updates, before step."""
        e = entry
        if not self._enabled:
            return
        k = self._kernels(e, optimizer)
        stage = self._stage(optimizer)
        if stage == _UNSCALED:
            refuse(e, "optimizer", "has already been unscaled since the last update(); call "
                                   "unscale_ once per optimizer and iteration")
        if stage == _STEPPED:
            refuse(e, "optimizer", "was already stepped since the last update(); unscale_ comes "
                                   "before step")
        # every buffer is checked (writable, separate) before the first is written
        x, offsets, copied = _segments(e, grads, k, writable=True)
        k.scale(x, codec.scalar(_inverse(self._scale)))
        for v, lo, hi in zip(copied or (), offsets[:-1], offsets[1:]):
            v[...] = x[lo:hi]
        checksum = _fold_of(k.segment_fold(x, offsets), k)
        self._record(optimizer, _UNSCALED, not math.isfinite(checksum))

    @entry_point(also=_STEP_OPTIONS, torch=("closure",), refuses=_OWN)
    def step(self, optimizer, grads, max_norm=None, *, entry, **step_kwargs):
        """Step `optimizer` with `grads` read as g * inv_scale, or skip the step (nothing is
        written) when their checksum is non-finite; returns the step's result (None if skipped).

        step_kwargs: update_gate, and clip (after unscale_ only; the scaler's own step
        folds the clip into the read). Without unscale_, the buffers are left unchanged.
        """
        e = entry
        if not self._enabled:
            return optimizer.step(grads, max_norm, **step_kwargs)
        k = self._kernels(e, optimizer)
        stage = self._stage(optimizer)
        if stage == _STEPPED:
            refuse(e, "optimizer", "was already stepped since the last update(); call update() "
                                   "once per iteration, after the steps")
        if stage == _UNSCALED:  # the gradients are unscaled already: torch's optimizer.step
            found_inf = self._states[id(optimizer)]["found_inf"]
            if not found_inf and max_norm is not None:
                # a clip needs a finite norm: finite cells whose squares overflow skip the step,
                # as on the folded path (torch would clip by 0)
                found_inf = not math.isfinite(get_total_norm(
                    grads, backend=optimizer.backend, numeric_mode=optimizer.numeric_mode))
            if found_inf:  # the arguments are checked, nothing is read or written
                out = optimizer._step(grads, max_norm, **dict(step_kwargs, update_gate=False))
            else:
                out = optimizer.step(grads, max_norm, **step_kwargs)
        else:
            out, found_inf = self._folded_step(e, k, optimizer, grads, max_norm, step_kwargs)
        self._record(optimizer, _STEPPED, found_inf)
        return out

    def _folded_step(self, e, k, optimizer, grads, max_norm, kw) -> tuple:
        clip = kw.pop("clip", "fold")
        if clip != "fold":
            refuse(e, "clip", "must be 'fold' here: the scaler folds inv_scale and the clip "
                              "coefficient into the optimizer's read; to clip in place, call "
                              "unscale_(optimizer, grads) first", value=clip)
        inv = _inverse(self._scale)
        read, s = grads, inv
        if inv > 1.0:  # g * inv may overflow where g does not: check the unscaled values
            read, s = self._unscaled_copy(e, k, grads, inv), None
        x, offsets, _ = _segments(e, read, k)
        sums, sumsqs = k.segment_fold_sumsq(x, offsets)  # one read: checksum and squares
        # the checksum decides: a sum that overflows while every cell is finite is a false
        # alarm, which costs one extra backoff and never a wrong step
        found_inf = not math.isfinite(_fold_of(sums, k))
        if not found_inf and _alarm(k, sums, sumsqs, max_norm) and s is not None:
            # finite cells whose scaled squares overflow: the clip needs the norm of the
            # unscaled values (torch's), which then are what the optimizer reads
            read, s = self._unscaled_copy(e, k, grads, inv), None
            x, offsets, _ = _segments(e, read, k)
            sums, sumsqs = k.segment_fold_sumsq(x, offsets)
        found_inf = found_inf or _alarm(k, sums, sumsqs, max_norm)
        if found_inf:  # the arguments are checked, nothing is read or written
            optimizer._step(read, max_norm, grad_scale=s, clip="fold",
                            **dict(kw, update_gate=False))
            return None, True
        # sumsqs spares the optimizer its norm pass and vouches that the gradients are finite
        return optimizer._step(read, max_norm, grad_scale=s, clip="fold", sumsqs=sumsqs,
                               **kw), False

    def _unscaled_copy(self, e: str, k, grads, inv: float):
        """grads * inv in new arrays laid end to end (None entries kept), by the kernels `k`."""
        items, listed = as_list(e, "grads", grads, none=True)
        name = (lambda i: f"grads[{i}]") if listed else (lambda i: "grads")
        views = [checks.as_f32(e, name(i), g) for i, g in enumerate(items) if g is not None]
        flat = np.concatenate(views)
        if math.isinf(inv):  # scale 0: g * inf is inf or NaN, so the step is skipped
            flat[...] = np.float32(np.inf)
        else:
            k.scale(flat, codec.scalar(inv))
        out, lo = [], 0
        for g in items:
            if g is not None:
                shape = checks.shape_of(g)
                n = math.prod(shape)
                g = flat[lo:lo + n].reshape(shape)
                lo += n
            out.append(g)
        return out if listed else out[0]

    @entry_point()
    def update(self, new_scale=None, *, entry, **unknown) -> None:
        """Back off after a skipped step, grow after growth_interval steps without one, or set
        new_scale; then start a new iteration (every optimizer ready again)."""
        e = entry
        if not self._enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, np.ndarray):
                if new_scale.size != 1 or new_scale.dtype != np.float32:
                    refuse(e, "new_scale", "must be a real number or a 1-element float32 array")
                new_scale = np.float32(new_scale.reshape(-1)[0])
            self._scale = _scale_value(e, "new_scale", new_scale)
        else:
            found = [s["found_inf"] for s in self._states.values()]
            if not found:
                refuse(e, "step", "was not called for any optimizer since the last update(), so "
                                  "there is no inf check to act on; pass new_scale to set the "
                                  "scale instead")
            if self._check_interval > 1:
                self._window_update()
            elif any(found):
                self._scale = f32.round_float(self._scale * self._backoff_factor)
                self._growth_tracker = 0
            else:
                successful = self._growth_tracker + 1
                if successful == self._growth_interval:
                    grown = f32.round_float(self._scale * self._growth_factor)
                    if math.isfinite(grown):  # never grow to inf
                        self._scale = grown
                    self._growth_tracker = 0
                else:
                    # a tracker past the interval (set_growth_interval lowered it) never equals
                    # it again, as in torch; it stops at int32's top rather than wrap
                    self._growth_tracker = min(successful, _INT32_MAX)
        self._states = {}

    def _window_update(self) -> None:
        """check_interval > 1: count the update; at the window's last, read and clear the
        sticky flag, then back off once or credit the window's updates (the class doc)."""
        self._window_steps += 1
        if self._window_steps < self._check_interval:
            return
        overflowed = bool(self._window_flag[0])
        self._window_flag[0] = 0
        self._window_steps = 0
        if overflowed:
            self._scale = f32.round_float(self._scale * self._backoff_factor)
            self._growth_tracker = 0
            return
        credit = self._growth_tracker + self._check_interval
        if credit >= self._growth_interval:
            grown = f32.round_float(self._scale * self._growth_factor)
            if math.isfinite(grown):  # never grow to inf
                self._scale = grown
            self._growth_tracker = 0
        else:
            self._growth_tracker = credit

    # -- accessors and state ----------------------------------------------------------------------
    @entry_point()
    def get_scale(self, **unknown) -> float:
        """The current scale as a Python float (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    @entry_point()
    def get_growth_factor(self, **unknown) -> float:
        return self._growth_factor

    @entry_point()
    def set_growth_factor(self, new_factor, *, entry, **unknown) -> None:
        self._growth_factor = _factor(entry, "new_factor", new_factor, above_one=True)

    @entry_point()
    def get_backoff_factor(self, **unknown) -> float:
        return self._backoff_factor

    @entry_point()
    def set_backoff_factor(self, new_factor, *, entry, **unknown) -> None:
        self._backoff_factor = _factor(entry, "new_factor", new_factor, above_one=False)

    @entry_point()
    def get_growth_interval(self, **unknown) -> int:
        return self._growth_interval

    @entry_point()
    def set_growth_interval(self, new_interval, *, entry, **unknown) -> None:
        self._growth_interval = _interval(entry, new_interval)

    @entry_point()
    def get_check_interval(self, **unknown) -> int:
        """k: the scale is adjusted at every k-th update() (1: every update, torch's scheme)."""
        return self._check_interval

    @entry_point()
    def is_enabled(self, **unknown) -> bool:
        return self._enabled

    @entry_point()
    def state_dict(self, **unknown) -> dict:
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker
        (an empty dict when disabled), and with check_interval > 1 the window: check_interval,
        _window_steps (its updates so far) and _window_found (its sticky flag, a bool);
        load_state_dict takes every state update() can reach."""
        if not self._enabled:
            return {}
        out = {"scale": self._scale, "growth_factor": self._growth_factor,
               "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
               "_growth_tracker": self._growth_tracker}
        if self._check_interval > 1:
            out.update(check_interval=self._check_interval, _window_steps=self._window_steps,
                       _window_found=bool(self._window_flag[0]))
        return out

    @entry_point()
    def load_state_dict(self, state_dict, *, entry, **unknown) -> None:
        """Restore a state_dict(); every entry is checked before any is set (a no-op when
        disabled). Without the window keys (torch's state, or a check_interval = 1 scaler's)
        the scaler keeps its check_interval and starts an empty window."""
        e = entry
        if not self._enabled:
            return
        if not isinstance(state_dict, dict):
            refuse(e, "state_dict", f"must be a dict as state_dict() returns, not "
                                    f"{type(state_dict).__name__}")
        if not state_dict:
            refuse(e, "state_dict", "is empty, possibly because it was saved from a disabled "
                                    "GradScaler")
        want = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
        if any(key in state_dict for key in _WINDOW_KEYS):
            want |= set(_WINDOW_KEYS)
        extra, missing = sorted(map(str, set(state_dict) - want)), sorted(want - set(state_dict))
        if extra:
            refuse(e, extra[0], f"is not part of a GradScaler state; the keys are "
                                f"{', '.join(sorted(want))}")
        if missing:
            refuse(e, missing[0], "is missing")
        scale = _scale_value(e, "scale", state_dict["scale"], zero=True)
        growth = _factor(e, "growth_factor", state_dict["growth_factor"], above_one=True)
        backoff = _factor(e, "backoff_factor", state_dict["backoff_factor"], above_one=False)
        interval = _interval(e, state_dict["growth_interval"])
        tracker = checks.integer(e, "_growth_tracker", state_dict["_growth_tracker"], low=0,
                                 high=_INT32_MAX)
        check, steps, found = self._check_interval, 0, False
        if "check_interval" in state_dict:
            check = _interval(e, state_dict["check_interval"], "check_interval")
            steps = checks.integer(e, "_window_steps", state_dict["_window_steps"], low=0,
                                   high=check - 1)
            found = state_dict["_window_found"]
            if not isinstance(found, (bool, np.bool_)):
                refuse(e, "_window_found", f"must be a bool, not {type(found).__name__}",
                       value=found)
            if check == 1 and found:
                refuse(e, "_window_found", "must be False with check_interval 1 (there is no "
                                           "window)", value=found)
        self._scale, self._growth_factor, self._backoff_factor = scale, growth, backoff
        self._growth_interval, self._growth_tracker = interval, tracker
        self._check_interval, self._window_steps = check, steps
        self._window_flag[0] = bool(found)
