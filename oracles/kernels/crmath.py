"""The crmath kernels of the oracle: `mojolike.oracles.crmath`'s exact bits, slot by slot.

Reproducibility: the correctly rounded value of every input; it never leaves a slot
undecided, so every call returns 0.

>>> import numpy as np
>>> out = np.empty(1, np.float32)
>>> load("identical").expf_into(np.float32([0.0]), out), out
(0, array([1.], dtype=float32))
"""
from __future__ import annotations

import numpy as np

from ...core import registry
from .. import crmath as spec
from .. import erf_tanh
from ..f32 import bits_to_f32, f32_to_bits


class OracleCrmath:
    """The oracle as a kernel set (it never leaves a slot undecided)."""

    backend = "oracle"
    numeric_mode = registry.CONTRACT_MODE
    details: dict = {}
    takes_pieces = False

    @staticmethod
    def _into(fn, x, out) -> int:
        out.view(np.uint32)[:] = [fn(u) for u in x.view(np.uint32).tolist()]
        return 0

    def expf_into(self, x, out) -> int:
        return self._into(spec.expf_bits, x, out)

    def logf_into(self, x, out) -> int:
        return self._into(spec.logf_bits, x, out)

    def sinpif_into(self, x, out) -> int:
        return self._into(spec.sinpif_bits, x, out)

    def cospif_into(self, x, out) -> int:
        return self._into(spec.cospif_bits, x, out)

    def tanhf_into(self, x, out) -> int:
        return self._into(erf_tanh.tanhf_bits, x, out)

    def erff_into(self, x, out) -> int:
        return self._into(erf_tanh.erff_bits, x, out)

    def gelu_into(self, x, tanh: bool, out) -> int:
        fn = erf_tanh.gelu_tanh if tanh else erf_tanh.gelu_erf
        out.view(np.uint32)[:] = [f32_to_bits(fn(bits_to_f32(u))) for u in x.view(np.uint32).tolist()]
        return 0

    def gelu_backward_into(self, dy, x, tanh: bool, dx) -> int:
        fn = erf_tanh.gelu_tanh_grad if tanh else erf_tanh.gelu_erf_grad
        dx.view(np.uint32)[:] = [f32_to_bits(fn(bits_to_f32(d), bits_to_f32(u)))
                                 for d, u in zip(dy.view(np.uint32).tolist(), x.view(np.uint32).tolist())]
        return 0


def load(mode: str, backend: str = "oracle") -> OracleCrmath:
    return OracleCrmath()
