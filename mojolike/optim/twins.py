"""Cast twins: a bfloat16 or float16 copy of each float32 master parameter, kept by the step.

`twins=[...]` on SGD, Adam and AdamW gives one entry per parameter, in registry order
(param groups flattened): None, or a C-contiguous writable bfloat16 (ml_dtypes) or
float16 array of the parameter's shape, sharing memory with no parameter and no other
twin. Every step that updates a parameter writes its twin in the same kernel pass, right
after each element's new master value (the kernels' `sgd_twins` / `adam_twins`); a
skipped step writes nothing, and a frozen parameter's twin keeps its bytes. Twins are
derived, never state: `refresh_twins()` (and the constructor, and `load_state_dict`)
writes each from its master with `mojolike.cast`.

Kernels see a twin as its uint16 bit patterns and a kind flag per tensor (0 none,
1 bfloat16, 2 float16). On backends whose kernels take pieces (cpu-numba, cpu-cffi)
they write the caller's twins where they lie; on the others (the oracle, cuda) the
kernels write a flat uint16 buffer and each stepped twin is copied out of it after the
call (the parameters' own packed path, `packed_`, does the same).

Reproducibility: a twin is mojolike.cast(master, its dtype) bit for bit (round to
nearest even, subnormals kept, overflow to inf, NaN to the canonical quiet NaN), on
every backend and thread count; the masters are those of the same steps without twins.

>>> import numpy as np, ml_dtypes, mojolike
>>> w = np.float32([1.0, 2.0]); w16 = np.zeros(2, ml_dtypes.bfloat16)
>>> opt = mojolike.SGD(w, lr=0.5, twins=[w16], backend="oracle")
>>> opt.step(np.float32([0.015625, 1.0])); w.tolist(), w16.astype(np.float32).tolist()
([0.9921875, 1.5], [0.9921875, 1.5])
"""
from __future__ import annotations

import numpy as np

from ..core import checks
from ..core.pieces import Pieces
from ..core.refusals import Refusal, refuse


class Twins:
    """The checked twins of one optimizer and how its kernels take them."""

    def __init__(self, entry: str, twins, reg, k):
        """Check `twins` against the registry `reg` and the kernel set `k`; refusals name
        the option "twins" (the reason says which entry)."""
        if not (hasattr(k, "sgd_twins") and hasattr(k, "adam_twins")):
            refuse(entry, "twins", f"cannot be written on backend {k.backend}: its kernels have "
                                   f"no step that writes cast twins")
        if not isinstance(twins, (list, tuple)):
            refuse(entry, "twins", f"must be a list with one entry (None, or a bfloat16 or float16 "
                                   f"array) per parameter, not {type(twins).__name__}")
        if len(twins) != len(reg.views):
            refuse(entry, "twins", f"has {len(twins)} entries but the optimizer has "
                                   f"{len(reg.views)} parameter(s); give one per parameter, None "
                                   f"for a parameter without a twin")
        self.typed = [None if t is None else checks.as_twin(entry, "twins", i, t, shape)
                      for i, (t, shape) in enumerate(zip(twins, reg.shapes))]
        named = [(f"twins[{i}]", t[0]) for i, t in enumerate(self.typed) if t is not None]
        try:
            checks.disjoint(entry, named + [(f"params[{i}]", v) for i, v in enumerate(reg.views)])
        except Refusal as r:
            refuse(entry, "twins", f"{r.option} share memory; a twin must be a buffer of its own")
        self.kinds = np.array([0 if t is None else checks.TWIN_KINDS[t[1]] for t in self.typed],
                              np.int64)
        self.bits = [None if t is None else t[0].view(np.uint16) for t in self.typed]
        self.offsets = reg.offsets
        if k.takes_pieces:  # the kernels write the caller's twins; a None slot is never touched
            placeholder = np.zeros(1, np.uint16)
            self._pieces = Pieces([placeholder if b is None else b for b in self.bits],
                                  self.offsets)
            self.flat = None
        else:
            self._pieces = None
            self.flat = np.zeros(reg.n, np.uint16)

    def check_apart(self, entry: str, g, gathered, present: list[bool], split) -> None:
        """Refuse a step whose gradients share memory with a twin (the kernels read the one
        while they write the other), naming both as the registry names a gradient that
        overlaps a parameter. g, gathered and present are the registry's `grads`; split cuts
        a flat array into the tensors."""
        if isinstance(g, Pieces):
            views = g.arrays
        else:
            views = gathered if gathered is not None else [a.reshape(-1) for a in split(g)]
        named = [(f"grads[{i}]", v) for i, v in enumerate(views) if v is not None and present[i]]
        checks.disjoint(entry, named + [(f"twins[{i}]", t[0]) for i, t in enumerate(self.typed)
                                        if t is not None])

    def args(self, i: int, j: int) -> tuple:
        """(tw, kinds, cut) of tensors i .. j - 1, as sgd_twins and adam_twins take them."""
        off = self.offsets
        cut = off[i:j + 1] - off[i]
        if self._pieces is not None:
            whole = i == 0 and j == len(off) - 1  # the one table, its addresses made once
            return (self._pieces if whole else self._pieces.part(i, j)), self.kinds[i:j], cut
        return self.flat[int(off[i]):int(off[j])], self.kinds[i:j], cut

    def written(self, i: int, j: int) -> None:
        """After the kernel call on tensors i .. j - 1: copy each of their twins out of the
        flat buffer (backends without pieces); with pieces the kernels wrote them in place."""
        if self.flat is None:
            return
        off = self.offsets
        for x in range(i, j):
            if self.bits[x] is not None:
                self.bits[x][...] = self.flat[int(off[x]):int(off[x + 1])]

    def refresh(self, masters: list[np.ndarray], backend: str, numeric_mode: str) -> None:
        """Write every twin from its master (flat float32 views, registry order) with
        mojolike.cast on `backend`."""
        from ..ops.mixed import cast  # the casts' own entry point: the same rounding
        for t, master in zip(self.typed, masters):
            if t is not None:
                cast(master, t[1], out=t[0], backend=backend, numeric_mode=numeric_mode)
