"""Counter-based random numbers: Philox4x32-10, `Generator`, uniform and normal draws,
initializers and dropout.

The arithmetic is `mojolike.oracles.rng` (contracts/rng.md). A value is a
function of (seed, stream, position) alone: element i of a draw on stream s is
word i mod 4 of Philox4x32-10 with counter (i div 4, s) and key seed, so a draw
split into pieces with offsets gives the unsplit draw's bits, on every backend
and thread count.

Kernels (family "rng", every backend; declared by `mojolike.core.interfaces.rng.RngKernels`):

    philox_into(counters (n, 4) uint32, key0, key1, out (n, 4) uint32) -> None
    uniform_into(key0, key1, stream, offset, low, high, out) -> 0
    normal_into(key0, key1, stream, offset, mean, std, out) -> undecided
    dropout_into(x, key0, key1, stream, offset, p, scale, y) -> 0

keys are the two 32-bit key words, stream and offset integers below 2^64,
low/high/mean/std/p/scale float32, arrays flat float32; element i is stream
position offset + i. dropout_backward is dropout_into with dy in place of x.
normal_into returns how many slots it left UNDECIDED (the pattern 0x7FA00DAD:
logf, sinpif or cospif could not be decided by the fast path; none of the 2^24
values of u1 or of u2 is, on any kernel backend); `Generator.normal` gives those
slots the oracle's value.

Reproducibility: every value is a function of (seed, stream, position) and the
binary32 parameters alone (contracts/rng.md).
"""
from __future__ import annotations

import math
import threading
from typing import NamedTuple

import numpy as np

from ..core import checks, fallbacks, registry
from ..core.checks import as_f32, shape_of
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..oracles import f32
from ..oracles import rng as spec
from .crmath import UNDECIDED

TWO64 = spec.TWO64
FAMILY = "rng"


def _u64(entry: str, name: str, v, what: str = "an integer in [0, 2^64)") -> int:
    return checks.integer(entry, name, v, low=0, high=TWO64 - 1, what=what)


def _f32(entry: str, name: str, v) -> float:
    """The binary32 value nearest the real v (an int or Fraction is rounded once, exactly)."""
    return checks.real32(entry, name, v)


def _shape(entry: str, shape) -> tuple[tuple[int, ...], int]:
    return checks.shape(entry, "shape", shape)


def _std(entry: str, name: str, v) -> float:
    """A standard deviation: a finite real >= 0 (refused below 0 before rounding, so -1e-46
    is refused rather than taken as -0.0), rounded to binary32."""
    if checks.exact(entry, name, v) < 0:
        refuse(entry, name, "is negative; a standard deviation must be >= 0", value=v)
    return checks.real32(entry, name, v)


def _fan(entry: str, name: str, v) -> int:
    return checks.integer(entry, name, v, low=1, what="a positive integer, a count of inputs or "
                                                      "outputs")


def _gain(entry: str, gain) -> float:
    """A given gain: a finite real >= 0, rounded to binary32."""
    if gain is None:
        refuse(entry, "gain", "must be a real number >= 0 here (only the kaiming initializers have "
                              "a default, sqrt(2))", value=None)
    return checks.real32(entry, "gain", gain, low=0.0, what=">= 0 (the sign of a symmetric draw "
                                                            "carries no information)")


def _positions(entry: str, offset, n: int) -> int:
    offset = _u64(entry, "offset", offset, "a non-negative integer below 2^64")
    if offset + n > TWO64:
        refuse(entry, "offset", f"with {n} elements runs past stream position 2^64; a draw covers "
                                f"positions below 2^64 only", value=offset)
    return offset


def _dropout_p(entry: str, p) -> float:
    return checks.real32(entry, "p", p, low=0.0, high=1.0, high_open=True, what="in [0, 1)")


class DropoutKey(NamedTuple):
    """What dropout drew: replaying it with `Generator.dropout_backward` gives the same mask."""

    seed: int
    stream: int
    offset: int
    p: float  # the binary32 value of p
    n: int


class Generator:
    """Philox4x32-10 streams keyed by a 64-bit seed: the same bits on every backend.

    Key (seed mod 2^32, seed >> 32). A stream counter s starts at 0; every draw
    without `stream=` uses stream s and then increments it (`next_stream()`
    returns s and increments). Element i of a draw on stream s, from position
    `offset`, is word (offset + i) mod 4 of Philox(counter = (b mod 2^32, b >> 32,
    s mod 2^32, s >> 32), key), b = (offset + i) div 4.

    `uniform` gives low + (high - low) u in float32 with u = (w >> 8) 2^-24
    (`low` and `high` rounded to float32 first; a value can round to `high`, as in
    torch). `normal` gives mean + std z, z = sqrt(-2 logf(u1)) cospif(u2) (even
    positions) or sinpif(u2) (odd), Box-Muller on a block's word pairs (clause 4).
    `kaiming_uniform`, `kaiming_normal`, `xavier_uniform`, `xavier_normal` are
    uniform(-bound, bound) and normal(0, std) with torch's bound and std, each the
    float32 nearest its exact value. `dropout(x, p)` keeps element i when its u >= p
    and returns x * float32(1 / (1 - p)) there, x * 0.0 elsewhere, with a key that
    `dropout_backward(dy, key)` replays.

    Parameters: `seed` an integer in [0, 2^64); `backend`, `numeric_mode` as in
    `mojolike.backends` (every draw of this generator uses them).

    Reproducibility: a value depends on (seed, stream, position) alone, never on
    threads, chunking or the device; a draw split into pieces with offsets equals
    the unsplit draw. `state_dict()` ({'seed', 'counter'}) restores the sequence.
    torch's and numpy's generators give other values (another mapping, other bits).

    >>> g = Generator(0, backend="oracle")
    >>> g.uniform(3).tolist()
    [0.3990464210510254, 0.8805201649665833, 0.7357127666473389]
    >>> g.state_dict()
    {'seed': 0, 'counter': 1}
    >>> g.uniform(3, stream=0).tolist() == Generator(0, backend="oracle").uniform(3).tolist()
    True
    >>> y, key = g.dropout(np.ones(4, np.float32), 0.5)
    >>> y.tolist(), key
    ([2.0, 2.0, 0.0, 2.0], DropoutKey(seed=0, stream=1, offset=0, p=0.5, n=4))
    >>> g.dropout_backward(np.full(4, 3, np.float32), key).tolist()
    [6.0, 6.0, 0.0, 6.0]
    """

    @entry_point()
    def __init__(self, seed, *, backend=None, numeric_mode=None, entry, **unknown):
        self._seed = _u64(entry, "seed", seed)
        registry.resolve(entry, backend, numeric_mode)  # refuse an unknown name now, not at a draw
        self._backend, self._mode = backend, numeric_mode
        self._counter = 0
        self._lock = threading.Lock()

    @property
    def seed(self) -> int:
        return self._seed

    def __repr__(self) -> str:
        return f"Generator(seed={self._seed}, counter={self._counter})"

    def _check_not_exhausted(self, entry: str) -> None:
        if self._counter >= TWO64:
            refuse(entry, "stream counter", "is exhausted: all 2^64 streams of this seed are "
                                            "used; pass stream= explicitly or use another seed")

    def _stream(self, entry: str, stream) -> int | None:
        """The explicit stream, validated; None: the draw takes the counter's stream."""
        if stream is None:
            self._check_not_exhausted(entry)
            return None
        return _u64(entry, "stream", stream)

    def _take(self, entry: str, stream: int | None) -> int:
        """The stream of a draw whose arguments are all validated (the counter moves here)."""
        if stream is not None:
            return stream
        with self._lock:
            self._check_not_exhausted(entry)
            s = self._counter
            self._counter += 1
            return s

    def _kernels(self, entry: str):
        return registry.kernels(entry, FAMILY, self._backend, self._mode)

    @entry_point()
    def next_stream(self, *, entry, **unknown) -> int:
        """The current stream counter s; increments it (the stream is then the caller's)."""
        return self._take(entry, self._stream(entry, None))

    @entry_point()
    def state_dict(self, **unknown) -> dict:
        """{'seed': seed, 'counter': s}: the whole state."""
        return {"seed": self._seed, "counter": self._counter}

    @entry_point()
    def load_state_dict(self, state, *, entry, **unknown) -> None:
        """Restore a `state_dict()` (seed and counter; counter 2^64 is an exhausted generator)."""
        if not isinstance(state, dict) or set(state) != {"seed", "counter"}:
            got = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
            refuse(entry, "state", f"must be a dict with exactly the keys 'seed' and 'counter', "
                                   f"got {got}")
        seed = _u64(entry, "seed", state["seed"])
        c = checks.integer(entry, "counter", state["counter"], low=0, high=TWO64)
        with self._lock:
            self._seed, self._counter = seed, c

    @entry_point()
    def uniform(self, shape, low=0.0, high=1.0, *, stream=None, offset=0, entry,
                **unknown) -> np.ndarray:
        """A float32 array of `shape`: low + (high - low) u, u = (w >> 8) 2^-24 (clause 3).

        low <= high, both finite, rounded to float32 first (d = high - low is
        float32 too and must not overflow); `stream` (default: the next) and
        `offset` (the first element's stream position) as in the class docstring.

        >>> Generator(7, backend="oracle").uniform((2, 2), -1.0, 1.0).tolist()
        [[0.9091942310333252, 0.5003043413162231], [-0.7716453075408936, -0.8286843299865723]]
        """
        dims, n = _shape(entry, shape)
        lo, hi = _f32(entry, "low", low), _f32(entry, "high", high)
        if lo > hi:
            refuse(entry, "low", f"is above high={high!r}; uniform needs low <= high", value=low)
        if math.isinf(f32.sub(hi, lo)):
            refuse(entry, "high - low", f"overflows float32 (low={low!r}, high={high!r}); the "
                                         f"width of the range must be a finite float32 value")
        return self._uniform(entry, dims, n, lo, hi, stream, offset)

    def _uniform(self, entry: str, dims, n: int, lo: float, hi: float, stream, offset) -> np.ndarray:
        """The draw, once shape, low and high (binary32 values) are validated."""
        offset = _positions(entry, offset, n)
        s = self._stream(entry, stream)
        k = self._kernels(entry)
        out = checks.empty(entry, "shape", dims)
        s = self._take(entry, s)
        key0, key1 = spec.key_of(self._seed)
        k.uniform_into(key0, key1, s, offset, np.float32(lo), np.float32(hi), out.reshape(-1))
        return out

    @entry_point()
    def normal(self, shape, mean=0.0, std=1.0, *, stream=None, offset=0, entry,
               **unknown) -> np.ndarray:
        """A float32 array of `shape`: mean + std z, z standard normal by Box-Muller (clause 4).

        For stream position q (the pair (w0, w1) of block q div 4 when q mod 4 is 0
        or 1, (w2, w3) otherwise): u1 = ((w_a >> 8) + 1) 2^-24, u2 = (w_b >> 8) 2^-23,
        r = sqrt(-2 logf(u1)), z = r cospif(u2) for even q and r sinpif(u2) for odd
        q, then mean + std z; every step float32, logf/sinpif/cospif correctly
        rounded. `mean` finite and `std` finite and >= 0, both rounded to float32
        first; `stream` and `offset` as in `uniform`. The position, not the element
        index, picks cos or sin, so a draw split in pieces with offsets equals the
        unsplit draw. |z| < 5.77; std * z can overflow float32 for std above
        about 5.9e37 (it gives +-inf, as IEEE says).

        >>> g = Generator(0, backend="oracle")
        >>> g.normal(4).tolist()
        [0.9911374449729919, -0.9246627688407898, -0.6176090836524963, -0.48206835985183716]
        >>> g.normal((1, 2), 10.0, 0.5, stream=0, offset=2).tolist()   # positions 2, 3 of stream 0
        [[9.691195487976074, 9.758965492248535]]
        """
        dims, n = _shape(entry, shape)
        # contracts/rng.md clause 4: a -0.0 mean is taken as +0.0
        mu, sd = _f32(entry, "mean", mean) + 0.0, _std(entry, "std", std)
        return self._normal(entry, dims, n, mu, sd, stream, offset)

    def _normal(self, entry: str, dims, n: int, mu: float, sd: float, stream, offset) -> np.ndarray:
        """The draw, once shape, mean and std (binary32 values) are validated; undecided
        slots get the oracle's value."""
        offset = _positions(entry, offset, n)
        s = self._stream(entry, stream)
        k = self._kernels(entry)
        out = checks.empty(entry, "shape", dims)
        s = self._take(entry, s)
        key0, key1 = spec.key_of(self._seed)
        flat = out.reshape(-1)
        undecided = int(k.normal_into(key0, key1, s, offset, np.float32(mu), np.float32(sd), flat))
        _finish_normal(flat, undecided, self._seed, s, offset, mu, sd)
        return out

    @entry_point()
    def kaiming_uniform(self, shape, fan_in, gain=None, *, stream=None, entry,
                        **unknown) -> np.ndarray:
        """uniform(shape, -bound, bound), bound = gain sqrt(3 / fan_in) (torch's kaiming_uniform_).

        `gain` None is torch's default for relu / leaky_relu(0), sqrt(2), taken
        exactly: bound = float32(sqrt(6 / fan_in)). A given gain (finite, >= 0) is
        rounded to float32 first; the bound is the float32 nearest the exact
        gain sqrt(3 / fan_in) (clause 5), never a float pow or sqrt.

        >>> Generator(0, backend="oracle").kaiming_uniform(3, fan_in=6).tolist()    # bound 1.0
        [-0.20190715789794922, 0.7610403299331665, 0.47142553329467773]
        """
        dims, n = _shape(entry, shape)
        fan_in = _fan(entry, "fan_in", fan_in)
        g = None if gain is None else _gain(entry, gain)
        bound = spec.kaiming_uniform_bound(fan_in, g)
        return self._symmetric(entry, dims, n, bound, gain, stream)

    @entry_point()
    def kaiming_normal(self, shape, fan_in, gain=None, *, stream=None, entry,
                       **unknown) -> np.ndarray:
        """normal(shape, 0, std), std = gain / sqrt(fan_in) (torch's kaiming_normal_).

        `gain` None is sqrt(2), exactly: std = float32(sqrt(2 / fan_in)); a given
        gain is rounded to float32 first; std is the float32 nearest the exact value.

        >>> Generator(0, backend="oracle").kaiming_normal(2, fan_in=8).tolist()    # std 0.5
        [0.49556872248649597, -0.4623313844203949]
        """
        dims, n = _shape(entry, shape)
        fan_in = _fan(entry, "fan_in", fan_in)
        g = None if gain is None else _gain(entry, gain)
        sd = spec.kaiming_normal_std(fan_in, g)
        return self._normal(entry, dims, n, 0.0, sd, stream, 0)  # sd <= gain: finite

    @entry_point()
    def xavier_uniform(self, shape, fan_in, fan_out, gain=1.0, *, stream=None, entry,
                       **unknown) -> np.ndarray:
        """uniform(shape, -bound, bound), bound = gain sqrt(6 / (fan_in + fan_out)) (torch's
        xavier_uniform_); gain rounded to float32 first, the bound the float32 nearest the
        exact value.

        >>> Generator(0, backend="oracle").xavier_uniform(2, fan_in=2, fan_out=4).tolist()
        [-0.20190715789794922, 0.7610403299331665]
        """
        dims, n = _shape(entry, shape)
        fan_in, fan_out = _fan(entry, "fan_in", fan_in), _fan(entry, "fan_out", fan_out)
        bound = spec.xavier_uniform_bound(fan_in, fan_out, _gain(entry, gain))
        return self._symmetric(entry, dims, n, bound, gain, stream)

    @entry_point()
    def xavier_normal(self, shape, fan_in, fan_out, gain=1.0, *, stream=None, entry,
                      **unknown) -> np.ndarray:
        """normal(shape, 0, std), std = gain sqrt(2 / (fan_in + fan_out)) (torch's
        xavier_normal_); gain rounded to float32 first, std the float32 nearest the exact value.

        >>> Generator(0, backend="oracle").xavier_normal(2, fan_in=1, fan_out=1).tolist()  # std 1
        [0.9911374449729919, -0.9246627688407898]
        """
        dims, n = _shape(entry, shape)
        fan_in, fan_out = _fan(entry, "fan_in", fan_in), _fan(entry, "fan_out", fan_out)
        sd = spec.xavier_normal_std(fan_in, fan_out, _gain(entry, gain))
        return self._normal(entry, dims, n, 0.0, sd, stream, 0)  # sd <= gain: finite

    def _symmetric(self, entry: str, dims, n: int, bound: float, gain, stream) -> np.ndarray:
        if math.isinf(bound) or math.isinf(f32.add(bound, bound)):
            refuse(entry, "gain", f"makes the bound (float32 {bound!r}) or the width "
                                            f"2 * bound overflow float32")
        return self._uniform(entry, dims, n, -bound + 0.0, bound, stream, 0)

    @entry_point(torch=("training", "inplace"))
    def dropout(self, x, p, offset=0, stream=None, *, entry, **unknown) -> tuple[np.ndarray,
                DropoutKey]:
        """(y, key): y = x * float32(1 / (1 - p)) where u >= p, else x * 0.0 (clause 6).

        `x` a float32 buffer (read, never written; y has its shape); `p` in [0, 1),
        rounded to float32; element i has stream position offset + i, so a
        microbatch with the right offset draws what the whole tensor draws.
        `key` = (seed, stream, offset, p, n) for `dropout_backward`.

        >>> y, key = Generator(3, backend="oracle").dropout(np.float32([1, -2, 3, -4]), 0.25)
        >>> y.tolist(), key.stream       # scale: float32(4/3); the dropped -2 gives -0.0
        ([1.3333333730697632, -0.0, 4.0, -5.333333492279053], 0)
        """
        xs = as_f32(entry, "x", x)
        shape = shape_of(x)
        pf = _dropout_p(entry, p)
        offset = _positions(entry, offset, xs.size)
        s = self._stream(entry, stream)
        k = self._kernels(entry)
        y = np.empty(shape, np.float32)
        s = self._take(entry, s)
        key = DropoutKey(self._seed, s, offset, pf, xs.size)
        self._run_dropout(k, xs, key, y.reshape(-1))
        return y, key

    @entry_point()
    def dropout_backward(self, dy, key, *, entry, **unknown) -> np.ndarray:
        """dx = dy * scale where the forward kept, else dy * 0.0: the mask of `key` replayed.

        The key carries its own seed, stream, offset and p; no stream is drawn.
        """
        key = _check_key(entry, key)
        dys = as_f32(entry, "dy", dy)
        if dys.size != key.n:
            refuse(entry, "dy", f"has {dys.size} elements but the key's forward had {key.n}; pass "
                                f"the gradient of that dropout's output")
        k = self._kernels(entry)
        dx = np.empty(shape_of(dy), np.float32)
        self._run_dropout(k, dys, key, dx.reshape(-1))
        return dx

    def _run_dropout(self, k, x, key: DropoutKey, y) -> None:
        key0, key1 = spec.key_of(key.seed)
        scale = spec.dropout_scale(key.p)
        k.dropout_into(x, key0, key1, key.stream, key.offset, np.float32(key.p), np.float32(scale), y)


def _finish_normal(out, undecided: int, seed: int, stream: int, offset: int, mean: float,
                   std: float) -> None:
    """Give the `undecided` UNDECIDED slots of the flat draw `out` the oracle's value, reporting
    each stream position to `fallbacks` (contracts/rng.md: none is ever undecided)."""
    if not undecided:
        return
    idx = np.flatnonzero(out.view(np.uint32) == UNDECIDED)
    if idx.size != undecided:
        raise RuntimeError(f"normal kernels reported {undecided} undecided slots but marked "
                           f"{idx.size}")
    config = (seed, stream, f32.f32_to_bits(mean), f32.f32_to_bits(std))
    for i in idx.tolist():
        out[i] = v = spec.normal_at(seed, stream, offset + i, mean, std)
        fallbacks.record("rng", "normal", offset + i, f32.f32_to_bits(v), config)


def _check_key(entry: str, key) -> DropoutKey:
    if not isinstance(key, tuple) or len(key) != 5:
        refuse(entry, "key", "must be the DropoutKey that dropout returned", value=key)
    key = DropoutKey(*key)
    _u64(entry, "key.seed", key.seed)
    _u64(entry, "key.stream", key.stream)
    checks.integer(entry, "key.n", key.n, low=1)
    _positions(entry, key.offset, int(key.n))
    if not (isinstance(key.p, float) and f32.is_f32(key.p) and 0.0 <= key.p < 1.0):
        refuse(entry, "key.p", "must be a float32 value in [0, 1) as a Python float", value=key.p)
    return DropoutKey(int(key.seed), int(key.stream), int(key.offset), key.p + 0.0, int(key.n))


def _words(entry: str, name: str, v, counter: bool) -> np.ndarray:
    """32-bit words: a counter (4,) or (n, 4), or a key (2,); any integer dtype with words in range."""
    try:
        a = np.asarray(v)
    except (TypeError, ValueError, OverflowError) as e:  # ragged lists, huge ints
        refuse(entry, name, f"is not an array of 32-bit words ({e})")
    if counter:
        ok = a.shape == (4,) or (a.ndim == 2 and a.shape[0] >= 1 and a.shape[1] == 4)
    else:
        ok = a.shape == (2,)
    if a.dtype.kind not in "ui" or not ok:
        want = "(4,) or (n, 4)" if counter else "(2,)"
        refuse(entry, name, f"must be 32-bit words of shape {want} (numpy uint32), got dtype "
                            f"{a.dtype.name} and shape {a.shape}")
    if a.min() < 0 or a.max() > spec.MASK32:
        refuse(entry, name, "has a word outside [0, 2^32)")
    return np.ascontiguousarray(a, np.uint32)


@entry_point("mojolike.random.philox4x32_10")
def philox4x32_10(counter, key, *, backend=None, numeric_mode=None, entry, **unknown) -> np.ndarray:
    """Philox4x32-10 (Random123's philox4x32_10) of each counter under `key`.

    `counter`: uint32 words of shape (4,) or (n, 4); `key`: shape (2,). Returns
    uint32 words of the counter's shape. Integer arrays or lists whose words lie
    in [0, 2^32) are taken as uint32.

    Reproducibility: integer arithmetic only; reproduces Random123's known-answer
    vectors (tests/data/philox4x32_10_kat.txt) on every backend.

    >>> import numpy as np
    >>> [f"{w:08x}" for w in philox4x32_10(np.zeros(4, np.uint32), np.zeros(2, np.uint32),
    ...                                    backend="oracle")]
    ['6627e8d5', 'e169c58d', 'bc57ac4c', '9b00dbd8']
    """
    c = _words(entry, "counter", counter, True)
    kw = _words(entry, "key", key, False)
    k = registry.kernels(entry, FAMILY, backend, numeric_mode)
    blocks = c.reshape(-1, 4)
    out = np.empty_like(blocks)
    k.philox_into(blocks, int(kw[0]), int(kw[1]), out)
    return out.reshape(c.shape)
