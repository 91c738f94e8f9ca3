"""Entry points, each declared once: its name, the keywords it takes, the torch options it refuses.

`@entry_point("mojolike.fold")` gives a public function its entry name (what every
refusal of the call starts with), derives the keywords it takes from its own
signature (every parameter but `**unknown`) and refuses any other keyword by name
before the body runs, so a refused call has touched nothing. A keyword-only
parameter named `entry` receives the name; it is hidden from the signature, and
the signature is otherwise the function's own.

A method is declared with `@entry_point()`: its name is its class's entry, then
`.method` (a constructor's is the class's entry itself). A class's entry is its
`_ENTRY` attribute, else `mojolike.<ClassName>` (a subclass of a class without
`_ENTRY` is named by its own class name).

`TORCH` is the one table of the torch options mojolike refuses, each with torch's
default (given as that, the option is accepted and dropped), one wording and its
advice; a declaration names the ones its entry point refuses (`torch=`), and a
body whose parameter is a torch option checks it with `torch_option`.

Reproducibility: a declaration changes nothing a call computes; it only decides,
from the keyword names and the torch options' values, whether the call runs.

>>> from mojolike.core.refusals import Refusal
>>> @entry_point("mojolike.demo", torch=("foreach",))
... def demo(x, *, scale=2, entry, **unknown):
...     return entry, x * scale
>>> demo(3), demo(3, scale=1, foreach=False)
(('mojolike.demo', 6), ('mojolike.demo', 3))
>>> for bad in ({"scael": 1}, {"foreach": True}):
...     try:
...         demo(3, **bad)
...     except Refusal as e:
...         print(e.option, "|", e)
scael | mojolike.demo: scael is not a keyword of mojolike.demo; it takes x, scale.
foreach | mojolike.demo: foreach=True is not covered: mojolike runs one certified algorithm (contracts/optim.md); drop the option.
>>> import inspect; inspect.signature(demo)
<Signature (x, *, scale=2, **unknown)>
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

from . import checks
from .refusals import Refusal, refuse

ENTRY_PARAMETER = "entry"  # the hidden keyword-only parameter that receives the entry name


# -- the torch options mojolike refuses ---------------------------------------------------------
@dataclass(frozen=True)
class TorchOption:
    """One torch option: what the value is compared with (`accepts`), torch's `default`, the
    `reason` it is refused and the `advice`.

    accepts: "flag" (None, or a bool that is False; a value that is not a bool is refused as
    a switch), "is" (the default itself), "==" (the default or a value equal to it), "never"
    (refused whatever the value). The message shows the value for "flag" and "==".
    """

    accepts: str
    reason: str
    advice: str
    default: object = None

    @property
    def wording(self) -> str:
        return f"{self.reason}; {self.advice}"

    def check(self, entry: str, name: str, value) -> None:
        """Return when `value` is what mojolike does anyway; else refuse it by name."""
        if self.accepts == "flag":
            if value is not None and checks.switch(entry, name, value):
                refuse(entry, name, self.wording, value=value)
        elif self.accepts == "==":
            if value is not self.default and value != self.default:
                refuse(entry, name, self.wording, value=value)
        elif self.accepts == "is":
            if value is not self.default:
                refuse(entry, name, self.wording)
        else:
            refuse(entry, name, self.wording)


_ONE_ALGORITHM = "is not covered: mojolike runs one certified algorithm (contracts/optim.md)"
_DEFAULT_ONLY = "is not covered (only torch's default is)"
_REDUCTION = "pass reduction='mean', 'sum' or 'none' instead"
_DROP = "drop the option"

TORCH = {
    # the optimizers' and the clip's switches: None or False is what mojolike does
    "amsgrad": TorchOption("flag", "is not covered: AMSGrad is not part of contracts/optim.md",
                           _DROP),
    "foreach": TorchOption("flag", _ONE_ALGORITHM, _DROP),
    "fused": TorchOption("flag", _ONE_ALGORITHM, _DROP),
    "capturable": TorchOption("flag", _ONE_ALGORITHM, _DROP),
    "differentiable": TorchOption("flag", "is not covered: there is no autograd in mojolike",
                                  _DROP),
    # torch's ways of doing what mojolike does otherwise, whatever the value
    "closure": TorchOption("never", "is torch's way to re-evaluate the loss inside step",
                           "mojolike takes the gradients as an argument: compute the loss and "
                           "gradients first, then pass them to step"),
    "set_to_none": TorchOption("never", "is torch's way to drop .grad tensors",
                               "mojolike's gradients are the caller's arrays: zero them (this "
                               "call) or let them go"),
    "device": TorchOption("never", "is torch's device type",
                          "mojolike takes backend= (and follows the optimizer's backend when it "
                          "is not given)"),
    # F.cross_entropy's: None (torch's default) means unused
    "weight": TorchOption("is", "(per-class weights) is not covered by contracts/loss.md",
                          "only unweighted cross-entropy is certified"),
    "size_average": TorchOption("is", "is torch's deprecated spelling of reduction", _REDUCTION),
    "reduce": TorchOption("is", "is torch's deprecated spelling of reduction", _REDUCTION),
    # F.embedding's
    "max_norm": TorchOption("==", _DEFAULT_ONLY, _DROP),
    "norm_type": TorchOption("==", _DEFAULT_ONLY, _DROP, 2.0),
    "scale_grad_by_freq": TorchOption("==", _DEFAULT_ONLY, _DROP, False),
    "sparse": TorchOption("==", _DEFAULT_ONLY, _DROP, False),
    # F.dropout's: their default is what the dropout does
    "training": TorchOption("is", "=False makes dropout the identity", "skip the call instead",
                            True),
    "inplace": TorchOption("is", "=True is not covered: dropout returns a new array",
                           "assign it back", False),
}


def torch_option(entry: str, name: str, value) -> None:
    """Refuse `value` of the torch option `name` unless it is torch's default (a body whose
    parameter is the option calls this where it checks it)."""
    TORCH[name].check(entry, name, value)


# -- declarations -------------------------------------------------------------------------------
def refuse_unknown(entry: str, names, takes: tuple[str, ...]) -> None:
    """Refuse the keywords `names`, which entry does not take (instead of ignoring them)."""
    names = sorted(str(k) for k in names)
    said = f"it takes {', '.join(takes)}" if takes else "it takes no keywords"
    raise Refusal(entry, ", ".join(names), f"is not a keyword of {entry}; {said}")


class Declaration:
    """What `entry_point` records: `name` (None for a method named by its class), the
    keywords it takes (`takes`), the torch options it refuses, its own refusals and
    whether the body refuses unknown keywords itself (`together`)."""

    def __init__(self, name, takes, torch, refuses, together):
        self.name, self._takes, self.torch = name, takes, tuple(torch)
        self.refuses, self.together = dict(refuses or {}), together
        unknown_torch = [n for n in self.torch if n not in TORCH]
        if unknown_torch:
            raise ValueError(f"{name}: {unknown_torch} are not in the table of torch options")

    @functools.cached_property
    def takes(self) -> tuple[str, ...]:
        return tuple(self._takes() if callable(self._takes) else self._takes)

    @functools.cached_property
    def _plain(self) -> frozenset:
        return frozenset(self.takes) - frozenset(self.torch) - frozenset(self.refuses)

    def check(self, entry: str, given: dict) -> dict:
        """The keywords the body gets: refused, before anything runs, when one is a refused
        torch option's value, one of the declaration's own refusals, or unknown; accepted
        torch options are dropped."""
        if self._plain.issuperset(given):
            return given
        given = dict(given)
        for name in self.torch:
            if name in given:
                TORCH[name].check(entry, name, given.pop(name))
        for name, reason in self.refuses.items():
            if name in given:
                refuse(entry, name, reason)
        unknown = [k for k in given if k not in self._plain]
        if unknown:
            refuse_unknown(entry, unknown, self.takes)
        return given


def class_entry(owner: type) -> str:
    """A class's entry name: its `_ENTRY`, else mojolike.<ClassName>."""
    return getattr(owner, "_ENTRY", None) or f"mojolike.{owner.__name__}"


def entry_point(name: str | None = None, *, also=(), takes=None, torch=(), refuses=None,
                together: bool = False):
    """Declare a public function (`name` its entry) or method (`name` None: named by its
    class, see the module docstring).

    also: keywords taken besides the parameters (ones `**unknown` forwards). takes: the
    keywords taken instead of the parameters' names (a tuple, or a function called once,
    at the first call, for names known only once the module is loaded). torch: the names
    in `TORCH` this entry refuses. refuses: {keyword: reason} refused whatever the value
    (options the entry sets itself). together: the body refuses unknown keywords itself,
    through `<function>.__entry__.check` (every rank of a group refuses together).
    """
    def declare(fn):
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        hidden = ENTRY_PARAMETER in sig.parameters
        if hidden and sig.parameters[ENTRY_PARAMETER].kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"{fn.__qualname__}: the entry parameter must be keyword-only")
        shown = [p for p in params if p.name != ENTRY_PARAMETER]
        method = bool(params) and params[0].name in ("self", "cls")
        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        names = tuple(p.name for p in shown[1 if method else 0:] if p.kind in keyword)
        decl = Declaration(name, takes if takes is not None else names + tuple(also), torch,
                           refuses, together)
        suffix = "" if fn.__name__ == "__init__" else f".{fn.__name__}"
        named: dict[type, str] = {}

        def entry_of(args) -> str:
            if name is not None:
                return name
            owner = args[0] if isinstance(args[0], type) else type(args[0])
            e = named.get(owner)
            if e is None:
                e = named[owner] = class_entry(owner) + suffix
            return e

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            e = entry_of(args)
            if kwargs and not decl.together:
                kwargs = decl.check(e, kwargs)
            if hidden:
                kwargs[ENTRY_PARAMETER] = e
            return fn(*args, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=shown)
        wrapper.__entry__ = decl
        return wrapper

    return declare


def declared(fn) -> Declaration | None:
    """The declaration of a public callable (a function, a bound method or a class's
    constructor), or None when it has none."""
    fn = getattr(fn, "__func__", fn)
    if isinstance(fn, type):
        fn = fn.__init__
    return getattr(fn, "__entry__", None)
