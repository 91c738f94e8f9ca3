"""A CUDA family's kernel table compiles each kernel when first asked for, once, whatever the
threads asking: a process pays only for the kernels it launches (on an H200's host the train
suite spent most of its cuda time compiling kernels it never ran)."""
from __future__ import annotations

import threading

import pytest

from mojolike.native.cuda import base, fold, optim  # imported before jit is faked


@pytest.fixture
def jit_calls(monkeypatch):
    calls = []

    def fake_jit(sig, cache=False):
        def compile_(fn):
            calls.append((fn.__name__, sig, cache))
            return ("compiled", fn.__name__)
        return compile_

    monkeypatch.setattr(base.cuda, "jit", fake_jit)
    return calls


def first(a): pass
def second(a): pass


TABLE = {"first": (first, "sig-1"), "second": (second, "sig-2")}


def test_nothing_compiles_until_a_kernel_is_asked_for(jit_calls):
    k = base.Jitted(TABLE, cache=False)
    assert jit_calls == [] and k.compiled() == []
    assert k["second"] == ("compiled", "second")
    assert jit_calls == [("second", "sig-2", False)] and k.compiled() == ["second"]


def test_a_kernel_compiles_once_with_its_signature_and_cache_setting(jit_calls):
    k = base.Jitted(TABLE, cache=True)
    assert k["first"] is k["first"]
    assert jit_calls == [("first", "sig-1", True)]


def test_threads_asking_at_once_share_one_compilation(jit_calls):
    k = base.Jitted(TABLE, cache=False)
    got = []
    threads = [threading.Thread(target=lambda: got.append(k["first"])) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(g is got[0] for g in got)
    assert jit_calls == [("first", "sig-1", False)]


def test_an_unknown_kernel_name_is_a_key_error_and_compiles_nothing(jit_calls):
    k = base.Jitted(TABLE, cache=False)
    assert "third" not in k and "first" in k
    with pytest.raises(KeyError):
        k["third"]
    assert jit_calls == []


def test_loading_a_family_compiles_none_of_its_kernels(jit_calls, monkeypatch):
    monkeypatch.setattr(base, "device_details", lambda: {"device": "none (a test)"})
    monkeypatch.setattr(optim, "device_details", lambda: {"device": "none (a test)"}, raising=False)
    for family in (fold.CudaFold, optim.CudaOptim):
        k = family("identical")
        assert k._k.compiled() == [] and all(name in k._k for name in family.KERNELS)
    assert jit_calls == []
