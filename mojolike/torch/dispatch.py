"""`certified()`: a torch dispatch mode under which a program's float32 CPU aten ops, forward
and backward, run on mojolike's kernels, and every other op is refused by name.

    with mojolike.torch.certified(backend="cpu-numba", numeric_mode="identical"):
        loss = F.cross_entropy(model(x), y)
        loss.backward()

Each aten op torch dispatches is looked up by name in the one table,
`mojolike.torch.aten_table.TABLE` (documented in docs/torch_certified.md):

- a routed op (mm, addmm, bmm, embedding and its dense backward, native_layer_norm and its
  backward, _softmax/_log_softmax and their backward_data, gelu and gelu_backward,
  nll_loss_forward/backward, the CPU flash attention op and its backward, sum and mean,
  exp, tanh, rsqrt, pow) calls mojolike's public entry point with the mode's backend and
  numeric mode; matmul and linear reach torch as view + mm/addmm/bmm, cross_entropy as
  _log_softmax + nll_loss, F.scaled_dot_product_attention on the CPU as
  `_scaled_dot_product_flash_attention_for_cpu`, F.rms_norm as pow, mean, add, rsqrt, mul
  (its forward has mojolike.rms_norm's bits; its backward is torch's autograd formula over
  certified ops, deterministic but not mojolike.rms_norm_backward's formula);
- a pass-through op (add, sub, mul, div, neg, relu, where, comparisons, copies, views,
  reshapes, cat, basic indexing, fills, `_to_copy` to float32 on the CPU) runs torch's own CPU
  kernel after the check, because its result is one IEEE binary32 operation per element (or
  a copy): the same bits whatever torch's vectorization or thread count;
- every other op raises `Refusal` ("mojolike.torch.certified: aten.cumsum.default is not
  certified ..."), before it runs. So do float16, bfloat16 and float64 tensors and tensors
  on any device but the CPU, whatever the op.

The backward ops must run under the same mode (call `loss.backward()` inside the `with`):
outside it torch's own kernels run, and nothing can refuse them.

The order in which gradient contributions are added. When one tensor feeds several ops, its
gradient is the sum of their contributions; torch's autograd engine adds them, in its
InputBuffer, with pass-through `aten.add` calls (so the additions are IEEE binary32) in the
order the producing backward nodes run. torch's documentation does not state that order as
a guarantee (torch.autograd.backward says only that gradients are summed and accumulated
in the leaves). The engine (torch/csrc/autograd/engine.cpp) runs a CPU graph task on the
thread that called backward, from one ready queue ordered by each node's sequence number,
the later-created node first (pytorch/pytorch PR 4746, "Heuristic-based autograd execution
order"); torch.set_num_threads changes the intra-op pool, not that queue. So on the CPU the
order is a function of the graph and the order the forward built it, and
tests/test_torch_certified_fanin.py checks a three-way fan-in gives the same bits on 1 and 2
threads (torch's and numba's) and equals the sum taken in reverse creation order.

Reproducibility: under `certified()` every float32 result is mojolike's (the oracle's
bits on every backend and thread count) or exact per element; what the table does not
cover is refused, never silently left as torch's.

>>> import torch, mojolike.torch
>>> with mojolike.torch.certified(backend="oracle"):
...     y = torch.ones(2, 3) @ torch.ones(3, 1)
>>> y.tolist()
[[3.0], [3.0]]
>>> with mojolike.torch.certified(backend="oracle"):
...     try:
...         torch.cumsum(torch.ones(3), 0)
...     except mojolike.Refusal as e:
...         print(str(e)[:60])
mojolike.torch.certified: aten.cumsum.default is not certifi
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..core import registry
from ..core.entry import entry_point
from ..core.refusals import refuse
from .aten_routes import PASS
from .aten_table import TABLE

ENTRY = "mojolike.torch.certified"
_OK_DTYPES = frozenset({torch.float32, torch.int64, torch.int32, torch.bool})
_WHY_DTYPE = {
    torch.float16: "float16 is not covered until mixed precision exists; keep the model in "
                   "float32 (model.float())",
    torch.bfloat16: "bfloat16 is not covered until mixed precision exists; keep the model in "
                    "float32 (model.float())",
    torch.float64: "float64 is not covered (the contracts are binary32); use float32 tensors",
}
_CPU = torch.device("cpu")
_BY_FUNC: dict = {}  # OpOverload -> (its name, its Op or None): str(func) once per op


def _refuse_tensor(name: str, t: torch.Tensor) -> None:
    if t.device != _CPU:
        refuse(ENTRY, f"{name} on {t.device}", "is not certified (only CPU tensors are; the "
                                               "GPU path does not exist yet): run on the CPU")
    why = _WHY_DTYPE.get(t.dtype, f"{t.dtype} is not covered (float32, int64, int32 and bool are)")
    refuse(ENTRY, f"{name} with a {str(t.dtype).replace('torch.', '')} tensor",
           f"is not certified: {why}")


def _check(name: str, values) -> None:
    """Refuse a tensor argument of another dtype or device (Python numbers reach aten as
    numbers, not tensors; a float64 0-d tensor is the program's own and is refused)."""
    for v in values:
        if isinstance(v, torch.Tensor):
            if v.dtype not in _OK_DTYPES or v.device != _CPU:
                _refuse_tensor(name, v)
        elif isinstance(v, (list, tuple)):
            _check(name, v)


class CertifiedMode(TorchDispatchMode):
    """The dispatch mode `certified()` returns; `backend` and `numeric_mode` are the ones
    every routed op uses (resolved once, as mojolike's entry points resolve them)."""

    def __init__(self, backend: str, numeric_mode: str):
        super().__init__()
        self.backend = backend
        self.numeric_mode = numeric_mode
        self.calls: dict[str, int] = {}
        self._eps: dict[int, tuple] = {}

    # native_layer_norm_backward gets rstd, not eps: the forward leaves eps here, by rstd
    def remember_eps(self, rstd: torch.Tensor, eps: float) -> None:
        self._eps = {k: v for k, v in self._eps.items() if v[0]() is not None}
        self._eps[rstd.data_ptr()] = (weakref.ref(rstd), eps)

    def recall_eps(self, rstd: torch.Tensor) -> float:
        got = self._eps.get(rstd.data_ptr())
        if got is None or got[0]() is None:
            refuse(ENTRY, "aten.native_layer_norm_backward.default",
                   "is not certified here: its forward (aten.native_layer_norm) did not run "
                   "under this certified() mode, so its eps is unknown; run the forward and "
                   "the backward under the same mode")
        return got[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        got = _BY_FUNC.get(func)
        if got is None:
            name = str(func)
            got = _BY_FUNC[func] = (name, TABLE.get(name))
        name, op = got
        if op is None:
            refuse(ENTRY, name, "is not certified (no mojolike kernel or exact pass-through "
                                "covers it; see docs/torch_certified.md for the ops that are, "
                                "and compute it with ops that are certified)")
        _check(name, args)
        if kwargs:
            _check(name, kwargs.values())
        self.calls[name] = self.calls.get(name, 0) + 1
        if op.check is not None:
            op.check(args, kwargs)
        if op.route is not None:
            out = op.route(self, args, kwargs)
            if out is not PASS:
                return out
        out = func(*args, **kwargs)
        _check(name, out if isinstance(out, (list, tuple)) else (out,))
        return out


@entry_point(ENTRY)
def certified(backend=None, numeric_mode=None, *, entry) -> CertifiedMode:
    """A `torch.utils._python_dispatch.TorchDispatchMode` (use it as `with certified(...):`)
    under which float32 CPU aten ops run on mojolike's kernels with this backend and numeric
    mode (None: the environment's, then the default), pass-through ops run torch's exact
    kernels, and every other op, dtype and device is refused by name.

    Reproducibility: each routed op has the bits of the mojolike entry point it maps to,
    each pass-through op is exact per element; see the module docstring for the order of
    gradient accumulation.

    >>> import torch, mojolike.torch
    >>> with mojolike.torch.certified(backend="oracle") as mode:
    ...     s = torch.ones(4).sum()
    >>> s.item(), mode.backend, mode.calls["aten.sum.default"]
    (4.0, 'oracle', 1)
    """
    b, mode = registry.resolve(entry, backend, numeric_mode)
    return CertifiedMode(b, mode)


__all__ = ["CertifiedMode", "certified"]
