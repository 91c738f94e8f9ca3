"""`RunRecorder`: the run card of any training loop (torch or numpy), as `mojolike train`
writes for its own, so that `mojolike compare` names the first step where two runs differ.

Per step, `record(loss, grad_norm=, scale=, skipped=, params=)` keeps the values `mojolike
train` records (loss, total gradient norm, loss scale, skipped) as binary32 values, and the
md5 of the parameters' bits after the step (the parameter digest). `card()` renders them in
the card format (mojolike.core.cardformat) under the profile
`mojolike.recorded-run.fp32.v1:<name>`:

    step-0001/loss n=1 md5=...      (and norm, scale, skipped: NaN where not given)
    step-0001/params n=<cells> md5=<md5 of the parameters' little-endian bytes>
    ...
    run/certified n=<steps> md5=...  (per step: 1 under mojolike.torch.certified, else 0)

`write(folder)` writes `<name>.card` and `<name>.meta.json` (the machine, the loop's kind,
whether it ran under certified(), thread counts, versions: what the card leaves out) with
the same atomic writes as `mojolike train`. `mojolike compare A B` (two cards or two
folders) then says `differ: ... line k: 'step-0007/params ...'`: the first differing step.
The certified flags come last, so a certified run compared with an uncertified one still
names the first step whose values differ; the meta says in words which ran how.

Whether a torch loop runs under certified() is read at each record() from torch's dispatch
mode stack (a mode from mojolike.torch.dispatch), unless `certified=` says it.

Reproducibility: the card holds only the recorded bits (NaN canonicalized), nothing about
the machine; two loops with the same bits give the same card on any machine.

>>> import numpy as np
>>> w = np.float32([1.0, 2.0])
>>> rec = RunRecorder("demo")
>>> rec.record(0.5, params=[w], grad_norm=1.0)
>>> rec.card().splitlines()[5] == cardformat.record("step-0001", "params", w)
True
>>> rec.meta()["loop"], rec.meta()["certified"]
('numpy', False)
"""
from __future__ import annotations

import hashlib
import math
import platform
import sys
from pathlib import Path

import numpy as np

from ..core import cardformat
from ..core.entry import entry_point
from ..core.refusals import refuse

__all__ = ["RunRecorder"]

_ENTRY = "mojolike.RunRecorder"
VALUES = ("loss", "norm", "scale", "skipped")


def _is_torch(x) -> bool:
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def _under_certified() -> bool:
    """True when a mojolike.torch dispatch mode is on torch's mode stack."""
    if "torch" not in sys.modules:
        return False
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    return any(type(m).__module__.startswith("mojolike.torch") for m in
               _get_current_dispatch_mode_stack())


def _scalar(name: str, v) -> float:
    """A recorded value as the binary32 nearest it (a 1-element tensor or array, or a number);
    None is NaN (not applied)."""
    if v is None:
        return math.nan
    if _is_torch(v) or isinstance(v, np.ndarray):
        if v.numel() != 1 if _is_torch(v) else v.size != 1:
            refuse(_ENTRY, name, "must be one value (a number, or a 1-element tensor or array)")
        v = v.item()
    if isinstance(v, (bool, np.bool_)):
        return float(v)
    if not isinstance(v, (int, float, np.floating, np.integer)):
        refuse(_ENTRY, name, f"must be a number, not {type(v).__name__}")
    return float(np.float32(v))


def _tensors(params) -> list:
    """The parameters as a list: an nn.Module's (named_parameters order), a torch optimizer's
    (its groups' order), an array, a tensor, or an iterable of them."""
    if hasattr(params, "named_parameters"):
        return [p for _, p in params.named_parameters()]
    if hasattr(params, "param_groups"):
        return [p for g in params.param_groups for p in g["params"]]
    if isinstance(params, np.ndarray) or _is_torch(params):
        return [params]
    return list(params)


def _digest(params) -> tuple[int, str, str]:
    """(cells, md5 of the float32 parameters' canonical bytes in order, loop kind)."""
    h, n, kind = hashlib.md5(), 0, "numpy"
    for i, p in enumerate(_tensors(params)):
        if _is_torch(p):
            kind = "torch"
            import torch
            if p.dtype != torch.float32 or p.device.type != "cpu":
                refuse(_ENTRY, f"params[{i}]", f"is {p.dtype} on {p.device}; the digest is of "
                                               f"CPU float32 parameters")
            a = p.detach().numpy()
        else:
            a = np.asarray(p)
            if a.dtype != np.float32:
                refuse(_ENTRY, f"params[{i}]", f"is {a.dtype}; the digest is of float32 "
                                               f"parameters")
        h.update(cardformat.canonical_bytes(a))
        n += a.size
    return n, h.hexdigest(), kind


class RunRecorder:
    """The run card and meta of a training loop; see the module docstring.

    name: the card's name (the profile's tail and the files' stem). certified: None (read
    torch's dispatch mode stack at each record), or True / False as the caller knows it.

    Reproducibility: the card is the recorded bits alone; the same loop gives the same
    card on every machine, backend and thread count exactly when its bits are the same.

    >>> rec = RunRecorder("numpy-loop", certified=False)
    >>> rec.record(1.25, params=[np.zeros(3, np.float32)], skipped=True)
    >>> rec.steps
    1
    """

    _ENTRY = _ENTRY

    @entry_point()
    def __init__(self, name: str = "run", *, certified: bool | None = None, entry, **unknown):
        if not isinstance(name, str) or not name or any(c.isspace() or c in "/\\" for c in name):
            refuse(_ENTRY, "name", "must be a non-empty name without spaces or slashes",
                   value=name)
        if certified is not None and not isinstance(certified, bool):
            refuse(_ENTRY, "certified", "must be None, True or False", value=certified)
        self.name = name
        self._certified = certified
        self._rows: list[tuple] = []  # (loss, norm, scale, skipped, cells, md5, certified)
        self._kind = None

    @property
    def steps(self) -> int:
        return len(self._rows)

    def record(self, loss, *, params, grad_norm=None, scale=None, skipped=False) -> None:
        """Record one step (call it after the optimizer step): the loss, the total gradient
        norm (None: not clipped), the loss scale (None: no scaler), whether the step was
        skipped, and the parameters (an nn.Module, a torch optimizer, tensors or arrays)."""
        row = (_scalar("loss", loss), _scalar("grad_norm", grad_norm), _scalar("scale", scale),
               _scalar("skipped", bool(skipped) if isinstance(skipped, (bool, np.bool_))
                       else skipped))
        cells, md5, kind = _digest(params)
        if self._kind is not None and kind != self._kind:
            refuse(_ENTRY, "params", f"are {kind} where earlier steps recorded {self._kind}")
        certified = self._certified if self._certified is not None else _under_certified()
        self._kind = kind
        self._rows.append((*row, cells, md5, bool(certified)))

    def profile(self) -> str:
        return f"mojolike.recorded-run.fp32.v1:{self.name}"

    def card(self) -> str:
        """The run card (cardformat's text, trailer included)."""
        width = max(4, len(str(len(self._rows))))
        recs = []
        for k, (*values, cells, md5, _) in enumerate(self._rows, 1):
            step = f"step-{k:0{width}d}"
            recs += [cardformat.record(step, name, np.float32([v]))
                     for name, v in zip(VALUES, values)]
            recs.append(f"{step}/params n={cells} md5={md5}")
        recs.append(cardformat.record("run", "certified",
                                      np.float32([r[-1] for r in self._rows])))
        return cardformat.render(self.profile(), recs)

    def digest(self) -> str:
        """The run card's md5."""
        return cardformat.card_md5(self.card())

    def meta(self) -> dict:
        """What the card leaves out: the loop's kind, certified or not, threads, versions."""
        flags = [r[-1] for r in self._rows]
        certified = all(flags) if flags else (self._certified or _under_certified())
        meta = {"name": self.name, "loop": self._kind or "numpy", "steps": len(self._rows),
                "certified": certified, "certified_steps": sum(flags),
                "certified_how": "given" if self._certified is not None else
                "torch's dispatch mode stack (mojolike.torch.certified)",
                "card_md5": self.digest(), "profile": self.profile(),
                "python": platform.python_version(), "machine": platform.machine(),
                "processor": platform.processor(), "argv": " ".join(sys.argv)}
        from .cli import _version
        meta["mojolike_version"] = _version()
        if "torch" in sys.modules:
            import torch
            meta["torch_version"] = torch.__version__
            meta["torch_threads"] = torch.get_num_threads()
        if "numba" in sys.modules:
            import numba
            meta["numba_threads"] = numba.get_num_threads()
        return meta

    def write(self, folder) -> Path:
        """Write <folder>/<name>.card and <name>.meta.json (atomically); returns the card's
        path, which `mojolike compare` takes (or the folder)."""
        if not self._rows:
            refuse(_ENTRY, "write", "has no step recorded; call record() after each step")
        out = Path(folder)
        card = out / f"{self.name}.card"
        cardformat.write_atomic(card, self.card())
        cardformat.write_json_atomic(out / f"{self.name}.meta.json", self.meta())
        return card
