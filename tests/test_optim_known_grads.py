"""The registry's memory of the last gradients it checked (mojolike.optim.params.Registry._known):
a step with the same arrays skips the checks only while every one of them still holds."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

import mojolike
import mojolike.torch.optim as mto
from mojolike import Refusal


def _setup(owned: bool = False):
    params = [np.ones(5, np.float32), np.ones((2, 3), np.float32)]
    if owned:
        grads = [np.full(5, 0.5, np.float32), np.full((2, 3), 0.25, np.float32)]
    else:
        arena = np.zeros(100, np.float32)
        grads = [arena[3:8], arena[40:46].reshape(2, 3)]
        grads[0][...], grads[1][...] = 0.5, 0.25
    return params, grads


def test_a_repeated_step_reads_the_new_values_and_equals_a_fresh_optimizer():
    params, grads = _setup()
    twin = [p.copy() for p in params]
    opt = mojolike.Adam(params, lr=0.1, backend="cpu-numba")
    ref = mojolike.Adam(twin, lr=0.1, backend="cpu-numba")
    for k in range(3):
        for g in grads:
            g[...] = np.float32(k - 0.5)
        opt.step(grads)
        ref.step([g.copy() for g in grads])  # new arrays each step: never known
    for a, b in zip(params, twin):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("change", ["shape", "read_only", "strided", "overlap"])
def test_a_change_to_a_known_gradient_is_checked_again_and_refused(change):
    params, grads = _setup()
    opt = mojolike.Adam(params, lr=0.1, backend="cpu-numba")
    opt.step(grads, max_norm=1.0)  # the in-place clip: checked writable
    before = [p.copy() for p in params]
    if change == "shape":
        grads[1].shape = (3, 2)
        want = "grads[1]"
    elif change == "read_only":
        grads[0].flags.writeable = False
        want = "grads[0]"
    elif change == "strided":
        grads[1] = np.zeros((2, 6), np.float32)[:, ::2]
        want = "grads[1]"
    else:
        grads[1] = params[1]  # a gradient that is a parameter
        want = "grads[1] and params[1]"
    with pytest.raises(Refusal) as e:
        opt.step(grads, max_norm=1.0)
    assert e.value.option == want
    for a, b in zip(params, before):
        assert a.tobytes() == b.tobytes()


def test_an_array_that_owns_its_memory_is_followed_when_it_moves():
    params, grads = _setup(owned=True)
    opt = mojolike.SGD(params, lr=1.0, backend="cpu-numba")
    opt.step(grads)
    g0 = grads[0]
    try:  # numpy refuses to move an array that is weakly referenced; if it ever does not:
        g0.resize(1 << 16, refcheck=False)
        g0.resize(5, refcheck=False)  # back to its shape, maybe elsewhere
    except ValueError:
        pass
    g0[...] = 1.0
    opt.step(grads)
    assert params[0].tolist() == [-0.5] * 5


def test_the_registry_keeps_no_gradient_alive():
    params, grads = _setup(owned=True)
    opt = mojolike.Adam(params, lr=0.1, backend="cpu-numba")
    opt.step(grads)
    refs = [weakref.ref(g) for g in grads]
    del grads
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_nan_written_into_a_known_gradient_is_still_refused():
    params, grads = _setup()
    opt = mojolike.Adam(params, lr=0.1, backend="cpu-numba")
    opt.step(grads)
    before = [p.copy() for p in params]
    grads[1][1, 2] = np.nan
    with pytest.raises(Refusal) as e:
        opt.step(grads)
    assert e.value.option == "grads"
    for a, b in zip(params, before):
        assert a.tobytes() == b.tobytes()


def test_the_torch_adapter_follows_a_gradient_replaced_or_moved_between_steps():
    torch.manual_seed(0)
    ws = [torch.nn.Parameter(torch.randn(7)), torch.nn.Parameter(torch.randn(2, 3))]
    views = [w.detach().clone().numpy() for w in ws]
    opt = mto.AdamW(ws, lr=0.01, backend="cpu-numba")
    ref = mojolike.AdamW(views, lr=0.01, backend="cpu-numba")
    for k in range(4):
        if k == 2:
            ws[0].grad = torch.full((7,), 3.0)  # a new tensor
        elif k == 3:
            ws[1].grad.set_(torch.full((2, 3), -1.0))  # the same tensor, new memory
        else:
            for w in ws:
                w.grad = torch.full(w.shape, float(k) + 0.5) if w.grad is None else \
                    w.grad.fill_(float(k) + 0.5)
        opt.step()
        ref.step([w.grad.numpy().copy() for w in ws])
    for w, v in zip(ws, views):
        assert w.detach().numpy().tobytes() == v.tobytes()


def test_the_compiled_address_reader_equals_numpys_for_every_kind_of_array(monkeypatch):
    from mojolike.core import pieces
    read_only = np.zeros(4, np.float32)
    read_only.flags.writeable = False
    arrays = [np.zeros(3, np.float32), None, np.zeros(0, np.float32),
              np.zeros((4, 6), np.float32)[:, ::2], np.zeros((2, 3), np.float32), read_only,
              np.arange(10, dtype=np.float32)[3:]]
    want = tuple(None if a is None else a.__array_interface__["data"][0] for a in arrays)
    assert pieces._addresses is not None, "mojolike._buffers was not built"
    assert pieces.addresses_of(arrays) == want
    assert pieces.addresses_of(tuple(arrays)) == want
    monkeypatch.setattr(pieces, "_addresses", None)  # the fallback without a compiler
    assert pieces.addresses_of(arrays) == want


def test_a_parameter_resized_under_the_optimizer_is_refused_by_name():
    params, grads = _setup(owned=True)
    opt = mojolike.Adam(params, lr=0.1, backend="cpu-numba")
    opt.step(grads)
    start = params[0].__array_interface__["data"][0]
    params[0].resize(1 << 20, refcheck=False)
    with pytest.raises(Refusal) as e:  # its shape changed
        opt.step(grads)
    assert e.value.option == "params[0]" and "reallocated" in str(e.value)
    params[0].resize(5, refcheck=False)  # its shape back, its memory most likely elsewhere
    params[0][...] = 7.0
    moved = params[0].__array_interface__["data"][0] != start
    if moved:
        with pytest.raises(Refusal) as e:
            opt.step(grads)
        assert e.value.option == "params[0]"
        assert params[0].tolist() == [7.0] * 5
    else:  # realloc kept the block: the registry's pointer is still right, the step runs
        opt.step(grads)
        assert params[0].tolist() != [7.0] * 5
