"""Hostile state files and checkpoints, built byte by byte, and the files' permissions.

A loader must refuse a file that is not what the format holds by name (option
`path`), before reading any member's data, with memory bounded by the file's own
size, not by what its members claim; and what is written gets the umask's
permissions.
"""
from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import tracemalloc
import zlib

import numpy as np
import pytest

import mojolike
from mojolike.core.refusals import Refusal
from mojolike.optim import state as _optim_state
from mojolike.training import checkpoint as ckpt

_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")


# -- zip archives laid out by hand (zipfile only writes honest ones) -------------------------------
def npy(a) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=False)
    return f.getvalue()


def local(name: str, size: int, crc: int = 0) -> bytes:
    raw = name.encode()
    return _LOCAL.pack(0x04034B50, 20, 0, 0, 0, 0, crc, size, size, len(raw), 0) + raw


def central(name: str, offset: int, size: int, crc: int = 0) -> bytes:
    raw = name.encode()
    return _CENTRAL.pack(0x02014B50, 20, 20, 0, 0, 0, 0, crc, size, size, len(raw), 0, 0, 0, 0,
                         0, offset) + raw


def archive(body: bytes, entries: list[bytes]) -> bytes:
    cd = b"".join(entries)
    n = len(entries)
    return body + cd + _END.pack(0x06054B50, 0, 0, n, n, len(cd), len(body), 0)


def honest(members: list[tuple[str, bytes]]) -> bytes:
    """Stored members end to end, each with its true size and CRC."""
    body, entries = b"", []
    for name, data in members:
        entries.append(central(name, len(body), len(data), zlib.crc32(data)))
        body += local(name, len(data), zlib.crc32(data)) + data
    return archive(body, entries)


def npy_head(dtype: str, shape: tuple) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": dtype, "fortran_order": False,
                                              "shape": shape})
    return f.getvalue()


def overlapping(count: int, payload: int) -> bytes:
    """`count` members laid out as [local header, .npy header] end to end, then `payload`
    bytes: member i's data runs from its .npy header to the end of the body, so it holds
    every later member, and its header claims a bool array of exactly that many bytes (with
    the true CRC), which is all a member-by-member reader checks. The claimed sizes add up
    quadratically while the file stays linear."""
    names = [f"m{i:04d}_initialized.npy" for i in range(count)]
    tail, pieces = b"\0" * payload, []
    for name in reversed(names):  # from the back: each member's data is everything after it
        data = npy_head("|b1", (len(tail),)) + tail
        tail = local(name, len(data), zlib.crc32(data)) + data
        pieces.insert(0, (name, len(data), zlib.crc32(data)))
    body, entries = tail, []
    for name, size, crc in pieces:
        entries.append(central(name, len(body) - size - _LOCAL.size - len(name), size, crc))
    return archive(body, entries)


def state_members() -> list[tuple[str, bytes]]:
    return [("kind.npy", npy(np.str_("Adam"))), ("t.npy", npy(np.int64(2))),
            ("exp_avg.count.npy", npy(np.int64(1))), ("exp_avg.0.npy", npy(np.ones(4, np.float32))),
            ("exp_avg_sq.count.npy", npy(np.int64(1))),
            ("exp_avg_sq.0.npy", npy(np.ones(4, np.float32)))]


def refusal_of(fn, path) -> Refusal:
    with pytest.raises(Refusal) as e:
        fn(path)
    assert e.value.option == "path"
    return e.value


# -- the archive's layout -------------------------------------------------------------------------
def test_load_refuses_overlapping_members_before_reading_any(tmp_path, monkeypatch):
    p = tmp_path / "o.npz"
    p.write_bytes(overlapping(300, 1_000_000))
    read = []
    monkeypatch.setattr(_optim_state, "npy_header", lambda *a: read.append(a))
    e = refusal_of(mojolike.load_state, p)
    assert "claiming" in str(e) and "bytes in a file of" in str(e)
    assert read == []  # not one member's header, let alone its data


def test_load_refuses_members_whose_bytes_overlap_even_when_their_sizes_fit_the_file(tmp_path):
    inner = npy(np.int64(2))
    rec_b = local("t.npy", len(inner), zlib.crc32(inner)) + inner
    # member a's data is member b's whole record: the claimed sizes fit, the bytes overlap
    body = local("kind.npy", len(rec_b), zlib.crc32(rec_b)) + rec_b
    entries = [central("kind.npy", 0, len(rec_b), zlib.crc32(rec_b)),
               central("t.npy", _LOCAL.size + len("kind.npy"), len(inner), zlib.crc32(inner))]
    p = tmp_path / "o.npz"
    p.write_bytes(archive(body + b"\0" * 200, entries))
    assert "overlap" in str(refusal_of(mojolike.load_state, p))


def test_load_refuses_a_duplicate_member_name_instead_of_taking_the_last(tmp_path):
    p = tmp_path / "d.npz"
    p.write_bytes(honest(state_members()))
    s = mojolike.load_state(p)  # the hand-built archive itself is a state file
    assert s["kind"] == "Adam" and s["t"] == 2 and s["exp_avg"][0].tolist() == [1.0] * 4
    members = state_members() + [("t.npy", npy(np.int64(7)))]
    p.write_bytes(honest(members))
    assert "'t.npy' twice" in str(refusal_of(mojolike.load_state, p))


@pytest.mark.parametrize("header", [b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,",
                                    b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}\0\0",
                                    b"{'descr': '<f4', 'fortran_order': False, 'shape': (4\n"])
def test_load_refuses_an_npy_header_that_is_not_a_python_literal_by_name(tmp_path, header):
    members = state_members()
    name, data = members[-1]
    text = header.ljust(118 - 10, b" ") + b"\n"  # a 1.0 header: magic, version, length, text
    bad = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + bytes(16)
    p = tmp_path / "h.npz"
    p.write_bytes(honest(members[:-1] + [(name, bad)]))
    assert refusal_of(mojolike.load_state, p).option == "path"


def test_load_refuses_a_local_header_or_data_that_disagrees_with_the_central_directory(tmp_path):
    data = honest(state_members())
    at = data.index(b"t.npy")  # the first occurrence is in t's local header
    p = tmp_path / "h.npz"
    p.write_bytes(data[:at] + b"u.npy" + data[at + 5:])
    assert "local header" in str(refusal_of(mojolike.load_state, p))
    damaged = bytearray(data)
    damaged[data.index(np.ones(4, np.float32).tobytes())] ^= 1
    p.write_bytes(bytes(damaged))
    assert "'exp_avg.0' fails its CRC check" in str(refusal_of(mojolike.load_state, p))


def test_load_refuses_a_member_the_format_does_not_hold_before_reading_any_array(tmp_path,
                                                                                   monkeypatch):
    members = state_members() + [("exp_avg.7.npy", npy(np.ones(4, np.float32)))]
    p = tmp_path / "x.npz"
    p.write_bytes(honest(members))
    read, real = [], _optim_state.npy_data
    monkeypatch.setattr(_optim_state, "npy_data",
                        lambda f, m, h: read.append(m.name) or real(f, m, h))
    assert "'exp_avg.7'" in str(refusal_of(mojolike.load_state, p))
    assert set(read) <= {"kind", "t", "exp_avg.count", "exp_avg_sq.count"}  # scalars only


def _peak_of_refusing(path) -> tuple[int, int]:
    """(peak traced bytes, file size) while load_state refuses the file."""
    tracemalloc.start()
    try:
        with pytest.raises(Refusal):
            mojolike.load_state(path)
        return tracemalloc.get_traced_memory()[1], os.path.getsize(path)
    finally:
        tracemalloc.stop()


def test_refusing_a_file_of_overlapping_members_takes_memory_bounded_by_the_file(tmp_path):
    p = tmp_path / "o.npz"
    p.write_bytes(overlapping(300, 1_000_000))  # 1.1 MB claiming about 300 MB
    peak, size = _peak_of_refusing(p)
    assert peak < size, (peak, size)


# VmHWM, not ru_maxrss: a child's ru_maxrss starts from its parent's resident size at the fork,
# while VmHWM belongs to the memory the exec gave it
_PEAK = """
import sys, mojolike

def hwm_kib():
    with open("/proc/self/status") as f:
        return int(next(ln for ln in f if ln.startswith("VmHWM:")).split()[1])

before = hwm_kib()
try:
    mojolike.load_state(sys.argv[1])
except mojolike.Refusal:
    pass
print(hwm_kib() - before)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM from /proc")
def test_the_process_peak_while_refusing_overlapping_members_stays_near_the_file_size(tmp_path):
    p = tmp_path / "o.npz"
    p.write_bytes(overlapping(300, 1_000_000))
    out = subprocess.run([sys.executable, "-c", _PEAK, str(p)], capture_output=True, text=True,
                         check=True)
    grown_kib = int(out.stdout.split()[-1])
    assert grown_kib * 1024 < 2 * os.path.getsize(p), grown_kib


# -- checkpoints: what the meta implies, checked before any array is read -------------------------
def _checkpoint(tmp_path, arrays=None):
    a = {"w": np.ones((2, 3), np.float32), "n": np.int64([4])} if arrays is None else arrays
    return ckpt.write("test", tmp_path / "c.npz", {"rows": 2}, a)


def _want(meta):
    return {"w": (np.dtype("<f4"), (meta["rows"], 3)), "n": (np.dtype("<i8"), (1,))}


def test_read_with_expect_returns_the_arrays_the_meta_implies(tmp_path):
    meta, arrays = ckpt.read("test", _checkpoint(tmp_path), expect=_want)
    assert meta == {"rows": 2} and arrays["w"].shape == (2, 3) and arrays["n"].tolist() == [4]
    assert ckpt.header_specs("test", _checkpoint(tmp_path))[1] == {
        "w": (np.dtype("<f4"), (2, 3)), "n": (np.dtype("<i8"), (1,))}


@pytest.mark.parametrize("arrays,option,words", [
    ({"w": np.ones((2, 3), np.float32)}, "path", "lacks member 'n'"),
    ({"w": np.ones((2, 3), np.float32), "n": np.int64([4]), "z": np.ones(1, np.float32)}, "path",
     "holds member 'z'"),
    ({"w": np.ones((3, 3), np.float32), "n": np.int64([4])}, "w", "shape (2, 3)"),
    ({"w": np.ones((2, 3), np.float32), "n": np.float32([4])}, "n", "int64"),
], ids=["missing", "extra", "shape", "dtype"])
def test_read_refuses_members_the_meta_does_not_imply_before_reading_any_array(
        tmp_path, monkeypatch, arrays, option, words):
    path = _checkpoint(tmp_path, arrays)
    read, real = [], _optim_state.npy_data
    monkeypatch.setattr(ckpt, "npy_data", lambda f, m, h: read.append(m.name) or real(f, m, h))
    with pytest.raises(Refusal) as e:
        ckpt.read("mojolike.train.Trainer.load", path, expect=_want)
    assert e.value.option == option and e.value.entry_point == "mojolike.train.Trainer.load"
    assert words in str(e.value)
    assert read == ["meta"]


def test_read_lets_a_refusal_of_the_meta_by_expect_through(tmp_path):
    def expect(meta):
        raise Refusal("mojolike.train.Trainer.load", "rows", "is not covered")
    with pytest.raises(Refusal) as e:
        ckpt.read("mojolike.train.Trainer.load", _checkpoint(tmp_path), expect=expect)
    assert e.value.option == "rows"


def test_read_refuses_a_checkpoint_of_overlapping_members_naming_the_path(tmp_path):
    p = tmp_path / "o.npz"
    p.write_bytes(overlapping(300, 1_000_000))
    with pytest.raises(Refusal) as e:
        ckpt.read("mojolike.train.Trainer.load", p, expect=_want)
    assert e.value.option == "path" and "claiming" in str(e.value)



def test_trainer_load_and_train_resume_refuse_overlapping_members_in_memory_bounded_by_the_file(
        tmp_path, capsys):
    from mojolike import cli
    from mojolike.training.trainer import Trainer
    p = tmp_path / "o.npz"
    p.write_bytes(overlapping(300, 1_000_000))
    tracemalloc.start()
    try:
        with pytest.raises(Refusal) as e:
            Trainer.load(p)
        assert cli.main(["train", "--resume", str(p)]) == 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.option == "path" and e.value.entry_point == "mojolike.train.Trainer.load"
    assert "claiming" in capsys.readouterr().err
    assert peak < 2 * os.path.getsize(p), peak  # the CLI's own imports count too

# -- permissions -------------------------------------------------------------------------------
@pytest.fixture
def umask():
    """Set the process's umask for a test, restored afterwards."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def test_state_files_and_checkpoints_get_the_umasks_permissions_not_0600(tmp_path, umask):
    state = {"kind": "SGD", "t": 1, "momentum_buffer": [np.zeros(2, np.float32)]}
    for mask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        umask(mask)
        mojolike.save_state(tmp_path / f"s{mask:o}", state)
        written = ckpt.write("test", tmp_path / f"c{mask:o}", {"step": 1},
                             {"w": np.ones(2, np.float32)})
        assert oct(os.stat(tmp_path / f"s{mask:o}.npz").st_mode & 0o777) == oct(mode)
        assert oct(os.stat(written).st_mode & 0o777) == oct(mode)
    assert sorted(os.listdir(tmp_path)) == sorted(f"{k}{m:o}.npz" for k in "sc"
                                                  for m in (0o022, 0o077, 0o002))


# -- the chunked head: a size it can check is refused by name, never a MemoryError -------------
def test_a_head_chunk_past_the_vocabulary_is_the_whole_vocabulary_and_too_much_is_refused(
        monkeypatch):
    rng = np.random.default_rng(3)
    h, w = rng.standard_normal((40, 8), np.float32), rng.standard_normal((1500, 8), np.float32)
    t = rng.integers(0, 1500, 40)
    on = dict(backend="cpu-numba", return_grad=True)
    want = mojolike.chunked_lm_head_loss(h, w, t, chunk_size=2048, **on)
    got = mojolike.chunked_lm_head_loss(h, w, t, chunk_size=2**40, **on)
    assert got[0] == want[0] and got[1].tobytes() == want[1].tobytes() \
        and got[2].tobytes() == want[2].tobytes()
    # 2**17 rows by a 2**17 vocabulary: 64 GiB of logits from 1 MiB of inputs
    big_h, big_w = np.ones((2**17, 1), np.float32), np.ones((2**17, 1), np.float32)
    before = (big_h.copy(), big_w.copy())
    monkeypatch.setattr(mojolike.core.checks, "_memory_bytes", lambda: 2**35)  # any machine: 32 GiB
    with pytest.raises(Refusal) as e:
        mojolike.chunked_lm_head_loss(big_h, big_w, np.zeros(2**17, np.int64), chunk_size=2**40,
                                      backend="cpu-numba")
    assert e.value.option == "chunk_size" and "smaller chunk_size" in str(e.value)
    assert big_h.tobytes() == before[0].tobytes() and big_w.tobytes() == before[1].tobytes()


def test_a_head_whose_row_by_chunk_buffers_exceed_the_memory_is_refused_before_computing(
        monkeypatch):
    rng = np.random.default_rng(4)
    h, w = rng.standard_normal((64, 8), np.float32), rng.standard_normal((4096, 8), np.float32)
    monkeypatch.setattr(mojolike.core.checks, "_memory_bytes", lambda: 2**20)  # 3 x 64 x 4096 x 4 > 1 MiB
    with pytest.raises(Refusal) as e:
        mojolike.chunked_lm_head_loss(h, w, rng.integers(0, 4096, 64), chunk_size=4096,
                                      backend="cpu-numba")
    assert e.value.option == "chunk_size" and "3 buffers of 64 x 4096" in str(e.value)
