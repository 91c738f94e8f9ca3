"""CUDA kernels for SGD, Adam/AdamW, the clip and gradient accumulation.

The per-element arithmetic is `native/optim.py`'s source, compiled here with the
CUDA primitives (libdevice `f*_rn` on a GPU, numpy float32 on the simulator), so
the CPU and GPU order of operations is one text (the gradient read as
g * grad_scale included; with write_back the scaled value is stored into g).
Elementwise kernels loop grid-stride over elements. `segment_fold_sumsq` folds
each chunk's values and rounded squares in one pass (a warp per chunk, two
shuffle-down butterflies), then native/cuda/fold.py's pairwise tree per tensor.

Arrays may be numpy arrays (they travel to the device and, when written, back)
or device arrays (they stay): the optimizer keeps its moments resident, and
parameters too after `params_to_device()`. These kernels take flat arrays only
(no `takes_pieces`), so separate parameter arrays arrive packed into one flat
copy (mojolike.optim.params.Registry): host arrays cross to the device at every step
anyway, and one flat transfer and one launch beat a table of per-tensor device
pointers that would need as many transfers; `params_to_device()` keeps the flat
copy resident.

The steps with cast twins (`sgd_twins`, `adam_twins`) take a flat uint16 twin buffer,
each tensor's kind and the tensors' offsets; they loop over the tensors, grid-stride over
each one's elements, and write an element's twin from its new p with native/mixed.py's
`bf16_elem` / `f16_elem` (integer arithmetic on the pattern, mojolike.cast's rounding).

Reproducibility: elementwise kernels have no reductions; every sum is the fold
tree (native/cuda/fold.py), so no launch geometry reaches the bits.
"""
from __future__ import annotations

import numpy as np
from numba import boolean, cuda, float32, int32, int64, uint16, void

from ...core.interfaces import writes
from ...oracles.fold import LANES
from .. import mixed
from .. import optim as cpu
from . import prims
from .base import CudaBase, device, grid
from .fold import BLOCK, NEG_ZERO, CudaFold, chunk_blocks, chunk_table
from .prims import WARPS, shfl_down, warp_scratch

F32_1D = float32[::1]
I64_1D = int64[::1]
U16_1D = uint16[::1]


sgd_elem = device(cpu.sgd_elem, cpu.PRIMITIVES)
adam_elem = device(cpu.adam_elem, cpu.PRIMITIVES)
bf16_elem = device(mixed.bf16_elem)
f16_elem = device(mixed.f16_elem)

if prims.SIMULATOR:
    def f32_pattern(x):
        return np.int64(np.float32(x).view(np.uint32))
else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline="always")
    def f32_pattern(x):
        return int64(libdevice.float_as_int(x)) & 0xFFFFFFFF  # the int32's bits, unsigned


def twin_of(x, kind):
    """The twin pattern of the master value x: bfloat16 (kind 1) or float16 (kind 2)."""
    u = f32_pattern(x)
    return np.uint16(bf16_elem(u) if kind == 1 else f16_elem(u))


twin_of = device(twin_of)


def sgd_kernel(p, g, b, first, lr, momentum, one_minus_damp, wd, use_momentum, use_decay, nesterov,
               maximize, coef, write_back):
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        bi = b[i] if use_momentum else NEG_ZERO  # without momentum b is a 1-element placeholder
        p[i], bi, gi = sgd_elem(p[i], g[i], bi, first, lr, momentum, one_minus_damp, wd,
                                use_momentum, use_decay, nesterov, maximize, coef)
        if use_momentum:
            b[i] = bi
        if write_back:
            g[i] = gi


def adam_kernel(p, g, m, v, beta1, beta2, eps, wd, one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
                param_decay, coupled, decoupled, maximize, coef, write_back):
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        p[i], m[i], v[i], gi = adam_elem(p[i], g[i], m[i], v[i], beta1, beta2, eps, wd,
                                         one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
                                         param_decay, coupled, decoupled, maximize, coef)
        if write_back:
            g[i] = gi


def sgd_twins_kernel(p, g, b, tw, kinds, cut, first, lr, momentum, one_minus_damp, wd,
                     use_momentum, use_decay, nesterov, maximize, coef, write_back):
    # sgd_kernel tensor by tensor (each one kind), the twin from each element's new p
    for t in range(kinds.size):
        kind = kinds[t]
        for i in range(cut[t] + cuda.grid(1), cut[t + 1], cuda.gridsize(1)):
            bi = b[i] if use_momentum else NEG_ZERO
            pi, bi, gi = sgd_elem(p[i], g[i], bi, first, lr, momentum, one_minus_damp, wd,
                                  use_momentum, use_decay, nesterov, maximize, coef)
            p[i] = pi
            if kind != 0:
                tw[i] = twin_of(pi, kind)
            if use_momentum:
                b[i] = bi
            if write_back:
                g[i] = gi


def adam_twins_kernel(p, g, m, v, tw, kinds, cut, beta1, beta2, eps, wd, one_minus_b1,
                      one_minus_b2, step_size, sqrt_bc2, param_decay, coupled, decoupled, maximize,
                      coef, write_back):
    for t in range(kinds.size):
        kind = kinds[t]
        for i in range(cut[t] + cuda.grid(1), cut[t + 1], cuda.gridsize(1)):
            pi, m[i], v[i], gi = adam_elem(p[i], g[i], m[i], v[i], beta1, beta2, eps, wd,
                                           one_minus_b1, one_minus_b2, step_size, sqrt_bc2,
                                           param_decay, coupled, decoupled, maximize, coef)
            p[i] = pi
            if kind != 0:
                tw[i] = twin_of(pi, kind)
            if write_back:
                g[i] = gi


def scale_kernel(g, coef):
    for i in range(cuda.grid(1), g.size, cuda.gridsize(1)):
        g[i] = prims.mul(g[i], coef)


def add_kernel(a, b, out):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = prims.add(a[i], b[i])


def finite_kernel(x, bad):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        d = prims.sub(x[i], x[i])  # NaN exactly when x[i] is inf or NaN
        if d != d:
            bad[0] = 1  # every writer stores the same value: no race on the result


def fold_sumsq_kernel(a, starts, stops, sums, sumsqs):
    """fold.py's chunk_partials for the values and for their rounded squares at once: one read
    of chunk c = [starts[c], stops[c]), two lane sums, two shuffle-down butterflies."""
    scratch = warp_scratch()  # used only by the simulator's shuffle
    tid = cuda.threadIdx.x
    lane = tid & 31
    # warp-stride over chunks: a warp's lanes all take the same trips, so all shuffle together
    for c in range(cuda.blockIdx.x * WARPS + (tid >> 5), sums.size, cuda.gridDim.x * WARPS):
        acc = NEG_ZERO
        acc2 = NEG_ZERO
        base = starts[c] + lane
        stop = stops[c]
        for i in range(LANES):
            k = base + i * LANES
            if k < stop:  # padded slots add -0.0: skipping them is the same
                y = a[k]
                acc = prims.add(acc, y)
                acc2 = prims.add(acc2, prims.mul(y, y))
        off = 16
        while off >= 1:
            acc = prims.add(acc, shfl_down(scratch, tid, acc, off))
            acc2 = prims.add(acc2, shfl_down(scratch, tid, acc2, off))
            off = off // 2
        if lane == 0:
            sums[c] = acc
            sumsqs[c] = acc2


def norm_squares_kernel(s, out):
    for i in range(cuda.grid(1), s.size, cuda.gridsize(1)):
        n = prims.sqrt(s[i])
        out[i] = prims.mul(n, n)


def clip_finish_kernel(total_sq, max_norm, eps, out):
    if cuda.grid(1) == 0:
        total = prims.sqrt(total_sq)
        coef = prims.div(max_norm, prims.add(total, eps))
        out[0] = total
        out[1] = float32(1.0) if coef > 1.0 else coef  # NaN stays NaN, as in the oracle


_B = boolean
KERNELS = {
    "sgd": (sgd_kernel, void(F32_1D, F32_1D, F32_1D, _B, float32, float32, float32, float32, _B, _B, _B, _B,
                             float32, _B)),
    "adam": (adam_kernel, void(F32_1D, F32_1D, F32_1D, F32_1D, *[float32] * 9, _B, _B, _B, float32, _B)),
    "sgd_twins": (sgd_twins_kernel, void(F32_1D, F32_1D, F32_1D, U16_1D, I64_1D, I64_1D, _B,
                                         float32, float32, float32, float32, _B, _B, _B, _B,
                                         float32, _B)),
    "adam_twins": (adam_twins_kernel, void(F32_1D, F32_1D, F32_1D, F32_1D, U16_1D, I64_1D, I64_1D,
                                           *[float32] * 9, _B, _B, _B, float32, _B)),
    "fold_sumsq": (fold_sumsq_kernel, void(F32_1D, I64_1D, I64_1D, F32_1D, F32_1D)),
    "scale": (scale_kernel, void(F32_1D, float32)),
    "add": (add_kernel, void(F32_1D, F32_1D, F32_1D)),
    "finite": (finite_kernel, void(F32_1D, int32[::1])),
    "norm_squares": (norm_squares_kernel, void(F32_1D, F32_1D)),
    "clip_finish": (clip_finish_kernel, void(float32, float32, float32, F32_1D)),
}


class CudaOptim(CudaBase):
    """Optimizer kernels on an NVIDIA GPU (or the simulator)."""

    device_resident = True  # parameters may stay on the device (params_to_device)

    takes_pieces = False  # flat arrays only: see the module docstring
    # argument positions each kernel writes (numpy arguments are copied back after it): the
    # interface's, and those of the internal kernels behind all_finite and clip_coef
    _WRITES = {**writes("optim"), "finite": (1,), "norm_squares": (1,), "clip_finish": (3,)}

    KERNELS = KERNELS

    def __init__(self, mode: str):
        super().__init__(mode)
        self._fold = CudaFold(mode)
        self.details = dict(self._fold.details)

    def new_state(self, n: int):
        return cuda.to_device(np.zeros(n, np.float32))

    def _run(self, name: str, n: int, *args, also=()):
        """Launch kernel `name` over n elements; numpy arguments at _WRITES[name] and `also`
        are copied back after it."""
        writes = self._WRITES.get(name, ()) + tuple(also)
        self._launch(name, grid(n), args, writes)

    def sgd(self, p, g, b, *scalars_and_flags, grad_scale=None, write_back=False):
        """One SGD pass reading each gradient as g * grad_scale (None: 1); with write_back the
        scaled gradient is stored into g, else g is left as it was."""
        self._run("sgd", p.size, p, g, b, *scalars_and_flags, cpu._coef(grad_scale),
                  bool(write_back), also=(1,) if write_back else ())

    def adam(self, p, g, m, v, *scalars_and_flags, grad_scale=None, write_back=False):
        """One Adam pass reading each gradient as g * grad_scale (None: 1); with write_back the
        scaled gradient is stored into g, else g is left as it was."""
        self._run("adam", p.size, p, g, m, v, *scalars_and_flags, cpu._coef(grad_scale),
                  bool(write_back), also=(1,) if write_back else ())

    def sgd_twins(self, p, g, b, tw, kinds, cut, *scalars_and_flags, grad_scale=None,
                  write_back=False):
        """`sgd`, writing each element's cast twin in the same pass (tw: flat uint16, kinds
        and cut as the interface says); tw comes back to the host after the launch.

        Reproducibility: p and b are `sgd`'s bits, tw[k] mojolike.cast of the new p[k] (integer
        operations on the pattern); no launch geometry reaches them."""
        self._run("sgd_twins", p.size, p, g, b, tw, _i64(kinds), _i64(cut), *scalars_and_flags,
                  cpu._coef(grad_scale), bool(write_back), also=(1,) if write_back else ())

    def adam_twins(self, p, g, m, v, tw, kinds, cut, *scalars_and_flags, grad_scale=None,
                   write_back=False):
        """`adam`, writing each element's cast twin in the same pass (tw: flat uint16).

        Reproducibility: p, m and v are `adam`'s bits; tw as in `sgd_twins`."""
        self._run("adam_twins", p.size, p, g, m, v, tw, _i64(kinds), _i64(cut),
                  *scalars_and_flags, cpu._coef(grad_scale), bool(write_back),
                  also=(1,) if write_back else ())

    def scale(self, g, coef):
        self._run("scale", g.size, g, coef)

    def add(self, a, b, out):
        self._run("add", out.size, a, b, out)

    def all_finite(self, x) -> bool:
        bad = cuda.to_device(np.zeros(1, np.int32))
        self._run("finite", x.size, x, bad)
        return int(bad.copy_to_host()[0]) == 0

    def segment_sumsq(self, x, offsets) -> np.ndarray:
        return self._fold.segment_sumsq(x, offsets)

    def _segment_sums(self, x, offsets, squares: bool):
        """(fold of every segment, and with `squares` their sumsq, else None), one chunk launch."""
        starts, stops, first = chunk_table(offsets)
        sums = np.full(len(offsets) - 1, NEG_ZERO)  # an empty segment's: -0.0, the tree's padding
        sumsqs = sums.copy() if squares else None
        if starts.size == 0:
            return sums, sumsqs
        src = cuda.device_array(starts.size, np.float32)
        src2 = cuda.device_array(starts.size, np.float32) if squares else None
        dx = cuda.to_device(x) if isinstance(x, np.ndarray) else x
        dstarts, dstops = cuda.to_device(starts), cuda.to_device(stops)
        if squares:
            self._k["fold_sumsq"][chunk_blocks(starts.size), BLOCK](dx, dstarts, dstops, src, src2)
        else:
            self._fold._k["chunk_partials"][chunk_blocks(starts.size), BLOCK](
                dx, dx, False, dstarts, dstops, src)
        for s in range(sums.size):
            if first[s + 1] > first[s]:
                sums[s] = self._fold._tree(src[first[s]:first[s + 1]])
                if squares:
                    sumsqs[s] = self._fold._tree(src2[first[s]:first[s + 1]])
        return sums, sumsqs

    def segment_fold(self, x, offsets) -> np.ndarray:
        """The fold of every tensor's cells (x flat: host or device array)."""
        return self._segment_sums(x, offsets, False)[0]

    def segment_fold_sumsq(self, x, offsets):
        """(fold, sumsq) of every tensor's cells, from one read of x."""
        return self._segment_sums(x, offsets, True)

    def clip_coef(self, sumsqs, max_norm, eps):
        sq = cuda.device_array(sumsqs.size, np.float32)
        self._run("norm_squares", sumsqs.size, sumsqs, sq)
        total_sq = self._fold.fold(sq)
        out = np.empty(2, np.float32)
        self._run("clip_finish", 1, total_sq, max_norm, eps, out)
        return out[0], out[1]


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.int64)


def load(mode: str, backend: str = "cuda") -> CudaOptim:
    return CudaOptim(mode)
