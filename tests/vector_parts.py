"""Binary64 vector lanes as float32 arrays a test can compare bit for bit: three binary32 parts
that sum to the lane exactly (each remainder is exact; a normal binary64 has at most 53 bits,
three binary32 significands hold 72)."""
from __future__ import annotations

from mojolike.native.simd import vnarrow, vstore, vsub, vwiden
from numba import njit


@njit(error_model="numpy")
def store_parts(y, hi, mid, lo, i):
    """hi[i:i+16], mid[i:i+16], lo[i:i+16] = y's lanes as three exact binary32 parts."""
    h = vnarrow(y)
    r = vsub(y, vwiden(h))
    m = vnarrow(r)
    vstore(hi, i, h)
    vstore(mid, i, m)
    vstore(lo, i, vnarrow(vsub(r, vwiden(m))))
