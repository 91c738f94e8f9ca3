"""Every float32 pattern (all 2^32) through mojolike.cast on cpu-numba, to bfloat16 and to float16,
against ml_dtypes' / numpy's astype and torch's .to(torch.bfloat16) / .to(torch.float16).

A NaN input counts as agreeing when both results are NaN (NaN as one class: the contract's
canonical 0x7FC0 / 0x7E00 is one of several choices, contracts/mixed.md clause 5); the
script also counts the NaN inputs whose patterns differ, to show where the libraries part.
Widening is checked on all 65536 patterns of each type, bit for bit (torch's widening of
a float16 NaN gives 0x7FFFFFFF, so there NaN is one class too). Chunks of 2^24 inputs.

Run: .venv/bin/python benchmarks/cast_exhaustive.py [--chunks N]  (N < 256 checks a prefix)
"""
from __future__ import annotations

import argparse
import platform
import time

import ml_dtypes
import numpy as np
import torch

import mojolike

CHUNK = 1 << 24
BF16 = ml_dtypes.bfloat16


def _is_nan16(p: np.ndarray, exp_mask: int, frac_mask: int) -> np.ndarray:
    return ((p & exp_mask) == exp_mask) & ((p & frac_mask) != 0)


NAN16 = {"bfloat16": (0x7F80, 0x007F), "float16": (0x7C00, 0x03FF)}


def _t16(t) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16)


def narrowing(chunks: int) -> dict:
    counts = {f"{t} vs {lib}": [0, 0] for t in NAN16 for lib in ("astype", "torch")}
    ours = {t: np.empty(CHUNK, np.uint16) for t in NAN16}
    base = np.arange(CHUNK, dtype=np.uint32)
    t0 = time.perf_counter()
    for c in range(chunks):
        u = base + np.uint32(c * CHUNK)
        x = u.view(np.float32)
        nan_in = np.isnan(x)
        tx = torch.from_numpy(x)
        for t, dtype, tdtype in (("bfloat16", BF16, torch.bfloat16), ("float16", np.float16, torch.float16)):
            mojolike.cast(x, t, out=ours[t].view(dtype), backend="cpu-numba")
            mine = ours[t]
            with np.errstate(over="ignore", invalid="ignore"):
                lib = x.astype(dtype).view(np.uint16)
            tor = _t16(tx.to(tdtype))
            em, fm = NAN16[t]
            for name, theirs in (("astype", lib), ("torch", tor)):
                differ = mine != theirs
                both_nan = nan_in & _is_nan16(mine, em, fm) & _is_nan16(theirs, em, fm)
                counts[f"{t} vs {name}"][0] += int(np.count_nonzero(differ & ~both_nan))
                counts[f"{t} vs {name}"][1] += int(np.count_nonzero(differ & both_nan))
        if c % 16 == 15 or c == chunks - 1:
            print(f"  {c + 1}/{chunks} chunks, {time.perf_counter() - t0:.0f} s", flush=True)
    return counts


def widening() -> dict:
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    out = {}
    for t, dtype, tdtype in (("bfloat16", BF16, torch.bfloat16), ("float16", np.float16, torch.float16)):
        mine = mojolike.cast(h.view(dtype), "float32", backend="cpu-numba")
        lib = h.view(dtype).astype(np.float32)
        tor = torch.from_numpy(h.view(np.int16).copy()).view(tdtype).float().numpy()
        for name, theirs in (("astype", lib), ("torch", tor)):
            differ = mine.view(np.uint32) != theirs.view(np.uint32)
            both_nan = np.isnan(mine) & np.isnan(theirs)
            out[f"{t} -> float32 vs {name}"] = [int(np.count_nonzero(differ & ~both_nan)),
                                               int(np.count_nonzero(differ & both_nan))]
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--chunks", type=int, default=(1 << 32) // CHUNK)
    args = p.parse_args()
    print(f"cast_exhaustive: {args.chunks * CHUNK} float32 inputs; {platform.processor() or platform.machine()}; "
          f"ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}, torch {torch.__version__}")
    t0 = time.perf_counter()
    results = {**narrowing(args.chunks), **widening()}
    print("comparison                      differences (NaN as one class)   NaN inputs whose patterns differ")
    for k, (real, nan_only) in results.items():
        print(f"{k:32s}{real:>12d}                     {nan_only:>12d}")
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
