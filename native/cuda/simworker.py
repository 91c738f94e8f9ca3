"""Run the CUDA kernels under numba's simulator in a worker process.

NUMBA_ENABLE_CUDASIM must be set before numba is imported, so a process that
already uses numba for real cannot simulate. `proxy(family, mode)` starts one
worker per parent process (lazily, on first use) and forwards kernel calls to it;
the worker loads the same kernels through `mojolike.registry.kernels` and
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
            from ...refusals import BackendUnavailable, Refusal
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


class SimProxy:
    """Forwards a family's kernel calls to the simulator process; scalars come back as numpy.float32."""

    def __init__(self, family: str, mode: str):
        self._family, self._mode = family, mode
        head, _ = _get_worker().call({"family": family, "mode": mode, "method": None})
        self.backend, self.numeric_mode = head["backend"], head["numeric_mode"]
        self.details = dict(head["details"], process="worker")
        self._methods = frozenset(head["methods"])

    def __getattr__(self, method: str):
        if method.startswith("_") or method not in self._methods:
            raise AttributeError(method)

        def call(*arrays):
            head, out = _get_worker().call(
                {"family": self._family, "mode": self._mode, "method": method}, arrays)
            res = [o[()] if o.ndim == 0 else o for o in out]
            return res[0] if len(res) == 1 else tuple(res)
        return call


def proxy(family: str, mode: str) -> SimProxy:
    return SimProxy(family, mode)


def serve(inp, out) -> None:
    from ... import registry
    from ...refusals import Refusal
    while (msg := _recv(inp)) is not None:
        head, arrays = msg
        try:
            k = registry.kernels("cuda-sim worker", head["family"], "cuda-sim", head["mode"])
            result = () if head["method"] is None else getattr(k, head["method"])(*arrays)
            result = result if isinstance(result, tuple) else (result,)
            methods = [m for m in dir(k) if not m.startswith("_") and callable(getattr(k, m))]
            _send(out, {"ok": True, "backend": k.backend, "numeric_mode": k.numeric_mode,
                        "details": k.details, "methods": methods}, [np.asarray(r) for r in result])
        except Refusal as e:
            _send(out, {"ok": False, "type": type(e).__name__, "entry_point": e.entry_point,
                        "option": e.option, "reason": e.reason})
        except Exception as e:  # reported to the parent, which raises it
            _send(out, {"ok": False, "type": type(e).__name__, "message": str(e)})


def main() -> None:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        sys.exit("simworker: run with NUMBA_ENABLE_CUDASIM=1")
    # The simulator runs a Python thread per CUDA thread and meets at barriers;
    # a short switch interval makes those barriers about 8x faster.
    sys.setswitchinterval(1e-4)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol stream
    serve(inp, out)


if __name__ == "__main__":
    main()
