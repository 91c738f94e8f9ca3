"""Counter-based random numbers: Philox4x32-10 and the `Generator` (contracts/rng.md).

The `Generator` draws uniform and normal (Box-Muller on correctly rounded logf,
sinpif, cospif) float32 values, torch's kaiming/xavier initializers (their bound
or std the float32 nearest its exact value) and dropout masks.

Every value is a function of (seed, stream, position) alone, so it is the same
on every backend, thread count and device, and a draw split into pieces with
offsets equals the unsplit draw.

>>> import numpy as np
>>> from mojolike.random import Generator, philox4x32_10
>>> [f"{w:08x}" for w in philox4x32_10(np.uint32([0xffffffff] * 4), np.uint32([0xffffffff] * 2),
...                                    backend="oracle")]
['408f276d', '41c83b0e', 'a20bc7c6', '6d5451fd']
>>> g = Generator(0, backend="oracle")
>>> g.uniform(4).tolist() == g.uniform(2, stream=0).tolist() + g.uniform(2, stream=0, offset=2).tolist()
True
>>> g.normal(5, stream=9).tolist() == g.normal(1, stream=9).tolist() + g.normal(4, stream=9, offset=1).tolist()
True
"""
from .ops.rng import DropoutKey, Generator, philox4x32_10

__all__ = ["DropoutKey", "Generator", "philox4x32_10"]
