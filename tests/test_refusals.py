"""What the fold contract does not cover is refused by name, before anything is computed."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mojolike
from mojolike import Refusal
from mojolike.core import registry


def refused(fn, *args, **kw) -> str:
    with pytest.raises(Refusal) as e:
        fn(*args, **kw)
    return str(e.value)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32])
@pytest.mark.parametrize("entry", ["fold", "sumsq"])
def test_sums_refuse_other_dtypes_by_name(entry, dtype):
    msg = refused(getattr(mojolike, entry), np.ones(4, dtype))
    assert f"mojolike.{entry}" in msg and np.dtype(dtype).name in msg and "float32" in msg


def test_fold_refuses_bfloat16_tensors_and_says_what_to_pass():
    msg = refused(mojolike.fold, torch.ones(4, dtype=torch.bfloat16))
    assert "mojolike.fold" in msg and "Tensor" in msg and "tensor.numpy()" in msg


def test_fold_refuses_an_empty_buffer():
    msg = refused(mojolike.fold, np.ones(0, np.float32))
    assert "mojolike.fold" in msg and "empty" in msg


def test_fold_refuses_a_strided_view_instead_of_copying_it():
    msg = refused(mojolike.fold, np.ones(10, np.float32)[::2])
    assert "not C-contiguous" in msg and "ascontiguousarray" in msg


def test_fold_refuses_big_endian_float32():
    assert "byte order" in refused(mojolike.fold, np.ones(3, ">f4"))


def test_fold_refuses_objects_without_the_buffer_protocol():
    assert "float32 buffer" in refused(mojolike.fold, [1.0, 2.0])


def test_dot_refuses_operands_of_different_shapes():
    msg = refused(mojolike.dot, np.ones(6, np.float32), np.ones((2, 3), np.float32))
    assert "mojolike.dot" in msg and "(2, 3)" in msg and "(6,)" in msg


def test_unknown_keywords_are_refused_not_ignored():
    msg = refused(mojolike.sumsq, np.ones(3, np.float32), dim=0)
    assert "mojolike.sumsq" in msg and "dim" in msg and "backend" in msg


def test_unknown_backend_and_mode_are_refused_by_name():
    x = np.ones(3, np.float32)
    assert "backend='tpu'" in refused(mojolike.fold, x, backend="tpu")
    assert "numeric_mode='exact'" in refused(mojolike.fold, x, numeric_mode="exact")


def test_environment_selection_is_validated_and_named(monkeypatch):
    x = np.ones(3, np.float32)
    monkeypatch.setenv("MOJOLIKE_BACKEND", "gpu")
    assert "MOJOLIKE_BACKEND='gpu'" in refused(mojolike.fold, x)
    monkeypatch.setenv("MOJOLIKE_BACKEND", "oracle")
    assert mojolike.fold(x) == 3.0 and mojolike.backend_used() == "oracle"
    monkeypatch.setenv("MOJOLIKE_NUMERIC_MODE", "fastest")
    assert "MOJOLIKE_NUMERIC_MODE='fastest'" in refused(mojolike.fold, x)


def test_the_oracle_defines_only_the_identical_mode():
    msg = refused(mojolike.fold, np.ones(3, np.float32), backend="oracle", numeric_mode="fast")
    assert "oracle" in msg and "identical" in msg


def test_an_unavailable_backend_is_refused_with_its_reason(monkeypatch):
    info = {b.name: b for b in mojolike.backends()}["cuda"]
    if info.available:  # on a GPU machine, stand in a reason so the refusal path still runs
        monkeypatch.setitem(registry._status_cache, "cuda", (False, "no usable NVIDIA GPU: test"))
        monkeypatch.delitem(registry._loaded, ("fold", "cuda", "identical"), raising=False)
        info = {b.name: b for b in mojolike.backends()}["cuda"]
    with pytest.raises(mojolike.BackendUnavailable) as e:
        mojolike.fold(np.ones(3, np.float32), backend="cuda")
    assert "backend='cuda'" in str(e.value) and info.reason in str(e.value)


def test_kernels_reporting_another_label_are_refused():
    class Mislabelled:
        backend, numeric_mode = "cpu-numba", "fast"
    with pytest.raises(mojolike.BackendUnavailable, match="wrong label"):
        registry.check_label("mojolike.fold", Mislabelled(), "cpu-numba", "identical")


def test_a_c_module_built_for_another_mode_is_refused_by_the_loader():
    from mojolike.native.c import build

    class FakeLib:
        def mj_build_mode(self):
            return b"fast"

        def mj_build_flags(self):
            return b"-O3 -ffast-math"

        def mj_compile_command(self):
            return b"/usr/bin/cc -O3 -ffast-math -fPIC -c mojolike_c.c -o mojolike_c.o"

        def mj_link_command(self):
            return b"/usr/bin/cc -shared mojolike_c.o -o mojolike_c.so"

    class FakeFFI:
        @staticmethod
        def string(b):
            return b

    class FakeModule:
        ffi, lib = FakeFFI(), FakeLib()

    with pytest.raises(mojolike.BackendUnavailable) as e:
        build.check_build(FakeModule(), "identical")
    assert "'fast'" in str(e.value) and "-ffp-contract=off" in str(e.value)

