"""Every entry point is declared once (mojolike.core.entry): the declaration names it, derives
its keywords from its signature and refuses any other keyword by name before the body runs;
one table holds the torch options mojolike refuses, and nothing else spells their wording."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest
from test_public_keywords import BOGUS, CASES, REFUSED_TOGETHER, instances

import mojolike
from mojolike.core import entry as entry_module
from mojolike.core.entry import TORCH, declared, entry_point

LIBRARY = Path(mojolike.__file__).parent
SOURCES = sorted(LIBRARY.rglob("*.py"))


def _methods() -> list[tuple[str, object]]:
    """(name, bound method) for every public method of the public classes, inherited ones
    included (the walk of test_public_keywords reads each class's own methods only)."""
    out = []
    for cls, inst in instances().items():
        for attr in dir(cls):
            raw = inspect.getattr_static(cls, attr)
            if attr.startswith("_") or isinstance(raw, property) or not callable(getattr(inst, attr)):
                continue
            owner = next(c for c in cls.__mro__ if attr in vars(c))
            if owner.__module__.split(".")[0] != "mojolike":
                continue  # a record's tuple or dataclass methods
            out.append((f"{cls.__qualname__}.{attr}", getattr(inst, attr)))
    return out


DECLARED = CASES + _methods()


def test_the_declaration_refuses_an_unknown_keyword_by_name_before_the_body_runs():
    seen = []

    @entry_point("mojolike.demo_entry")
    def demo(x, *, scale=2.0, entry, **unknown):
        seen.append(entry)
        x[...] = x * scale

    buf = np.float32([1.0, 2.0])
    with pytest.raises(mojolike.Refusal) as err:
        demo(buf, scael=3.0)
    assert (err.value.entry_point, err.value.option) == ("mojolike.demo_entry", "scael")
    assert str(err.value) == ("mojolike.demo_entry: scael is not a keyword of mojolike.demo_entry; "
                              "it takes x, scale.")
    assert seen == [] and buf.tolist() == [1.0, 2.0]
    demo(buf, scale=3.0)
    assert seen == ["mojolike.demo_entry"] and buf.tolist() == [3.0, 6.0]
    assert str(inspect.signature(demo)) == "(x, *, scale=2.0, **unknown)"


def test_a_refused_keyword_leaves_every_caller_buffer_of_a_step_untouched():
    w, g = np.float32([1.0, 2.0]), np.float32([0.5, -0.5])
    opt = mojolike.SGD(w, lr=0.1, backend="oracle")
    for bad in ({BOGUS: 1}, {"closure": lambda: 0.0}):
        with pytest.raises(mojolike.Refusal) as err:
            opt.step(g, **bad)
        assert err.value.entry_point == "mojolike.SGD.step" and err.value.option in bad
    assert w.tolist() == [1.0, 2.0] and g.tolist() == [0.5, -0.5] and opt.t == 0


def test_the_hidden_entry_parameter_is_refused_like_any_unknown_keyword():
    with pytest.raises(mojolike.Refusal) as err:
        mojolike.fold(np.float32([1.0]), entry="mojolike.other")
    assert (err.value.entry_point, err.value.option) == ("mojolike.fold", "entry")


@pytest.mark.parametrize("name, fn", DECLARED, ids=[n for n, _ in DECLARED])
def test_every_public_callable_is_declared_once(name, fn):
    decl = declared(fn)
    assert decl is not None, f"{name} has no entry_point declaration"
    inner = getattr(fn, "__func__", fn.__init__ if inspect.isclass(fn) else fn).__wrapped__
    assert declared(inner) is None, f"{name} is declared twice"
    assert "entry" not in inspect.signature(fn).parameters


def _calls_named(tree, name: str) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and (
        isinstance(n.func, ast.Name) and n.func.id == name
        or isinstance(n.func, ast.Attribute) and n.func.attr == name)]


def test_no_module_checks_keywords_by_hand():
    found = {str(p.relative_to(LIBRARY)): _calls_named(ast.parse(p.read_text()), "keywords")
             for p in SOURCES if p != Path(entry_module.__file__)}
    assert {p: lines for p, lines in found.items() if lines} == {}


def _entry_names() -> set[str]:
    """The entry name every declared callable refuses under."""
    names = set()
    for name, fn in DECLARED:
        if name in REFUSED_TOGETHER:
            names.add(declared(fn).name)
            continue
        required = [p for p in inspect.signature(fn).parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                           p.POSITIONAL_OR_KEYWORD)]
        with pytest.raises(mojolike.Refusal) as err:
            fn(*[None] * len(required), **{BOGUS: 1})
        names.add(err.value.entry_point)
    return names


def _strings(path: Path) -> list[str]:
    return [n.value for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_no_entry_name_is_spelled_twice_in_the_library():
    names = _entry_names()
    assert {"mojolike.fold", "mojolike.SGD.step", "mojolike.Tape.Value.item"} <= names
    counts: dict[str, int] = {}
    for p in SOURCES:
        for s in _strings(p):
            if s in names:
                counts[s] = counts.get(s, 0) + 1
    assert {s: c for s, c in counts.items() if c > 1} == {}


def test_the_torch_options_wordings_live_in_the_table_alone():
    words = {o.reason for o in TORCH.values()} | {o.advice for o in TORCH.values()}
    spelled = {str(p.relative_to(LIBRARY)): sorted(w for w in words if any(
        w in s for s in _strings(p))) for p in SOURCES if p != Path(entry_module.__file__)}
    assert {p: w for p, w in spelled.items() if w} == {}


def test_one_torch_option_has_one_wording_everywhere_it_is_refused():
    g = [np.float32([3.0])]
    opt = mojolike.SGD([np.float32([1.0])], backend="oracle")
    calls = [lambda: mojolike.clip_grad_norm_(g, 1.0, foreach=True, backend="oracle"),
             lambda: mojolike.get_total_norm(g, foreach=True, backend="oracle"),
             lambda: mojolike.Adam([np.float32([1.0])], foreach=True, backend="oracle")]
    reasons = set()
    for call in calls:
        with pytest.raises(mojolike.Refusal) as err:
            call()
        assert err.value.option == "foreach"
        reasons.add(err.value.reason)
    assert reasons == {TORCH["foreach"].wording}
    closures = set()
    for call in (lambda: opt.step(g, closure=len),
                 lambda: mojolike.GradScaler().step(opt, g, closure=len)):
        with pytest.raises(mojolike.Refusal) as err:
            call()
        closures.add(err.value.reason)
    assert closures == {TORCH["closure"].wording}


@pytest.mark.parametrize("call, option", [
    (lambda: mojolike.SGD([np.float32([1.0])], foreach=None, fused=False, backend="oracle"), None),
    (lambda: mojolike.embedding(np.int64([0]), np.float32([[1.0]]), sparse=False,
                                max_norm=None), None),
    (lambda: mojolike.cross_entropy(np.float32([[0.0, 1.0]]), [1], weight=None,
                                    backend="oracle"), None),
    (lambda: mojolike.Generator(0, backend="oracle").dropout(np.float32([1.0]), 0.5,
                                                              training=True), None),
    (lambda: mojolike.cross_entropy(np.float32([[0.0, 1.0]]), [1], reduce=True), "reduce"),
    (lambda: mojolike.embedding(np.int64([0]), np.float32([[1.0]]), norm_type=1.0), "norm_type"),
    (lambda: mojolike.Generator(0).dropout(np.float32([1.0]), 0.5, inplace=True), "inplace"),
    (lambda: mojolike.SGD([np.float32([1.0])], amsgrad="no"), "amsgrad"),
])
def test_a_torch_option_at_torchs_default_is_accepted_and_any_other_value_refused(call, option):
    if option is None:
        call()
        return
    with pytest.raises(mojolike.Refusal) as err:
        call()
    assert err.value.option == option
