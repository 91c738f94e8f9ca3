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
import io
import os
import tempfile
from dataclasses import dataclass
from fractions import Fraction

import fuzzing_files as ff
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
    """One fuzzed entry point. `weight` is its share of a run's cases relative to the others
    (the costly ones, which start processes or train, take fewer), `ci` the cases CI gives it,
    and `shrink` whether hypothesis may spend time shrinking a failure (minutes for a world of
    processes)."""
    name: str
    run: object  # run(draw) -> None
    weight: float = 1.0
    ci: int = 60
    shrink: bool = True


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
            akw = {"aligned": maybe(draw, st.sampled_from([None, False, True]))} \
                if draw(st.booleans()) else {}
            call(entry, lambda: opt.step_accumulated(mb, tokens, **akw), [g, params], opt)
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
        if draw(st.booleans()):  # the explicit opt-out of the microbatch-invariance promise
            kw["aligned"] = maybe(draw, st.sampled_from([None, False, True]))
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


def _mutated_file(draw, kind: str, members: list) -> tuple[bytes, bool | None]:
    """(the file's bytes, whether it must be refused: True, False, or None for either) for one
    drawn layout."""
    data, hostile = _layout(draw, kind, members)
    return data, hostile


def _layout(draw, kind: str, members: list):
    how = _LAST["how"] = draw(st.sampled_from(["honest", "overlap", "duplicate", "claims", "deflate", "renamed",
                                "huge_header", "missing", "extra", "huge_meta", "config"]))
    names = [n for n, _ in members]
    if how == "honest":
        return ff.honest(members), False
    if how == "overlap":
        copies = draw(st.integers(2, 300))
        pick = draw(st.sampled_from(["expected", "fresh"]))
        chain = [names[i % len(names)] if pick == "expected" else f"x{i}.npy" for i in range(copies)]
        if pick == "expected":  # each name once, then fresh ones: no duplicate hides the overlap
            chain = names[:copies] + [f"x{i}.npy" for i in range(copies - len(names[:copies]))]
        size = draw(st.sampled_from([1024, 65536]))
        return ff.overlapping(chain, ff.npy((size // 4,), body=bytes(size))), True
    if how == "duplicate":
        i = draw(st.integers(0, len(members) - 1))
        j = draw(st.integers(0, len(members)))
        return ff.honest(members[:j] + [members[i]] + members[j:]), True
    if how == "claims":  # one member's sizes claim far more than the file holds
        i = draw(st.integers(0, len(members) - 1))
        claimed = draw(st.sampled_from([2**31 - 1, 2**32 - 1, 10**8]))
        recs, central, at = [], [], 0
        for k, (n, d) in enumerate(members):
            rec = ff.local_record(n, d, claimed=claimed if k == i else None)
            size = claimed if k == i else len(d)
            central.append(ff.central_entry(n, at, size, size, 0))
            recs.append(rec)
            at += len(rec)
        return ff.zip_bytes(recs, central), True
    if how == "deflate":
        return ff.honest(members, method=8), True
    if how == "renamed":  # the central directory names a member its local header does not
        i = draw(st.integers(0, len(members) - 1))
        recs, central, at = [], [], 0
        for k, (n, d) in enumerate(members):
            rec = ff.local_record(n, d)
            central.append(ff.central_entry(names[(k + 1) % len(names)] if k == i else n, at,
                                            len(d), len(d), 0))
            recs.append(rec)
            at += len(rec)
        return ff.zip_bytes(recs, central), len(set(names)) > 1
    if how == "huge_header":  # a .npy header claiming a shape the member does not hold
        i = draw(st.integers(0, len(members) - 1))
        shape = draw(st.sampled_from([(2**40,), (2**20, 2**20), (2**62,), (3, 2**31)]))
        dtype = draw(st.sampled_from(["<f4", "<i8", "<U100000"]))
        return ff.honest([(n, ff.npy(shape, dtype, b"\0" * 64) if k == i else d)
                          for k, (n, d) in enumerate(members)]), True
    if how == "missing":
        i = draw(st.integers(0, len(members) - 1))
        # a state file's optional members (param_groups, flags) may go: then either outcome is
        # allowed, and the memory bound still holds
        return ff.honest(members[:i] + members[i + 1:]), True if kind == "checkpoint" else None
    if how == "extra":
        extra = (draw(st.sampled_from(["zz.npy", "param.extra.npy", "notes.txt", "kind2.npy"])),
                 ff.npy((2,), "<f4", bytes(8)))
        return ff.honest(members + [extra]), True
    if how == "huge_meta":  # a text member whose header claims gigabytes of characters
        target = "meta.npy" if kind == "checkpoint" else "kind.npy"
        return ff.honest([(n, ff.npy((100000,), "<U10000", b"a" * 64) if n == target else d)
                          for n, d in members]), True
    if kind != "checkpoint":
        return ff.honest(members), False
    # the checkpoint's JSON edited: sizes that the arrays do not have, or pieces out of step
    import json
    meta = json.loads(str(np.load(io.BytesIO(dict(members)["meta.npy"]))))
    field = _LAST["field"] = draw(st.sampled_from(["d_model", "d_hidden", "batch_size", "vocab", "seq_len",
                                  "step", "generator", "steps_done"]))
    value = draw(st.sampled_from([2**11, 2**16, 2**20, 2**40, 3]))
    if field in ("d_model", "d_hidden", "batch_size", "vocab", "seq_len"):
        if meta["config"][field] == value or (field == "batch_size" and value == 3):
            value = 2**20
        meta["config"][field] = value
    elif field == "step":
        meta["step"] = meta["step"] + 1
    elif field == "generator":
        meta["generator"] = dict(meta["generator"], counter=meta["generator"]["counter"] + value)
    else:
        meta["optimizer"] = dict(meta["optimizer"], t=meta["optimizer"]["t"] + 1)
    f = io.BytesIO()
    np.save(f, np.str_(json.dumps(meta, sort_keys=True)))
    # batch_size and seq_len shape no array: only a size past any memory budget must be refused
    hostile = True if field not in ("batch_size", "seq_len") or value == 2**40 else None
    return ff.honest([(n, f.getvalue() if n == "meta.npy" else d) for n, d in members]), hostile


_LAST: dict = {}  # the layout drawn last, named in a broken promise


def hostile_files(draw):
    """load_state and Trainer.load on archives laid out byte by byte: the honest ones load, every
    hostile one is refused by name, and no load's peak memory exceeds a few times the file."""
    from mojolike.training.trainer import Trainer
    kind = draw(st.sampled_from(["state", "checkpoint"]))
    with tempfile.TemporaryDirectory(prefix="mojolike-fuzz-") as folder:
        data, hostile = _mutated_file(draw, kind, ff.base_members(kind, _BASE_FOLDER))
        path = os.path.join(folder, "f.npz")
        with open(path, "wb") as f:
            f.write(data)
        entry, load = (("mojolike.load_state", lambda: mojolike.load_state(path)) if kind == "state"
                       else ("mojolike.train.Trainer.load",
                             lambda: Trainer.load(path, backend="cpu-numba")))
        out, peak = ff.peak_bytes(lambda: call(entry, load, []))
        if isinstance(out, BaseException):
            raise out
        if hostile is True and out is not None:
            raise Broken(f"{entry}: loaded a hostile file ({len(data)} bytes, {_LAST})")
        if hostile is False and out is None:
            raise Broken(f"{entry}: refused an honest file")
        bound = 8 * len(data) + (64 << 20 if kind == "checkpoint" and hostile is False else 4 << 20)
        if peak > bound:
            raise Broken(f"{entry}: peak memory {peak} bytes for a {len(data)}-byte file")


class _Interrupt(KeyboardInterrupt):
    """The injected Ctrl-C (a KeyboardInterrupt, so nothing may swallow it as an Exception)."""


# where a training step can be interrupted: (module, attribute) of a callable the step reaches
_STEP_POINTS = (("mojolike.training.tape", "Tape.backward"), ("mojolike.training.tape", "Tape.linear"),
                ("mojolike.training.tape", "Tape.reset_to"), ("mojolike.train", "accumulate_grads"),
                ("mojolike.train", "embedding_backward"), ("mojolike.train", "embedding"),
                ("mojolike.ops.rng", "Generator.next_stream"), ("mojolike.optim.outlier", "OutlierDetector.update"),
                ("mojolike.optim.scaler", "GradScaler.step"), ("mojolike.optim.scaler", "GradScaler.update"),
                ("mojolike.optim.base", "_Optimizer._step"), ("mojolike.train", "pairwise"))
_DIGESTS: dict = {}


def _interrupting(owner, name: str, at: int, after: bool):
    """Replace owner.name by a wrapper whose call number `at` raises _Interrupt, before or after
    the real call; returns a function that puts the original back."""
    real = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == at and not after:
            raise _Interrupt(f"before {name} call {at}")
        out = (real.__get__(args[0]) if isinstance(owner, type) else real)(
            *(args[1:] if isinstance(owner, type) else args), **kwargs)
        if calls[0] == at:
            raise _Interrupt(f"after {name} call {at}")
        return out

    setattr(owner, name, wrapper)
    return lambda: setattr(owner, name, real)


def interrupts(draw):
    """A Ctrl-C at a drawn point of a drawn step: the run, continued (in the same trainer, or
    saved and loaded), ends with the uninterrupted digest, and every checkpoint it wrote loads."""
    import importlib

    from mojolike.training.trainer import Trainer
    backend = draw(st.sampled_from(["cpu-numba", "cpu-cffi"]))
    cfg = ff.tiny_config()
    if backend not in _DIGESTS:
        ref = Trainer(cfg, backend=backend)
        ref.run()
        _DIGESTS[backend] = ref.digest()
    module, attr = draw(st.sampled_from([p for p in _STEP_POINTS]))
    owner = importlib.import_module(module)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part, None)
    if owner is None or not hasattr(owner, name):
        return  # this point does not exist in this version of the library
    t = Trainer(cfg, backend=backend)
    undo = _interrupting(owner, name, draw(st.integers(1, 12)), draw(st.booleans()))
    try:
        try:
            t.run()
        except _Interrupt:
            pass
    finally:
        undo()
    if draw(st.booleans()):
        with tempfile.TemporaryDirectory(prefix="mojolike-fuzz-") as folder:
            path_ = os.path.join(folder, "ckpt.npz")
            saved = call("mojolike.train.Trainer.save", lambda: t.save(path_), [])
            if saved is None:
                raise Broken("mojolike.train.Trainer.save: refused the state an interrupt left")
            t = call("mojolike.train.Trainer.load", lambda: Trainer.load(path_, backend=backend), [])
            if t is None:
                raise Broken("mojolike.train.Trainer.load: refused the checkpoint of an "
                             "interrupted run")
    try:
        t.run()
    except Exception as e:
        raise Broken(f"mojolike.train.Trainer.run: after an interrupt at {attr}: "
                     f"{type(e).__name__}: {e}") from e
    if t.digest() != _DIGESTS[backend]:
        raise Broken(f"mojolike.train.Trainer: interrupted at {attr}, the continued run's digest "
                     f"{t.digest()} differs from the uninterrupted {_DIGESTS[backend]}")


def distributed_failures(draw):
    """A two-rank gloo world runs a drawn scenario of all-reduces and steps with one fault per
    call (a bad argument, an inf, a transport call that raises, a rank that exits or stalls):
    what returns has the one-process bits, what raises is Refusal or CollectiveFailed with the
    gradients untouched, and no rank hangs (tests/fuzzing_dist.py)."""
    import fuzzing_dist as fd
    from mojolike.contracts.ranks import launch
    scenario = [[draw(st.booleans()), draw(st.sampled_from(fd.FAULTS)), draw(st.integers(0, 1)),
                 draw(st.integers(1, 6))] for _ in range(draw(st.integers(1, 3)))]
    results = launch(2, f"{fd.__file__}:job_scenario", {"scenario": scenario}, timeout=90)
    broken = fd.check(scenario, results, 2)
    if broken:
        raise Broken(f"mojolike.distributed: scenario {scenario}: {broken}")


_BASE_FOLDER = tempfile.mkdtemp(prefix="mojolike-fuzz-base-")


TARGETS = [Target(f.__name__, f) for f in (sums, crmath, cross_entropy, optimizer, schedule,
                                          generator, philox, gradients, state_files)] + [
    Target("hostile_files", hostile_files, weight=0.25, ci=40),
    Target("interrupts", interrupts, weight=0.05, ci=12),
    Target("distributed_failures", distributed_failures, weight=0.002, ci=2, shrink=False)]
