"""Fuzzing every public entry point: arguments drawn from good, odd and hostile values.

Each `Target` draws the arguments of one entry point (`draw` is hypothesis's
`data.draw`), calls it, and checks the library's promise about bad input: the
call returns, or it raises `Refusal` whose message starts with the entry point,
and then every input buffer and every attribute of the object it was called on
is byte-identical to before. Anything else raises `Broken`. Used by
tests/test_fuzz.py (a bounded budget in CI) and benchmarks/fuzz.py (10^5 cases
and more).
"""
from __future__ import annotations

import array
import os
import tempfile
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

import mojolike
from mojolike import Refusal

BACKENDS = ("oracle", "cpu-numba", "cpu-cffi")


class Broken(AssertionError):
    """The library broke its promise about a bad input."""


# -- values ----------------------------------------------------------------------------------
_ODD_FLOATS = [0.0, -0.0, 1e-45, -1e-40, 3.4e38, 3.5e38, 1e300, float("inf"), float("-inf"),
               float("nan"), 1 - 2**-25, 2**-149, 0.5, 1.0, -1.0, 2.0]
NUMBERS = st.one_of(
    st.sampled_from(_ODD_FLOATS), st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-2**70, 2**70), st.integers(-3, 100),
    st.sampled_from([np.float32(0.1), np.float64(0.9), np.float16(2.0), np.int64(3), np.uint8(7),
                     Fraction(1, 3), 10**400]),
)
JUNK = st.one_of(
    st.none(), st.booleans(), st.sampled_from([np.bool_(True), np.bool_(False)]),
    st.text(max_size=4), st.binary(max_size=4), st.sampled_from(["0.1", "False", b"1", "fro", "nan"]),
    st.lists(st.integers(-2, 5), max_size=3), st.tuples(), st.dictionaries(st.text(max_size=2),
                                                                          st.integers(), max_size=2),
    st.just(object()), st.just(1j),
)
VALUES = st.one_of(NUMBERS, NUMBERS, JUNK)
# huge integers that must be refused (2^31-element draws are legal, and only slow)
SMALL_INTS = st.one_of(st.integers(-2, 70), st.sampled_from([2**40, 2**64, -2**63, 2**64 - 1]))
DTYPES = ["<f4", "<f4", "<f4", ">f4", "<f8", "<f2", "<i4", "<u4", "<i8", "|b1"]
KEYWORDS = st.dictionaries(st.sampled_from(["foo", "closure", "dim", "dtype", "out", "device",
                                            "inplace", "training", "strict", "set_to_none"]),
                           VALUES, max_size=1)


@st.composite
def arrays(draw, max_size: int = 24, shape=None):
    """numpy arrays of several dtypes and layouts (strided, read-only, empty), float32 mostly;
    or an array.array / memoryview / list standing in for one."""
    dt = np.dtype(draw(st.sampled_from(DTYPES)))
    if shape is None:
        ndim = draw(st.integers(0, 3))
        shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
        if int(np.prod(shape)) > max_size:
            shape = (max_size,)
    n = int(np.prod(shape))
    vals = draw(st.lists(st.one_of(st.floats(width=32, allow_subnormal=True),
                                   st.sampled_from(_ODD_FLOATS[:12])), min_size=n, max_size=n))
    with np.errstate(all="ignore"):
        a = np.array(vals, dtype=np.float64).astype(dt).reshape(shape)
    form = draw(st.sampled_from(["plain"] * 6 + ["strided", "readonly", "memoryview", "list",
                                                  "array.array"]))
    if form == "strided" and a.ndim >= 1 and a.shape[-1] > 1:
        a = a[..., ::2]
    elif form == "readonly":
        a.flags.writeable = False
    elif form == "memoryview" and a.dtype == np.float32 and a.ndim >= 1:
        return memoryview(a)
    elif form == "list":
        return a.tolist()
    elif form == "array.array" and a.dtype == np.float32 and a.ndim == 1:
        return array.array("f", a.tolist())
    return a


def f32_vector(n_max: int = 24):
    return st.integers(1, n_max).flatmap(
        lambda n: st.lists(st.floats(width=32, allow_subnormal=True, allow_nan=False,
                                     allow_infinity=False), min_size=n, max_size=n).map(
            lambda v: np.array(v, np.float32)))


def maybe(draw, good, bad=VALUES, p_bad: float = 0.25):
    """Usually a good value, sometimes a bad one."""
    return draw(st.one_of(good, bad)) if draw(st.floats(0, 1)) < p_bad else draw(good)


# -- snapshots -------------------------------------------------------------------------------
def _bytes_of(x):
    if isinstance(x, np.ndarray):
        return ("nd", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, (memoryview, array.array)):
        try:
            return ("buf", bytes(x))
        except ValueError:
            return ("released",)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [_bytes_of(v) for v in x])
    if isinstance(x, dict):
        return ("dict", sorted((str(k), _bytes_of(v)) for k, v in x.items()))
    return ("obj", id(x))


def _attrs(obj):
    if obj is None:
        return None
    out = {}
    for k, v in sorted(vars(obj).items()):
        if k in ("_k", "_lock", "_reg", "lr_schedule"):
            continue
        out[k] = _bytes_of(v) if isinstance(v, (np.ndarray, list, tuple, dict)) else repr(v)
    if hasattr(obj, "state_dict"):
        out["state_dict"] = _bytes_of(obj.state_dict())
    return out


def call(entry: str, fn, inputs: list, owner=None):
    """Run fn(); on a Refusal, check its message and that nothing changed; anything else but a
    return is Broken. Returns the result, or None when refused."""
    before, attrs = [_bytes_of(x) for x in inputs], _attrs(owner)
    try:
        return fn()
    except Refusal as e:
        if not str(e).startswith(entry):
            raise Broken(f"{entry}: the refusal does not start with the entry point: {e}") from e
        if [_bytes_of(x) for x in inputs] != before:
            raise Broken(f"{entry}: refused ({e}) but an input changed") from e
        if _attrs(owner) != attrs:
            raise Broken(f"{entry}: refused ({e}) but an attribute of the object changed") from e
        return None
    except Exception as e:
        raise Broken(f"{entry}: raised {type(e).__name__}: {e}") from e


# -- targets -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    name: str
    run: object  # run(draw) -> None


def _backend(draw):
    return draw(st.sampled_from(BACKENDS))


def sums(draw):
    name = draw(st.sampled_from(["fold", "sumsq", "dot"]))
    x = draw(st.one_of(arrays(), f32_vector(), VALUES))
    if name == "dot":  # the same buffer twice, or another (no st.just: a memoryview cannot hash)
        args = [x, x if draw(st.booleans()) else draw(arrays())]
    else:
        args = [x]
    kw = draw(KEYWORDS)
    call(f"mojolike.{name}", lambda: getattr(mojolike, name)(*args, backend=_backend(draw), **kw), args)


def crmath(draw):
    name = draw(st.sampled_from(["expf", "logf", "sinpif", "cospif"]))
    x = draw(st.one_of(arrays(), f32_vector(), VALUES))
    kw = draw(KEYWORDS)
    call(f"mojolike.math.{name}", lambda: getattr(mojolike.math, name)(x, backend=_backend(draw), **kw),
         [x])


def cross_entropy(draw):
    n, v = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    logits = draw(st.one_of(arrays(shape=(n, v)), arrays(shape=(n, v)), VALUES, arrays()))
    targets = draw(st.one_of(st.lists(st.integers(-101, 7), min_size=n, max_size=n),
                             st.lists(st.integers(-2**65, 2**65), max_size=4), arrays(), VALUES))
    kw = {}
    for name, good in (("ignore_index", st.sampled_from([-100, 0, 2])),
                       ("reduction", st.sampled_from(["mean", "sum", "none"])),
                       ("label_smoothing", st.sampled_from([0.0, 0.1, 0.5])),
                       ("num_items", st.sampled_from([None, 1, 3])),
                       ("return_grad", st.booleans())):
        if draw(st.booleans()):
            kw[name] = maybe(draw, good)
    kw.update(draw(KEYWORDS))
    call("mojolike.cross_entropy",
         lambda: mojolike.cross_entropy(logits, targets, backend=_backend(draw), **kw), [logits, targets])


def _hyper(draw, kind):
    kw = {"lr": maybe(draw, st.sampled_from([1e-3, 0.1, 0.5]))}
    options = {"SGD": ("momentum", "dampening", "weight_decay", "nesterov", "maximize"),
               "Adam": ("betas", "eps", "weight_decay", "maximize", "amsgrad", "foreach"),
               "AdamW": ("betas", "eps", "weight_decay", "maximize", "decoupled_weight_decay")}[kind]
    good = {"momentum": st.sampled_from([0.0, 0.9]), "dampening": st.sampled_from([0.0, 0.1]),
            "weight_decay": st.sampled_from([0.0, 0.01]), "nesterov": st.booleans(),
            "maximize": st.booleans(), "betas": st.sampled_from([(0.9, 0.999), (0.5, 0.9)]),
            "eps": st.sampled_from([1e-8, 1e-6]), "amsgrad": st.just(False),
            "foreach": st.none(), "decoupled_weight_decay": st.just(True)}
    for name in options:
        if draw(st.booleans()):
            kw[name] = maybe(draw, good[name])
    if draw(st.floats(0, 1)) < 0.1:
        kw["accumulation_steps"] = draw(st.one_of(st.sampled_from([1, 2, 4]), VALUES))
    return kw


def optimizer(draw):
    kind = draw(st.sampled_from(["SGD", "Adam", "AdamW"]))
    entry = f"mojolike.{kind}"
    shapes = draw(st.lists(st.sampled_from([(3,), (2, 2), (5,), (1,)]), min_size=1, max_size=3))
    params = [np.full(s, 0.5, np.float32) for s in shapes]
    p_in = draw(st.one_of(st.just(params), st.just(params), arrays(), VALUES))
    kw = _hyper(draw, kind)
    kw.update(draw(KEYWORDS))
    opt = call(entry, lambda: getattr(mojolike, kind)(p_in, backend=_backend(draw), **kw), [p_in])
    if opt is None:
        return
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["step", "step", "step", "zero_grad", "load_state_dict",
                                     "step_accumulated", "state_dict"]))
        g = _grads(draw, opt)
        if what == "step":
            kw = {}
            if draw(st.booleans()):
                kw["max_norm"] = maybe(draw, st.sampled_from([None, 1.0, 0.1, 0.0]))
            kw.update(draw(KEYWORDS))
            call(entry, lambda: opt.step(g, **kw), [g, params], opt)
        elif what == "zero_grad":
            call(entry, lambda: opt.zero_grad(g), [params], opt)
        elif what == "step_accumulated":
            tokens = draw(st.one_of(st.lists(st.integers(1, 4096), min_size=1, max_size=2), VALUES))
            mb = [g] * draw(st.integers(1, 2))
            call(entry, lambda: opt.step_accumulated(mb, tokens), [g, params], opt)
        elif what == "load_state_dict":
            call(entry, lambda: opt.load_state_dict(_mangled_state(draw, opt.state_dict())), [params],
                 opt)
        else:
            opt.state_dict()


def _grads(draw, opt):
    shapes = opt._reg.shapes
    choice = draw(st.integers(0, 9))
    if choice < 6:
        g = [np.full(s, 0.25, np.float32) for s in shapes]
        if choice == 5:
            g[0].reshape(-1)[0] = draw(st.sampled_from([np.inf, np.nan, 3e38, 1e-45]))
        return g if opt._reg.listed else g[0]
    if choice == 6:
        return [draw(arrays()) for _ in shapes]
    return draw(st.one_of(arrays(), VALUES))


def _mangled_state(draw, state):
    if draw(st.booleans()):
        return state
    key = draw(st.sampled_from(sorted(state) + ["extra"]))
    value = draw(st.one_of(VALUES, st.lists(arrays(), max_size=3)))
    return dict(state, **{key: value}) if draw(st.booleans()) else value


def schedule(draw):
    kind = draw(st.sampled_from(["ConstantLR", "WarmupLinearLR", "WarmupCosineLR"]))
    entry = f"mojolike.{kind}"
    args = [maybe(draw, st.sampled_from([1e-3, 0.5])), maybe(draw, st.integers(0, 5), SMALL_INTS)]
    if kind != "ConstantLR" or draw(st.booleans()):
        args.append(maybe(draw, st.integers(5, 50), SMALL_INTS))
    kw = draw(KEYWORDS)
    s = call(entry, lambda: getattr(mojolike, kind)(*args, backend=_backend(draw), **kw), [])
    if s is None:
        return
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["lr_at", "bits_at", "lr_values", "from_config"]))
        kw = draw(KEYWORDS)
        if what in ("lr_at", "bits_at"):
            t = draw(st.one_of(st.integers(-5000, 5000), SMALL_INTS, VALUES))
            call(entry, lambda: getattr(s, what)(t, **kw), [], s)
        elif what == "lr_values":
            n = draw(st.one_of(st.integers(-2, 64), SMALL_INTS, VALUES))
            call(entry, lambda: s.lr_values(n, **kw), [], s)
        else:
            d = dict(s.config())
            if draw(st.booleans()):
                d[draw(st.sampled_from(sorted(d) + ["last_epoch"]))] = draw(VALUES)
            d = d if draw(st.floats(0, 1)) < 0.9 else draw(VALUES)
            call(f"mojolike.{kind}.from_config", lambda: type(s).from_config(d, **kw), [])


def generator(draw):
    seed = maybe(draw, st.integers(0, 2**64 - 1), SMALL_INTS)
    g = call("mojolike.Generator", lambda: mojolike.Generator(seed, backend=_backend(draw)), [])
    if g is None:
        return
    shape = st.one_of(st.integers(1, 20), st.tuples(st.integers(1, 4), st.integers(1, 4)), SMALL_INTS,
                      VALUES, st.tuples(SMALL_INTS, SMALL_INTS))
    real = st.sampled_from([0.0, 1.0, -2.5])
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["uniform", "normal", "kaiming_uniform", "kaiming_normal",
                                     "xavier_uniform", "xavier_normal", "dropout", "load_state_dict"]))
        kw = draw(KEYWORDS)
        if draw(st.booleans()):
            kw["stream"] = maybe(draw, st.integers(0, 5), SMALL_INTS)
        entry = f"mojolike.Generator.{what}"
        if what in ("uniform", "normal"):
            args = [draw(shape), maybe(draw, real), maybe(draw, st.sampled_from([1.0, 2.0]))]
            if draw(st.booleans()):
                kw["offset"] = maybe(draw, st.integers(0, 9), SMALL_INTS)
            call(entry, lambda: getattr(g, what)(*args, **kw), [], g)
        elif what.startswith(("kaiming", "xavier")):
            args = [draw(shape), maybe(draw, st.integers(1, 9), SMALL_INTS)]
            if what.startswith("xavier"):
                args.append(maybe(draw, st.integers(1, 9), SMALL_INTS))
            if draw(st.booleans()):
                kw["gain"] = maybe(draw, st.sampled_from([None, 1.0, 2.0]))
            kw.pop("offset", None)
            call(entry, lambda: getattr(g, what)(*args, **kw), [], g)
        elif what == "dropout":
            x = draw(st.one_of(f32_vector(), arrays(), VALUES))
            p = maybe(draw, st.sampled_from([0.0, 0.1, 0.5]))
            res = call(entry, lambda: g.dropout(x, p, **kw), [x], g)
            if res is not None:
                dy = draw(st.one_of(st.just(np.ones(res[0].shape, np.float32)), arrays(), VALUES))
                key = res[1] if draw(st.booleans()) else draw(st.one_of(VALUES, st.just(res[1][:4])))
                call("mojolike.Generator.dropout_backward", lambda: g.dropout_backward(dy, key), [dy], g)
        else:
            st_ = draw(st.one_of(st.just(g.state_dict()), VALUES,
                                 st.fixed_dictionaries({"seed": VALUES, "counter": VALUES})))
            call("mojolike.Generator.load_state_dict", lambda: g.load_state_dict(st_), [], g)


def philox(draw):
    c = draw(st.one_of(st.lists(st.integers(-1, 2**33), min_size=4, max_size=4), arrays(), VALUES,
                       st.lists(st.lists(st.integers(0, 9), max_size=5), max_size=3)))
    k = draw(st.one_of(st.lists(st.integers(-1, 2**33), min_size=2, max_size=2), arrays(), VALUES))
    kw = draw(KEYWORDS)
    call("mojolike.random.philox4x32_10",
         lambda: mojolike.random.philox4x32_10(c, k, backend=_backend(draw), **kw), [c, k])


def gradients(draw):
    what = draw(st.sampled_from(["clip", "accumulate", "aligned"]))
    if what == "clip":
        g = draw(st.one_of(st.lists(f32_vector(8), min_size=1, max_size=3), arrays(), VALUES))
        kw = {}
        for name, good in (("norm_type", st.just(2.0)), ("error_if_nonfinite", st.just(True)),
                           ("foreach", st.none())):
            if draw(st.booleans()):
                kw[name] = maybe(draw, good, p_bad=0.5)
        kw.update(draw(KEYWORDS))
        m = maybe(draw, st.sampled_from([1.0, 0.1]))
        call("mojolike.clip_grad_norm_",
             lambda: mojolike.clip_grad_norm_(g, m, backend=_backend(draw), **kw), [g])
    elif what == "accumulate":
        shape = draw(st.sampled_from([(3,), (2, 2)]))
        mb = draw(st.one_of(st.lists(st.just(np.ones(shape, np.float32)), min_size=1, max_size=3),
                            st.lists(arrays(), min_size=1, max_size=2), VALUES))
        tokens = draw(st.one_of(st.lists(st.integers(1, 5000), min_size=1, max_size=3), VALUES))
        kw = draw(KEYWORDS)
        call("mojolike.accumulate_grads",
             lambda: mojolike.accumulate_grads(mb, tokens, backend=_backend(draw), **kw), [mb])
    else:
        tokens = draw(st.one_of(st.lists(st.one_of(st.integers(1, 5000), SMALL_INTS,
                                                   st.sampled_from([2**33, 2**40])),
                                         min_size=1, max_size=6), VALUES))
        steps = draw(st.one_of(st.just(len(tokens) if isinstance(tokens, list) else 1), VALUES))
        call("mojolike.accumulation_is_aligned",
             lambda: mojolike.accumulation_is_aligned(tokens, steps), [tokens])


def state_files(draw):
    opt = mojolike.SGD([np.ones(3, np.float32)], momentum=0.9, backend="cpu-numba")
    opt.step([np.ones(3, np.float32)])
    with tempfile.TemporaryDirectory(prefix="mojolike-fuzz-") as folder:
        path = os.path.join(folder, draw(st.sampled_from(["a", "b.npz"])))
        if draw(st.booleans()):
            state = _mangled_state(draw, opt.state_dict())
            p = draw(st.one_of(st.just(path), st.just(path), VALUES))
            if isinstance(p, str) and p:
                p = os.path.join(folder, os.path.basename(p) or "x")  # never write outside the folder
            call("mojolike.save_state", lambda: mojolike.save_state(p, state), [state])
            return
        mojolike.save_state(path, opt.state_dict())
        target = path if path.endswith(".npz") else path + ".npz"
        choice = draw(st.integers(0, 3))
        data = open(target, "rb").read()
        if choice == 1:
            data = draw(st.binary(max_size=200))
        elif choice == 2:
            cut = draw(st.integers(0, len(data) - 1))
            data = data[:cut] + bytes([draw(st.integers(0, 255))]) + data[cut + 1:]
        elif choice == 3:
            data = data[:draw(st.integers(0, len(data)))]
        with open(target, "wb") as f:
            f.write(data)
        call("mojolike.load_state", lambda: mojolike.load_state(path), [])


TARGETS = [Target(f.__name__, f) for f in (sums, crmath, cross_entropy, optimizer, schedule,
                                          generator, philox, gradients, state_files)]
