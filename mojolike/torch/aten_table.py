"""The one table of `mojolike.torch.certified`: every aten op it lets run, and how.

`TABLE` maps an aten op's name (`str(func)`, e.g. "aten.mm.default") to an `Op`: either
a route (`route` is a function of `mojolike.torch.aten_routes`, `maps_to` names the mojolike
entry point it calls) or a pass-through (`route` None: torch's own CPU kernel runs, after the
dtype and device check, because the op is one IEEE binary32 operation per element, a copy,
a view or a fill; `check` refuses the options that would make it more, such as add's alpha).
An op not in the table is refused by name. docs/torch_certified.md is `markdown()`
(tests/test_torch_certified.py checks the file equals it).

Reproducibility: a routed op has the mojolike entry point's bits; a pass-through op is
exact per element (the result is the correctly rounded binary32 of one operation on its
operands, or a copy), so it is the same whatever torch's vectorization or thread count.

>>> from mojolike.torch.aten_table import TABLE
>>> TABLE["aten.bmm.default"].maps_to
'mojolike.matmul'
>>> TABLE["aten.add.Tensor"].route is None
True
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ..core.entry import declared
from ..core.refusals import refuse
from . import aten_routes as r

ENTRY = r.ENTRY


def _name(fn) -> str:
    """The entry point's name as its declaration spells it (the one place it is spelled)."""
    return declared(fn).name
PASS_THROUGH = "pass-through: one IEEE op per element"
PASS_COPY = "pass-through: a copy, view or fill (no arithmetic)"


class Op(NamedTuple):
    """One certified aten op: the route (None: pass-through), what it maps to, an option check."""
    route: Callable | None
    maps_to: str
    check: Callable | None = None
    note: str = ""


def _alpha(name: str, pos: int):
    def check(args, kwargs):
        alpha = args[pos] if len(args) > pos else kwargs.get("alpha", 1)
        if alpha != 1:
            refuse(ENTRY, f"{name}(alpha={alpha!r})",
                   "is not certified (a + alpha*b may contract to one FMA in torch's CPU "
                   "kernel; only alpha=1 is certified: scale b first)")
    return check


_FLOAT_OUT = ("float32", "int64", "int32", "bool", None)


def _to_copy(args, kwargs):
    dtype = kwargs.get("dtype")
    if dtype is not None and str(dtype).replace("torch.", "") not in _FLOAT_OUT:
        refuse(ENTRY, f"aten._to_copy.default(dtype={dtype})",
               "is not certified (only float32, int64, int32 and bool tensors are: float16, "
               "bfloat16 and float64 are not covered)")
    device = kwargs.get("device")
    if device is not None and str(device) != "cpu":
        refuse(ENTRY, f"aten._to_copy.default(device={device})",
               "is not certified (only CPU tensors are; the GPU path does not exist yet)")


_FOLDS = "its bits, computed as mojolike.linear with a row of ones (the same fold)"


def _routes() -> dict[str, Op]:
    return {
        "aten.mm.default": Op(r.mm, "mojolike.matmul's bits, as mojolike.linear(a, b.t())",
                              note="the same fold; b.t() made contiguous by torch (exact)"),
        "aten.addmm.default": Op(r.addmm, "mojolike.linear(a, b.t(), bias): the fold, then "
                                          "+ bias (one rounding)", note="beta=1, alpha=1 only"),
        "aten.bmm.default": Op(r.bmm, _name(r.matmul)),
        "aten.embedding.default": Op(r.embedding_fwd, _name(r.embedding)),
        "aten.embedding_dense_backward.default": Op(r.embedding_bwd,
                                                    _name(r.embedding_backward)),
        "aten.native_layer_norm.default": Op(
            r.native_layer_norm, _name(r.layer_norm),
            note="the saved mean and rstd: the folds of x and of (x-mean)^2 / D, 1/sqrt(var+eps)"),
        "aten.native_layer_norm_backward.default": Op(
            r.native_layer_norm_bwd, _name(r.layer_norm_backward),
            note="its forward must have run under the same certified() (for eps)"),
        "aten._softmax.default": Op(r.softmax_fwd, _name(r.softmax)),
        "aten._log_softmax.default": Op(r.log_softmax_fwd, _name(r.log_softmax)),
        "aten._softmax_backward_data.default": Op(r.softmax_bwd, _name(r.softmax_backward)),
        "aten._log_softmax_backward_data.default": Op(r.log_softmax_bwd,
                                                      _name(r.log_softmax_backward)),
        "aten.gelu.default": Op(r.gelu_fwd, _name(r.gelu), note="approximate none and tanh"),
        "aten.gelu_backward.default": Op(r.gelu_bwd, _name(r.gelu_backward)),
        "aten.nll_loss_forward.default": Op(
            r.nll_loss_fwd, "mojolike.sum of -logp[i, target_i] (then / count for mean)",
            note="weight=None only"),
        "aten.nll_loss_backward.default": Op(r.nll_loss_bwd,
                                             "-grad (/ total_weight for mean) at the targets"),
        "aten._scaled_dot_product_flash_attention_for_cpu.default": Op(
            r.sdpa_fwd, _name(r.scaled_dot_product_attention),
            note="dropout_p=0 only; the logsumexp output is NaN (not computed)"),
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": Op(
            r.sdpa_bwd, _name(r.scaled_dot_product_attention_backward)),
        "aten.sum.default": Op(r.sum_fwd, _name(r.fold_sum), note=_FOLDS + "; integer inputs: torch's, exact"),
        "aten.sum.dim_IntList": Op(r.sum_fwd, _name(r.fold_sum), note=_FOLDS + "; integer inputs: torch's, exact"),
        "aten.mean.default": Op(r.mean_fwd, _name(r.mean), note=_FOLDS),
        "aten.mean.dim": Op(r.mean_fwd, _name(r.mean), note=_FOLDS),
        "aten.exp.default": Op(r.exp_fwd, "mojolike.math.expf (correctly rounded)"),
        "aten.tanh.default": Op(r.tanh_fwd, "mojolike.math.tanhf (correctly rounded)"),
        "aten.tanh_backward.default": Op(r.tanh_bwd, "grad * (1 - y*y), three roundings"),
        "aten.sqrt.default": Op(r.sqrt_fwd, "the IEEE square root (numpy; correctly rounded)",
                                note="torch's CPU sqrt is not correctly rounded"),
        "aten.rsqrt.default": Op(r.rsqrt_fwd, "1 / sqrt(x), two roundings"),
        "aten.pow.Tensor_Scalar": Op(r.pow_scalar, "x*x (exponent 2), x*x*x (3), rounded in "
                                                   "order", note="exponents 1, 2, 3 only"),
    }


_ELEMENTWISE = {
    "aten.add.Tensor": _alpha("aten.add.Tensor", 2), "aten.add_.Tensor": _alpha("aten.add_.Tensor", 2),
    "aten.add.Scalar": _alpha("aten.add.Scalar", 2), "aten.add_.Scalar": _alpha("aten.add_.Scalar", 2),
    "aten.sub.Tensor": _alpha("aten.sub.Tensor", 2), "aten.sub_.Tensor": _alpha("aten.sub_.Tensor", 2),
    "aten.rsub.Scalar": _alpha("aten.rsub.Scalar", 2),
    "aten.mul.Tensor": None, "aten.mul_.Tensor": None, "aten.mul.Scalar": None,
    "aten.div.Tensor": None, "aten.div_.Tensor": None,
    "aten.div.Scalar": None,
    "aten.neg.default": None, "aten.abs.default": None,
    "aten.relu.default": None, "aten.threshold_backward.default": None,
    "aten.maximum.default": None, "aten.minimum.default": None,
    "aten.where.self": None, "aten.masked_fill.Scalar": None, "aten.logical_not.default": None,
    **{f"aten.{c}.{k}": None for c in ("eq", "ne", "lt", "le", "gt", "ge")
       for k in ("Tensor", "Scalar")},
}
_COPIES = (
    "copy_.default", "clone.default", "detach.default", "alias.default", "lift_fresh.default",
    "view.default", "_unsafe_view.default", "t.default", "transpose.int", "permute.default",
    "expand.default", "unsqueeze.default", "squeeze.dim", "squeeze.dims", "cat.default",
    "stack.default", "split.Tensor", "split_with_sizes.default", "unbind.int", "select.int",
    "slice.Tensor", "select_backward.default", "slice_backward.default", "as_strided.default",
    "zeros.default", "zeros_like.default", "ones.default", "ones_like.default",
    "empty.memory_format", "empty_like.default", "empty_strided.default", "new_zeros.default",
    "new_ones.default", "new_empty.default", "new_empty_strided.default", "full.default",
    "full_like.default", "fill_.Scalar", "zero_.default", "tril.default", "triu.default", "_local_scalar_dense.default", "scalar_tensor.default",
    "arange.default", "arange.start", "arange.start_step",
)


PASS_MARKER = "pass-through: a profiler marker (no tensor data)"
_MARKERS = ("profiler._record_function_enter_new.default",
            "profiler._record_function_exit._RecordFunction")


def _build() -> dict[str, Op]:
    table = _routes()
    for name, check in _ELEMENTWISE.items():
        table[name] = Op(None, PASS_THROUGH, check)
    for short in _COPIES:
        table[f"aten.{short}"] = Op(None, PASS_COPY)
    for name in _MARKERS:
        table[name] = Op(None, PASS_MARKER, note="torch.optim.Optimizer.step's record_function")
    table["aten._to_copy.default"] = Op(None, PASS_COPY, _to_copy,
                                        note="to float32/int64/int32/bool on the CPU only")
    return dict(sorted(table.items()))


TABLE: dict[str, Op] = _build()


def markdown() -> str:
    """docs/torch_certified.md: the table, one row per op, in name order."""
    routed = sum(op.route is not None for op in TABLE.values())
    lines = [
        "# The aten ops `mojolike.torch.certified()` runs",
        "",
        "Generated from `mojolike/torch/aten_table.py: TABLE` by `markdown()`;",
        "`tests/test_torch_certified.py` fails when this file differs from it.",
        "",
        (f"{len(TABLE)} ops: {routed} routed to mojolike's kernels, {len(TABLE) - routed} "
         f"passed through to torch's CPU kernel after the dtype and device check."),
        "Every other aten op is refused by name, as are float16, bfloat16 and float64",
        "tensors and tensors on any device but the CPU.",
        "",
        "| aten op | runs as | note |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | {op.maps_to} | {op.note} |" for name, op in TABLE.items()]
    return "\n".join(lines) + "\n"
