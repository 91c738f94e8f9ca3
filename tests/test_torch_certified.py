"""mojolike.torch.certified(): every op of the aten table is tested on its own (a routed op
against the mojolike entry point it maps to, run on the oracle; a pass-through op against a
hand numpy computation, bitwise), the table is the documented one, and every other op,
dtype and device is refused by name."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F

import mojolike
import mojolike.torch
from mojolike.torch.aten_table import TABLE, markdown

A = torch.ops.aten
ROOT = Path(__file__).resolve().parents[1]
BACKEND = "cpu-numba"  # the mode's backend; references run on the oracle
O = {"backend": "oracle"}


def rnd(*shape, seed=0, positive=False):
    a = np.random.default_rng(seed + 7 * len(shape)).standard_normal(shape).astype(np.float32)
    return np.abs(a) + np.float32(0.5) if positive else a


def T(a):
    return torch.from_numpy(np.array(a))


def same(got, want):
    g = got.detach().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    w = np.asarray(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    assert g.tobytes() == w.tobytes(), (g, w)


def f(x):
    return np.float32(x)


# -- routed ops: each against the mojolike entry point, on the oracle -------------------------
def c_mm():
    a, b, w, s = rnd(3, 1500) * f(100), rnd(1500, 2, seed=1), rnd(5, 1500, seed=2), rnd(3, 40)
    return ((A.mm(T(a), T(b)), A.mm(T(a), T(w).t()), A.mm(T(s).t(), T(s))),  # x @ W.t(), g.t() @ x
            (mojolike.matmul(a, b, **O), mojolike.matmul(a, np.ascontiguousarray(w.T), **O),
             mojolike.matmul(np.ascontiguousarray(s.T), s, **O)))


def c_addmm():
    bias, a, b, w = rnd(2, seed=2), rnd(3, 40), rnd(40, 2, seed=1), rnd(2, 40, seed=3)
    full = rnd(3, 2, seed=4)
    return ((A.addmm(T(bias), T(a), T(b)), A.addmm(T(bias), T(a), T(w).t()),
             A.addmm(T(full), T(a), T(b))),
            (mojolike.matmul(a, b, **O) + bias,
             mojolike.matmul(a, np.ascontiguousarray(w.T), **O) + bias,
             mojolike.matmul(a, b, **O) + full))


def c_bmm():
    a, b = rnd(2, 3, 4), rnd(2, 4, 2, seed=1)
    return A.bmm(T(a), T(b)), mojolike.matmul(a, b, **O)


def c_embedding():
    w, ids = rnd(5, 3), np.int64([[4, 0], [2, 2]])
    return A.embedding(T(w), T(ids)), mojolike.embedding(ids, w, **O)


def c_embedding_dense_backward():
    g, ids = rnd(2, 2, 3), np.int64([[4, 0], [2, 2]])
    return (A.embedding_dense_backward(T(g), T(ids), 5, -1, False),
            mojolike.embedding_backward(g.reshape(4, 3), ids.reshape(4), 5, **O))


def c_native_layer_norm():
    x, w, b = rnd(3, 4), rnd(4, seed=1), rnd(4, seed=2)
    y, mu, rs = A.native_layer_norm(T(x), [4], T(w), T(b), 1e-5)
    mean = mojolike.mean(x, 1, True, **O)
    var = mojolike.mean((x - mean) * (x - mean), 1, True, **O)
    return (y, mu, rs), (mojolike.layer_norm(x, (4,), w, b, 1e-5, **O), mean,
                         f(1) / np.sqrt(var + f(1e-5)))


def c_native_layer_norm_backward():
    x, w, b, g = rnd(3, 4), rnd(4, seed=1), rnd(4, seed=2), rnd(3, 4, seed=3)
    _, mu, rs = A.native_layer_norm(T(x), [4], T(w), T(b), 1e-5)
    got = A.native_layer_norm_backward(T(g), T(x), [4], mu, rs, T(w), T(b), [True, True, True])
    return got, mojolike.layer_norm_backward(g, x, (4,), w, b, 1e-5, **O)


def c__softmax():
    x = rnd(3, 5)
    return A._softmax(T(x), 1, False), mojolike.softmax(x, 1, **O)


def c__log_softmax():
    x = rnd(3, 5)
    return A._log_softmax(T(x), 0, False), mojolike.log_softmax(x, 0, **O)


def c__softmax_backward_data():
    g, y = rnd(3, 5), mojolike.softmax(rnd(3, 5, seed=1), 1, **O)
    return (A._softmax_backward_data(T(g), T(y), 1, torch.float32),
            mojolike.softmax_backward(g, y, 1, **O))


def c__log_softmax_backward_data():
    g, y = rnd(3, 5), mojolike.log_softmax(rnd(3, 5, seed=1), 1, **O)
    return (A._log_softmax_backward_data(T(g), T(y), 1, torch.float32),
            mojolike.log_softmax_backward(g, y, 1, **O))


def c_gelu():
    x = rnd(4, 6)
    return ((A.gelu(T(x)), A.gelu(T(x), approximate="tanh")),
            (mojolike.gelu(x, **O), mojolike.gelu(x, "tanh", **O)))


def c_gelu_backward():
    g, x = rnd(4, 6), rnd(4, 6, seed=1)
    return ((A.gelu_backward(T(g), T(x)), A.gelu_backward(T(g), T(x), approximate="tanh")),
            (mojolike.gelu_backward(g, x, **O), mojolike.gelu_backward(g, x, "tanh", **O)))


_LP = mojolike.log_softmax(rnd(5, 4), 1, backend="oracle")
_TG = np.int64([3, -100, 0, 1, 3])
_KEPT = np.negative(_LP[[0, 2, 3, 4], [3, 0, 1, 3]])


def c_nll_loss_forward():
    s = mojolike.sum(_KEPT, **O)
    got = [A.nll_loss_forward(T(_LP), T(_TG), None, r, -100) for r in (0, 1, 2)]
    none = np.zeros(5, np.float32)
    none[[0, 2, 3, 4]] = _KEPT
    want = [(none, f(4)), (np.divide(s, f(4), dtype=np.float32).reshape(()), f(4)),
            (np.asarray(s, np.float32).reshape(()), f(4))]
    return got, want


def c_nll_loss_backward():
    g = T(f(0.75).reshape(()))
    got = A.nll_loss_backward(g, T(_LP), T(_TG), None, 1, -100, T(f(4).reshape(())))
    want = np.zeros((5, 4), np.float32)
    want[[0, 2, 3, 4], [3, 0, 1, 3]] = np.negative(np.divide(f(0.75), f(4), dtype=np.float32))
    return got, want


def _qkv():
    return rnd(1, 2, 3, 4), rnd(1, 2, 3, 4, seed=1), rnd(1, 2, 3, 4, seed=2)


def c__scaled_dot_product_flash_attention_for_cpu():
    q, k, v = _qkv()
    o, lse = A._scaled_dot_product_flash_attention_for_cpu(T(q), T(k), T(v), 0.0, True)
    assert np.isnan(lse.detach().numpy()).all()  # not computed: the backward recomputes
    mask = np.array([[True, False, True], [True, True, False], [False, True, True]])
    # a bool mask reaches the op as a float mask (where(mask, 0, -inf)): the same bits
    masked = F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=T(mask))
    return (o, masked), (mojolike.scaled_dot_product_attention(q, k, v, is_causal=True, **O),
                         mojolike.scaled_dot_product_attention(q, k, v, attn_mask=mask, **O))


def c__scaled_dot_product_flash_attention_for_cpu_backward():
    q, k, v = _qkv()
    g = rnd(1, 2, 3, 4, seed=3)
    o, lse = A._scaled_dot_product_flash_attention_for_cpu(T(q), T(k), T(v), 0.0, True)
    got = A._scaled_dot_product_flash_attention_for_cpu_backward(T(g), T(q), T(k), T(v), o, lse,
                                                                 0.0, True)
    return got, mojolike.scaled_dot_product_attention_backward(g, q, k, v, is_causal=True, **O)


def c_sum_default():
    x = rnd(3, 40)
    ints = A.sum.default(T(np.int64([[1, 2], [3, 4]])))
    assert ints.dtype == torch.int64 and int(ints) == 10  # an integer sum: exact, torch's
    return A.sum.default(T(x)), mojolike.sum(x, **O)


def c_sum_dim_IntList():
    x, long, tall = rnd(3, 4, 5), rnd(2, 2500) * f(1e3), rnd(2100, 3) * f(1e3)
    return ((A.sum.dim_IntList(T(x), [0, 2], True), A.sum.dim_IntList(T(x), [1]),
             A.sum.dim_IntList(T(x), [2, -3]), A.sum.dim_IntList(T(long), [1]),
             A.sum.dim_IntList(T(tall), [0], True)),
            (mojolike.sum(x, (0, 2), True, **O), mojolike.sum(x, 1, **O),
             mojolike.sum(x, (0, 2), **O), mojolike.sum(long, 1, **O),
             mojolike.sum(tall, 0, True, **O)))


def c_mean_default():
    x = rnd(3, 7)
    return A.mean.default(T(x)), mojolike.mean(x, **O)


def c_mean_dim():
    x, tall = rnd(3, 7), rnd(1500, 3, 2)
    return ((A.mean.dim(T(x), [-1], True), A.mean.dim(T(tall), [0, 2])),
            (mojolike.mean(x, -1, True, **O), mojolike.mean(tall, (0, 2), **O)))


def c_exp_default():
    x = rnd(50)
    return A.exp(T(x)), mojolike.math.expf(x, **O)


def c_tanh_default():
    x = rnd(50)
    return A.tanh(T(x)), mojolike.math.tanhf(x, **O)


def c_tanh_backward_default():
    g, y = rnd(50), np.tanh(rnd(50, seed=1)).astype(np.float32)
    return A.tanh_backward(T(g), T(y)), g * (f(1) - y * y)


def c_rsqrt_default():
    x = rnd(50, positive=True)
    return A.rsqrt(T(x)), f(1) / np.sqrt(x)


def c_sqrt_default():
    x = rnd(1027, positive=True)  # against binary64's square root rounded once (exact here)
    return A.sqrt(T(x)), np.sqrt(x.astype(np.float64)).astype(np.float32)


def c_pow_Tensor_Scalar():
    x = rnd(50)
    return ((A.pow.Tensor_Scalar(T(x), 2), A.pow.Tensor_Scalar(T(x), 3)), (x * x, x * x * x))


# -- pass-through ops: torch's own CPU kernel, checked bitwise against numpy -------------------
N = 1027  # past every vector width, with a tail
a, b, p = rnd(N), rnd(N, seed=1), rnd(N, seed=2, positive=True)
ELEMENTWISE = {
    "aten.add.Tensor": (lambda: A.add.Tensor(T(a), T(b)), lambda: a + b),
    "aten.add_.Tensor": (lambda: T(a).add_(T(b)), lambda: a + b),
    "aten.add.Scalar": (lambda: A.add.Scalar(T(a), 0.1), lambda: a + f(0.1)),
    "aten.add_.Scalar": (lambda: A.add_.Scalar(T(a), 0.1), lambda: a + f(0.1)),
    "aten.sub.Tensor": (lambda: A.sub.Tensor(T(a), T(b)), lambda: a - b),
    "aten.sub_.Tensor": (lambda: T(a).sub_(T(b)), lambda: a - b),
    "aten.rsub.Scalar": (lambda: A.rsub.Scalar(T(a), 0.1), lambda: f(0.1) - a),
    "aten.mul.Tensor": (lambda: (A.mul.Tensor(T(a), T(b)), A.mul.Tensor(T(a), 0.1)),
                        lambda: (a * b, a * f(0.1))),
    "aten.mul_.Tensor": (lambda: T(a).mul_(T(b)), lambda: a * b),
    "aten.mul.Scalar": (lambda: A.mul.Scalar(T(a), 0.3), lambda: a * f(0.3)),
    "aten.div.Tensor": (lambda: (A.div.Tensor(T(a), T(p)), A.div.Tensor(T(a), 0.3)),
                        lambda: (a / p, a / f(0.3))),
    "aten.div_.Tensor": (lambda: T(a).div_(T(p)), lambda: a / p),
    "aten.div.Scalar": (lambda: A.div.Scalar(T(a), 0.3), lambda: a / f(0.3)),
    "aten.neg.default": (lambda: A.neg(T(a)), lambda: -a),
    "aten.abs.default": (lambda: A.abs(T(a)), lambda: np.abs(a)),
    "aten.relu.default": (lambda: A.relu(T(a)), lambda: np.maximum(a, f(0))),
    "aten.threshold_backward.default": (lambda: A.threshold_backward(T(b), T(a), 0.0),
                                        lambda: np.where(a <= 0, f(0), b)),
    "aten.maximum.default": (lambda: A.maximum(T(a), T(b)), lambda: np.maximum(a, b)),
    "aten.minimum.default": (lambda: A.minimum(T(a), T(b)), lambda: np.minimum(a, b)),
    "aten.where.self": (lambda: A.where.self(T(a > 0), T(a), T(b)), lambda: np.where(a > 0, a, b)),
    "aten.masked_fill.Scalar": (lambda: A.masked_fill.Scalar(T(a), T(a > 0), -1.5),
                                lambda: np.where(a > 0, f(-1.5), a)),
    "aten.logical_not.default": (lambda: A.logical_not(T(a > 0)), lambda: ~(a > 0)),
}
for _c, _np in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                ("gt", np.greater), ("ge", np.greater_equal)):
    ELEMENTWISE[f"aten.{_c}.Tensor"] = (
        lambda _c=_c: getattr(A, _c).Tensor(T(a), T(np.where(b > 0, a, b))),
        lambda _np=_np: _np(a, np.where(b > 0, a, b)))
    ELEMENTWISE[f"aten.{_c}.Scalar"] = (lambda _c=_c: getattr(A, _c).Scalar(T(a), 0.25),
                                        lambda _np=_np: _np(a, f(0.25)))

m = rnd(3, 4)
_mt = T(m)
COPIES = {
    "aten.copy_.default": (lambda: torch.zeros(3, 4).copy_(T(m)), lambda: m),
    "aten.clone.default": (lambda: A.clone(T(m)), lambda: m),
    "aten.detach.default": (lambda: A.detach(T(m)), lambda: m),
    "aten.alias.default": (lambda: A.alias(T(m)), lambda: m),
    "aten.lift_fresh.default": (lambda: A.lift_fresh(T(m)), lambda: m),
    "aten.view.default": (lambda: A.view(T(m), [4, 3]), lambda: m.reshape(4, 3)),
    "aten._unsafe_view.default": (lambda: A._unsafe_view(T(m), [2, 6]), lambda: m.reshape(2, 6)),
    "aten.t.default": (lambda: A.t(T(m)), lambda: m.T),
    "aten.transpose.int": (lambda: A.transpose.int(T(m), 0, 1), lambda: m.T),
    "aten.permute.default": (lambda: A.permute(T(m[None]), [2, 0, 1]),
                             lambda: m[None].transpose(2, 0, 1)),
    "aten.expand.default": (lambda: A.expand(T(m[:1]), [3, 4]), lambda: np.broadcast_to(m[:1], (3, 4))),
    "aten.unsqueeze.default": (lambda: A.unsqueeze(T(m), 1), lambda: m[:, None]),
    "aten.squeeze.dim": (lambda: A.squeeze.dim(T(m[None]), 0), lambda: m),
    "aten.squeeze.dims": (lambda: A.squeeze.dims(T(m[None, :, None]), [0, 2]), lambda: m),
    "aten.cat.default": (lambda: A.cat([T(m), T(m[:1])]), lambda: np.concatenate([m, m[:1]])),
    "aten.stack.default": (lambda: A.stack([T(m), T(m)], 1), lambda: np.stack([m, m], 1)),
    "aten.split.Tensor": (lambda: A.split.Tensor(T(m), 2, 1), lambda: np.split(m, 2, 1)),
    "aten.split_with_sizes.default": (lambda: A.split_with_sizes(T(m), [1, 3], 1),
                                      lambda: np.split(m, [1], 1)),
    "aten.unbind.int": (lambda: A.unbind.int(T(m), 0), lambda: list(m)),
    "aten.select.int": (lambda: A.select.int(T(m), 1, 2), lambda: m[:, 2]),
    "aten.slice.Tensor": (lambda: A.slice.Tensor(T(m), 1, 1, 3), lambda: m[:, 1:3]),
    "aten.select_backward.default": (
        lambda: A.select_backward(T(m[:, 2]), [3, 4], 1, 2),
        lambda: np.where(np.arange(4) == 2, m, f(0))),
    "aten.slice_backward.default": (
        lambda: A.slice_backward(T(m[:, 1:3]), [3, 4], 1, 1, 3, 1),
        lambda: np.where((np.arange(4) >= 1) & (np.arange(4) < 3), m, f(0))),
    "aten.as_strided.default": (lambda: A.as_strided(T(m), [2, 2], [4, 1]), lambda: m[:2, :2]),
    "aten.zeros.default": (lambda: A.zeros([2, 3]), lambda: np.zeros((2, 3), np.float32)),
    "aten.zeros_like.default": (lambda: A.zeros_like(T(m)), lambda: np.zeros_like(m)),
    "aten.ones.default": (lambda: A.ones([2, 3]), lambda: np.ones((2, 3), np.float32)),
    "aten.ones_like.default": (lambda: A.ones_like(T(m)), lambda: np.ones_like(m)),
    "aten.empty.memory_format": (lambda: A.empty.memory_format([2, 3]).shape, lambda: (2, 3)),
    "aten.empty_like.default": (lambda: A.empty_like(T(m)).shape, lambda: (3, 4)),
    "aten.empty_strided.default": (lambda: A.empty_strided([2, 3], [3, 1]).shape, lambda: (2, 3)),
    "aten.new_zeros.default": (lambda: A.new_zeros(T(m), [2]), lambda: np.zeros(2, np.float32)),
    "aten.new_ones.default": (lambda: A.new_ones(T(m), [2]), lambda: np.ones(2, np.float32)),
    "aten.new_empty.default": (lambda: A.new_empty(T(m), [2]).shape, lambda: (2,)),
    "aten.new_empty_strided.default": (lambda: A.new_empty_strided(T(m), [2], [1]).shape,
                                       lambda: (2,)),
    "aten.full.default": (lambda: A.full([2], 0.1), lambda: np.full(2, f(0.1))),
    "aten.full_like.default": (lambda: A.full_like(T(m), 0.1), lambda: np.full((3, 4), f(0.1))),
    "aten.fill_.Scalar": (lambda: T(m).fill_(0.1), lambda: np.full((3, 4), f(0.1))),
    "aten.zero_.default": (lambda: T(m).zero_(), lambda: np.zeros((3, 4), np.float32)),
    "aten._local_scalar_dense.default": (lambda: torch.tensor([2.5]).item(), lambda: 2.5),
    "aten.scalar_tensor.default": (lambda: A.scalar_tensor(0.1), lambda: f(0.1).reshape(())),
    "aten.tril.default": (lambda: A.tril(T(m)), lambda: np.tril(m)),
    "aten.triu.default": (lambda: A.triu(T(m), 1), lambda: np.triu(m, 1)),
    "aten.arange.default": (lambda: A.arange(5), lambda: np.arange(5)),
    "aten.arange.start": (lambda: A.arange.start(2, 5), lambda: np.arange(2, 5)),
    "aten.arange.start_step": (lambda: A.arange.start_step(2, 9, 3), lambda: np.arange(2, 9, 3)),
    "aten._to_copy.default": (lambda: A._to_copy(T(m), dtype=torch.float32), lambda: m),
}


def _markers():
    with torch.autograd.profiler.record_function("certified"):
        return A.neg(T(m))


MARKERS = {"profiler._record_function_enter_new.default": (_markers, lambda: -m),
           "profiler._record_function_exit._RecordFunction": (_markers, lambda: -m)}

ROUTED = {name: fn for name, fn in globals().items() if name.startswith("c_")}
CASES: dict = {}
for _name in TABLE:
    _full = "c_" + _name.removeprefix("aten.").replace(".", "_")
    _short = _full.removesuffix("_default")
    if _full in ROUTED or _short in ROUTED:
        CASES[_name] = ROUTED.get(_full) or ROUTED[_short]
CASES.update(ELEMENTWISE)
CASES.update(COPIES)
CASES.update(MARKERS)


def _flat(x):
    if isinstance(x, (list, tuple)) and not (isinstance(x, tuple) and x and isinstance(x[0], int)):
        return [z for y in x for z in _flat(y)]
    return [x]


def test_every_op_of_the_table_has_its_own_case_and_no_case_is_outside_the_table():
    assert set(CASES) == set(TABLE)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_certified_op_gives_the_oracles_or_numpys_bits(name):
    case = CASES[name]
    with mojolike.torch.certified(backend=BACKEND) as mode:
        if isinstance(case, tuple):
            got, want = case[0](), case[1]()
        else:
            got, want = case()
    assert mode.calls.get(name, 0) >= 1, (name, mode.calls)
    g, w = _flat(got), _flat(want)
    assert len(g) == len(w)
    for x, y in zip(g, w):
        if isinstance(y, tuple) or (isinstance(x, torch.Size)):
            assert tuple(x) == tuple(y)
        elif x is None or y is None:
            assert x is y
        else:
            same(x, y)


def test_the_documented_table_is_the_table():
    assert (ROOT / "docs" / "torch_certified.md").read_text() == markdown()


# -- refusals ----------------------------------------------------------------------------------
def refused(fn, *words):
    with pytest.raises(mojolike.Refusal) as e, mojolike.torch.certified(backend=BACKEND):
        fn()
    text = str(e.value)
    assert text.startswith("mojolike.torch.certified: "), text
    for w in words:
        assert w in text, text
    return text


def test_an_op_outside_the_table_is_refused_by_name_before_it_runs():
    x = torch.ones(3)
    text = refused(lambda: torch.cumsum(x, 0), "aten.cumsum.default is not certified",
                   "docs/torch_certified.md")
    assert "is not certified" in text
    refused(lambda: torch.sigmoid(x), "aten.sigmoid.default")
    refused(lambda: torch.addcmul(x, x, x), "aten.addcmul.default")
    refused(lambda: torch.lerp(x, x, 0.5), "aten.lerp.Scalar")
    refused(lambda: torch.randn(2), "aten.randn.default")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_half_bfloat16_and_double_tensors_are_refused_by_name(dtype):
    x = torch.ones(3, dtype=dtype)
    name = str(dtype).replace("torch.", "")
    refused(lambda: x + x, "aten.add.Tensor", f"a {name} tensor", name)
    refused(lambda: torch.ones(2).to(dtype), "aten._to_copy.default", name)
    refused(lambda: torch.zeros(2, dtype=dtype), "aten.zeros.default", name)


def test_a_tensor_off_the_cpu_is_refused_by_name():
    x = torch.ones(3, device="meta")  # no GPU here: the meta device takes the same path
    refused(lambda: x * 2, "aten.mul.Tensor on meta", "only CPU tensors")
    refused(lambda: torch.ones(2).to("meta"), "aten._to_copy.default", "device=meta")


def test_options_that_leave_the_one_op_per_element_contract_are_refused_and_write_nothing():
    a_, b_ = torch.ones(3), torch.full((3,), 2.0)
    refused(lambda: a_.add_(b_, alpha=2), "aten.add_.Tensor(alpha=2)", "FMA")
    assert a_.tolist() == [1.0, 1.0, 1.0]
    refused(lambda: torch.sub(a_, b_, alpha=0.5), "aten.sub.Tensor(alpha=0.5)")
    refused(lambda: torch.div(a_, b_, rounding_mode="floor"), "aten.div.Tensor_mode")
    refused(lambda: A.pow.Tensor_Scalar(a_, 0.5), "exponent=0.5")
    refused(lambda: A.addmm(a_[:1], torch.ones(1, 1), torch.ones(1, 1), beta=2), "beta=2")
    refused(lambda: A._softmax(a_, 0, True), "half_to_float=True")
    refused(lambda: A.sum.dim_IntList(a_, [0], dtype=torch.float64), "dtype=torch.float64")
    qkv = (torch.ones(1, 1, 2, 2),) * 3
    refused(lambda: A._scaled_dot_product_flash_attention_for_cpu(*qkv, 0.5, False),
            "dropout_p=0.5")
    # with dropout, F.scaled_dot_product_attention takes torch's math path: refused there
    refused(lambda: F.scaled_dot_product_attention(*qkv, dropout_p=0.5), "is not certified")
    refused(lambda: A.nll_loss_forward(torch.zeros(2, 3), torch.tensor([0, 1]), torch.ones(3), 1,
                                       -100), "weight=")
    refused(lambda: A.nll_loss_forward(torch.zeros(2, 3), torch.tensor([0, 3]), None, 1, -100),
            "target[1]", "outside [0, 3)")
    refused(lambda: A.embedding_dense_backward(torch.ones(2, 3), torch.tensor([0, 1]), 4, -1, True),
            "scale_grad_by_freq=True")


def test_a_layer_norm_backward_whose_forward_ran_outside_the_mode_is_refused():
    x = torch.ones(2, 4)
    _, mu, rs = A.native_layer_norm(x, [4], None, None, 1e-5)  # plain torch
    refused(lambda: A.native_layer_norm_backward(x, x, [4], mu, rs, None, None,
                                                 [True, False, False]),
            "aten.native_layer_norm_backward.default", "same mode")


def test_certified_refuses_an_unknown_backend_and_keyword_by_name():
    with pytest.raises(mojolike.Refusal, match="mojolike.torch.certified: backend"):
        mojolike.torch.certified(backend="gpu")
    with pytest.raises(mojolike.Refusal, match="mojolike.torch.certified: .*bogus"):
        mojolike.torch.certified(bogus=1)


def test_a_small_training_step_runs_under_the_mode_with_the_same_bits_on_both_cpu_backends():
    def step(backend):
        torch.manual_seed(0)
        lin, ln = torch.nn.Linear(6, 5), torch.nn.LayerNorm(5)
        x, y = torch.randn(4, 6), torch.tensor([0, 4, 2, 1])
        with mojolike.torch.certified(backend=backend) as mode:
            loss = F.cross_entropy(F.gelu(ln(lin(x)), approximate="tanh"), y)
            loss.backward()
        return [t.detach().numpy().tobytes() for t in (loss, lin.weight.grad, lin.bias.grad,
                                                       ln.weight.grad)], mode.calls
    numba, calls = step("cpu-numba")
    cffi, _ = step("cpu-cffi")
    assert numba == cffi
    for op in ("aten.addmm.default", "aten.native_layer_norm_backward.default",
               "aten.nll_loss_backward.default", "aten.gelu_backward.default"):
        assert calls.get(op, 0) >= 1, op


def test_rms_norm_decomposes_into_certified_ops_with_mojolikes_forward_bits():
    x0, w0 = rnd(4, 16), rnd(16, seed=1)

    def run(backend):
        x, w = T(x0).requires_grad_(), T(w0).requires_grad_()
        with mojolike.torch.certified(backend=backend) as mode:
            y = F.rms_norm(x, (16,), w, eps=1e-6)
            y.backward(torch.ones_like(y))
        assert "aten.rsqrt.default" in mode.calls and "aten.pow.Tensor_Scalar" in mode.calls
        return y.detach(), x.grad, w.grad
    y, dx, dw = run("cpu-numba")
    same(y, mojolike.rms_norm(x0, w0, 1e-6, **O))
    # the backward is torch's autograd formula over certified ops: deterministic (the same
    # bits on the other backend), not mojolike.rms_norm_backward's formula
    for got, want in zip((y, dx, dw), run("cpu-cffi")):
        same(got, want.numpy())
