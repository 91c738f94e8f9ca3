"""The header every rank sends before a reduction, and the rule by which all ranks refuse together.

A header is a fixed record of int64 values: the layout (a hash of the tensor count
and shapes, the element count, the tensor count), the finite flag, the tokens (-1
for None), the numeric mode and, when this rank's own arguments were refused, the
option and reason of its refusal as UTF-8 text. Every rank gathers every header
and applies `agree` to the same list, so every rank reaches the same verdict
before any gradient byte is sent.

>>> h = Header(refused=False, layout=7, elements=3, tensors=1, finite=True, tokens=-1, mode=0)
>>> Header.unpack(h.pack()) == h, Header.BYTES
(True, 328)
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from . import checks, registry
from ._params import as_list, end_to_end
from .oracles.fold import split_is_exact
from .refusals import Refusal

_MAGIC = 0x6D6A_6C6B_6472_0001  # "mjlkdr", version 1
_TEXT = 32  # int64 words of refusal text (256 bytes)
_FIXED = 9


@dataclass
class Header:
    refused: bool
    layout: int
    elements: int
    tensors: int
    finite: bool
    tokens: int  # -1: not given
    mode: int
    option: str = ""
    reason: str = ""
    refusal: Refusal | None = field(default=None, compare=False)  # this rank's own, not sent

    BYTES = 8 * (_FIXED + _TEXT)

    def pack(self) -> np.ndarray:
        text = (self.option + "\0" + self.reason).encode()[:8 * _TEXT]
        words = np.frombuffer(text.ljust(8 * _TEXT, b"\0"), np.int64)
        head = [_MAGIC, int(self.refused), self.layout, self.elements, self.tensors,
                int(self.finite), self.tokens, self.mode, len(text)]
        return np.concatenate([np.array(head, np.int64), words])

    @classmethod
    def unpack(cls, a: np.ndarray) -> "Header":
        if int(a[0]) != _MAGIC:
            raise ValueError("a rank sent a header of another format (mojolike versions differ)")
        text = a[_FIXED:].tobytes()[:int(a[8])].decode(errors="replace")
        option, _, reason = text.partition("\0")
        return cls(bool(a[1]), int(a[2]), int(a[3]), int(a[4]), bool(a[5]), int(a[6]), int(a[7]),
                   option, reason)


_KNOWN = ("grads", "tokens", "group", "timeout", "numeric_mode", "backend")


def local_header(entry: str, grads, tokens, numeric_mode, backend, unknown):
    """(this rank's Header, the caller's flat views, one flat view of them all or None, kernels);
    a refusal of this rank's arguments is carried in the header, raised later by `agree`."""
    try:
        checks.keywords(entry, unknown, _KNOWN)
        k = registry.kernels(entry, "optim", backend, numeric_mode)
        items, listed = as_list(entry, "grads", grads)
        views = [checks.as_f32(entry, f"grads[{i}]" if listed else "grads", x, writable=True)
                 for i, x in enumerate(items)]
        checks.disjoint(entry, [(f"grads[{i}]", v) for i, v in enumerate(views)])
        count = -1 if tokens is None else checks.integer(entry, "tokens", tokens, low=1, high=2**62)
    except Refusal as r:
        text = Header(True, 0, 0, 0, True, -1, 0, r.option, r.reason, r)
        return text, None, None, None
    shapes = [list(checks.shape_of(x)) for x in items]
    digest = hashlib.md5(json.dumps([listed, shapes]).encode()).digest()
    finite = all(k.all_finite(v) for v in views)
    flat = views[0] if len(views) == 1 else end_to_end(views)
    mode = registry.MODES.index(k.numeric_mode)
    head = Header(False, int.from_bytes(digest[:8], "little", signed=True),
                  sum(v.size for v in views), len(views), finite, count, mode)
    return head, views, flat, k


def agree(entry: str, rank: int, headers: list[Header], mine: Header) -> None:
    """Raise the same Refusal (same option) on every rank, or return on every rank."""
    for r, h in enumerate(headers):
        if h.refused:
            if r == rank:
                raise mine.refusal
            raise Refusal(entry, h.option, f"was refused on rank {r}: {h.reason}; no rank reduced "
                                           f"or wrote anything")
    modes = {registry.MODES[h.mode] for h in headers}
    if len(modes) > 1:
        raise Refusal(entry, "numeric_mode", f"differs between ranks ({', '.join(sorted(modes))}); "
                                             f"every rank must run one numeric mode")
    first = headers[0]
    for r, h in enumerate(headers):
        if (h.layout, h.elements, h.tensors) != (first.layout, first.elements, first.tensors):
            raise Refusal(entry, "grads", f"on rank {r} have another layout than on rank 0 "
                                          f"({h.tensors} tensors of {h.elements} elements against "
                                          f"{first.tensors} of {first.elements}, or other shapes); "
                                          f"every rank must pass the same parameter layout")
    given = [h.tokens >= 0 for h in headers]
    if any(given) and not all(given):
        raise Refusal(entry, "tokens", f"is given on ranks {[r for r, g in enumerate(given) if g]} "
                                       f"and not on the others; pass it on every rank or on none")
    counts = [h.tokens for h in headers]
    if all(given) and registry.MODES[first.mode] == registry.CONTRACT_MODE and \
            not split_is_exact(counts):
        raise Refusal(entry, "tokens", "of the ranks are not aligned "
                                       "(mojolike.accumulation_is_aligned is False): their sum "
                                       "would not have the unsplit batch's bits; give each rank "
                                       "whole 1024-token subtrees of the batch, or pass "
                                       "numeric_mode='deterministic'", value=counts)
    bad = [r for r, h in enumerate(headers) if not h.finite]
    if bad:
        raise Refusal(entry, "grads", f"hold inf or NaN on rank(s) {bad}; no rank reduced or wrote "
                                      f"anything (a loss scaler can skip this step on every rank "
                                      f"alike by catching this Refusal)")
