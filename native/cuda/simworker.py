"""Run the CUDA kernels under numba's simulator in a worker process.

NUMBA_ENABLE_CUDASIM must be set before numba is imported, so a process that
already uses numba for real cannot simulate. `proxy(family, mode)` starts one
worker per parent process (lazily, on first use) and forwards kernel calls to it;
the worker loads the same kernels through `mojolike.core.registry.kernels` and
answers with the labels they report, so a proxy never claims what it did not run.

Wire format, both ways: frames of an 8-byte little-endian length and a payload;
the first frame is a JSON header, then one frame per array in .npy format (no pickle).
"""
from __future__ import annotations

import atexit
import io
import json
import os
import struct
import subprocess
import sys
import threading

import numpy as np

from ...core import interfaces


def _frame(payload: bytes) -> bytes:
    return struct.pack("<Q", len(payload)) + payload


def _read_frame(stream) -> bytes | None:
    size = stream.read(8)
    if len(size) < 8:
        return None
    return stream.read(struct.unpack("<Q", size)[0])


def _send(stream, header: dict, arrays=()) -> None:
    parts = [_frame(json.dumps(dict(header, narrays=len(arrays))).encode())]
    for a in arrays:
        buf = io.BytesIO()  # numpy's .npy writer needs a seekable file; a pipe is not
        np.lib.format.write_array(buf, np.asarray(a), allow_pickle=False)
        parts.append(_frame(buf.getvalue()))
    stream.write(b"".join(parts))
    stream.flush()


def _recv(stream) -> tuple[dict, list[np.ndarray]] | None:
    body = _read_frame(stream)
    if body is None:
        return None
    header = json.loads(body)
    arrays = [np.lib.format.read_array(io.BytesIO(_read_frame(stream)), allow_pickle=False)
              for _ in range(header["narrays"])]
    return header, arrays


class _Worker:
    def __init__(self):
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "mojolike.native.cuda.simworker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.lock = threading.Lock()
        atexit.register(self.close)

    def call(self, header: dict, arrays=()):
        with self.lock:
            _send(self.proc.stdin, header, arrays)
            reply = _recv(self.proc.stdout)
        if reply is None:
            raise RuntimeError(f"the cuda-sim worker exited (code {self.proc.poll()})")
        head, out = reply
        if not head["ok"]:
            from ...core.refusals import BackendUnavailable, Refusal
            if head["type"] in ("Refusal", "BackendUnavailable"):
                cls = BackendUnavailable if head["type"] == "BackendUnavailable" else Refusal
                raise cls(head["entry_point"], head["option"], head["reason"])
            raise RuntimeError(f"cuda-sim worker: {head['type']}: {head['message']}")
        return head, out

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


_worker: _Worker | None = None
_worker_lock = threading.Lock()


def _get_worker() -> _Worker:
    global _worker
    with _worker_lock:
        if _worker is None or _worker.proc.poll() is not None:
            _worker = _Worker()
        return _worker


def _encode_args(args) -> tuple[list, list[np.ndarray]]:
    """Arrays travel as .npy frames; None, bools, ints and floats (float32 included) as JSON values."""
    spec, arrays = [], []
    for a in args:
        if a is None:
            spec.append({"none": True})
        elif isinstance(a, np.ndarray):
            spec.append({"a": len(arrays)})
            arrays.append(a)
        elif isinstance(a, (bool, np.bool_)):
            spec.append({"b": bool(a)})
        elif isinstance(a, (int, np.integer)):
            spec.append({"i": int(a)})
        else:
            spec.append({"f32": float(np.float32(a))})  # repr round-trips a binary32 value exactly
    return spec, arrays


def _decode_args(spec, arrays) -> list:
    out = []
    for s in spec:
        if "none" in s:
            out.append(None)
        elif "a" in s:
            out.append(arrays[s["a"]])
        elif "b" in s:
            out.append(s["b"])
        elif "i" in s:
            out.append(s["i"])
        else:
            out.append(np.float32(s["f32"]))
    return out


class SimProxy:
    """Forwards a family's kernel calls to the simulator process.

    The arguments a method writes, as the family's interface declares them
    (`mojolike.core.interfaces.written`), come back and are copied into the caller's
    arrays, so in-place semantics hold across the process boundary.
    """

    def __init__(self, family: str, mode: str):
        self._family, self._mode = family, mode
        head, _ = _get_worker().call({"family": family, "mode": mode, "method": None, "args": []})
        self.backend, self.numeric_mode = head["backend"], head["numeric_mode"]
        self.details = dict(head["details"], process="worker")
        self.takes_pieces = head["takes_pieces"]  # False on CUDA: pieces cannot cross processes
        self._methods = frozenset(head["methods"])

    @property
    def writes(self) -> dict[str, tuple[int, ...]]:
        """method -> the argument positions copied back after every call (the interface's)."""
        return interfaces.writes(self._family)

    @staticmethod
    def new_state(n: int) -> np.ndarray:
        return np.zeros(n, np.float32)  # state lives here and travels with each call

    def __getattr__(self, method: str):
        if method.startswith("_") or method not in self._methods:
            raise AttributeError(method)

        def call(*args, **kwargs):
            spec, arrays = _encode_args(list(args) + list(kwargs.values()))
            index = interfaces.written(self._family, method, kwargs)
            head, out = _get_worker().call(
                {"family": self._family, "mode": self._mode, "method": method,
                 "args": spec[:len(args)], "kwargs": dict(zip(kwargs, spec[len(args):])),
                 "written": index}, arrays)
            nres = head["nresults"]
            for i, a in zip(index, out[nres:]):
                np.copyto(args[i], a)
            res = [o[()] if o.ndim == 0 else o for o in out[:nres]]
            if head["result"] == "none":
                return None
            return tuple(res) if head["result"] == "tuple" else res[0]
        return call


def proxy(family: str, mode: str) -> SimProxy:
    return SimProxy(family, mode)


def serve(inp, out) -> None:
    from ...core import registry
    from ...core.refusals import Refusal
    while (msg := _recv(inp)) is not None:
        head, arrays = msg
        try:
            k = registry.kernels("cuda-sim worker", head["family"], "cuda-sim", head["mode"])
            args = _decode_args(head["args"], arrays)
            named = head.get("kwargs", {})
            kwargs = dict(zip(named, _decode_args(named.values(), arrays)))
            result = None if head["method"] is None else getattr(k, head["method"])(*args, **kwargs)
            kind = "none" if result is None else "tuple" if isinstance(result, tuple) else "one"
            results = [] if result is None else list(result) if kind == "tuple" else [result]
            written = [args[i] for i in head.get("written", ())]  # the positions the proxy named
            methods = [m for m in dir(k) if not m.startswith("_") and callable(getattr(k, m))]
            _send(out, {"ok": True, "backend": k.backend, "numeric_mode": k.numeric_mode,
                        "details": k.details, "takes_pieces": k.takes_pieces, "methods": methods,
                        "result": kind, "nresults": len(results)},
                  [np.asarray(r) for r in results] + [np.asarray(w) for w in written])
        except Refusal as e:
            _send(out, {"ok": False, "type": type(e).__name__, "entry_point": e.entry_point,
                        "option": e.option, "reason": e.reason})
        except Exception as e:  # reported to the parent, which raises it
            _send(out, {"ok": False, "type": type(e).__name__, "message": str(e)})


def main() -> None:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        sys.exit("simworker: run with NUMBA_ENABLE_CUDASIM=1")
    # The simulator runs a Python thread per CUDA thread and meets at barriers;
    # a short switch interval makes those barriers about 8x faster, and a block
    # manager that waits instead of polling (simblocks) about 2x more.
    sys.setswitchinterval(1e-4)
    from .simblocks import install
    install()
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol stream
    serve(inp, out)


if __name__ == "__main__":
    main()
