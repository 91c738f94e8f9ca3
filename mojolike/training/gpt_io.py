"""GPT weights in Hugging Face's GPT-2 layout: safetensors files (no pickle) and their config.json.

`load` (`GPT.from_safetensors`) reads in three steps, so a file that does not fit
the config is refused by name before any tensor data is read: the config (the
`config` dict, else the config.json beside the file), then the file's header (every
name, shape and dtype, through `safe_open`'s `keys()` and `get_slice`), and only
then the tensors. Names are taken with or without the "transformer." prefix
(Hugging Face hub files omit it); "lm_head.weight" is accepted only equal to
transformer.wte.weight bit for bit (the head is tied); Hugging Face's non-parameter
buffers "h.{l}.attn.bias" (the causal mask) and "h.{l}.attn.masked_bias" are
ignored. Only F32 tensors are read: F16 and BF16 (mixed precision) are not yet
covered.

config.json keys read: n_layer, n_head, n_embd, vocab_size, n_positions (required),
layer_norm_epsilon (default 1e-5), and this library's own "bias" (default true)
and "dropout" (default 0.0: Hugging Face's resid_pdrop / attn_pdrop / embd_pdrop
are not read); "model_type", when present, must be "gpt2", "activation_function"
one of GELU's tanh forms ("gelu_new", "gelu_pytorch_tanh"), "tie_word_embeddings"
true. Other keys are ignored. `save` (`GPT.save_safetensors`) writes the tensors
with the "transformer." names and metadata {"format": "pt"} (what Hugging Face's
loader expects), and config.json with those keys plus "model_type": "gpt2"; each
file is written whole or not at all (a temporary file renamed over it).

Reproducibility: the tensors are stored and read back as their float32 bits.

>>> import os, tempfile
>>> from mojolike.training.gpt import GPT
>>> d = tempfile.mkdtemp()
>>> model = GPT(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8)
>>> model.save_safetensors(os.path.join(d, "model.safetensors"))
>>> sorted(os.listdir(d))
['config.json', 'model.safetensors']
>>> again = GPT.from_safetensors(os.path.join(d, "model.safetensors"))
>>> all((a == b).all() for a, b in zip(model.parameters(), again.parameters()))
True
"""
from __future__ import annotations

import json
import os
import re

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from ..core import registry
from ..core.files import create_temp
from ..core.refusals import refuse

PREFIX = "transformer."
HEAD = "lm_head.weight"
# config.json's key for each GPT argument read from it, and the defaults of the optional ones
HF_KEYS = {"vocab_size": "vocab_size", "block_size": "n_positions", "n_layer": "n_layer",
           "n_head": "n_head", "n_embd": "n_embd", "layer_norm_epsilon": "layer_norm_epsilon",
           "bias": "bias", "dropout": "dropout"}
OPTIONAL = {"layer_norm_epsilon": 1e-5, "bias": True, "dropout": 0.0}
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh")
_BUFFER = re.compile(r"h\.(\d+)\.attn\.(bias|masked_bias)")
_HALF = ("F16", "BF16")


def _path(e: str, path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        refuse(e, "path", f"must be a str or os.PathLike, not {type(path).__name__}", value=path)
    p = os.fspath(path)
    if not isinstance(p, str) or not p or "\0" in p:
        refuse(e, "path", "must be a non-empty text path without NUL characters", value=path)
    return p


def config_path(path: str) -> str:
    """The config.json beside a weights file."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")


def _config(e: str, p: str, config) -> dict:
    """The checked GPT config from `config` or the config.json beside `p`."""
    from .gpt import check_config  # gpt imports this module
    where = "config"
    if config is None:
        where = "config.json"
        cp = config_path(p)
        try:
            with open(cp, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            refuse(e, "config.json", f"is absent beside {p} (looked for {cp}); pass config= "
                                     f"(a dict with Hugging Face's GPT-2 keys) instead")
        except (OSError, UnicodeDecodeError) as err:
            refuse(e, "config.json", f"cannot be read ({err})")
        try:
            config = json.loads(text)
        except json.JSONDecodeError as err:
            refuse(e, "config.json", f"is not valid JSON ({err})")
    if not isinstance(config, dict):
        refuse(e, where, f"must be a JSON object (a dict) of GPT-2 config keys, not "
                         f"{type(config).__name__}")

    def name(arg: str) -> str:
        return f'{where}["{HF_KEYS.get(arg, arg)}"]'

    for key, want in (("model_type", ("gpt2",)), ("activation_function", TANH_GELU),
                      ("tie_word_embeddings", (True,))):
        if key in config and not any(config[key] is w or config[key] == w and
                                     type(config[key]) is type(w) for w in want):
            refuse(e, f'{where}["{key}"]', f"must be {' or '.join(map(repr, want))}: GPT is "
                                           f"GPT-2 with the tanh GELU and a tied head",
                   value=config[key])
    args = {}
    for arg, key in HF_KEYS.items():
        if key in config:
            args[arg] = config[key]
        elif arg in OPTIONAL:
            args[arg] = OPTIONAL[arg]
        else:
            refuse(e, name(arg), f"is missing (GPT reads {', '.join(HF_KEYS.values())})")
    return check_config(e, seed=0, name=name, **args)


def _header(e: str, f, expected: dict[str, tuple[int, ...]], n_layer: int) -> dict[str, str]:
    """{model name: file name} of the file's tensors (and HEAD's, when present), once every
    name, shape and dtype is checked against `expected`; refused by name otherwise."""
    found: dict[str, str] = {}
    names = f.keys()  # the header's, in the file's order (safe_open is not iterable)
    for key in names:
        bare = key.removeprefix(PREFIX)
        m = _BUFFER.fullmatch(bare)
        if m and int(m.group(1)) < n_layer:
            continue  # Hugging Face's causal-mask buffers: not parameters
        name = HEAD if key == HEAD else PREFIX + bare
        if name not in expected and name != HEAD:
            refuse(e, key, f"is not a parameter of this config's GPT (it has "
                           f"{len(expected)} tensors, {next(iter(expected))} first)")
        if name in found:
            refuse(e, key, f"is stored twice (as {found[name]} and {key}): with and without "
                           f"the '{PREFIX}' prefix")
        found[name] = key
    for name in expected:
        if name not in found:
            refuse(e, name, "is missing from the file (names are Hugging Face GPT-2's, with or "
                            "without the 'transformer.' prefix)")
    for name, key in found.items():
        s = f.get_slice(key)
        want = expected[PREFIX + "wte.weight"] if name == HEAD else expected[name]
        dtype, shape = s.get_dtype(), tuple(s.get_shape())
        if dtype in _HALF:
            refuse(e, key, f"is {dtype}: mixed precision (half-precision weights) is not yet "
                           f"covered; convert the file to F32")
        if dtype != "F32":
            refuse(e, key, f"is {dtype}; GPT's parameters are F32 (float32)")
        if shape != want:
            refuse(e, key, f"has shape {shape} but this config's GPT needs {want}")
    return found


def _read(f, key: str) -> np.ndarray:
    """One tensor's data as a writable native float32 C-contiguous array (the only place that
    reads tensor data)."""
    t = f.get_tensor(key)
    if t.dtype == np.float32 and t.flags.c_contiguous and t.flags.writeable and t.flags.aligned:
        return t
    return np.array(t, np.float32, order="C")


def load(e: str, cls, path, config, backend, numeric_mode):
    """`GPT.from_safetensors(path, config=None, *, backend=None, numeric_mode=None)`."""
    from .gpt import parameter_shapes
    p = _path(e, path)
    registry.resolve(e, backend, numeric_mode)  # an unknown backend before any reading
    cfg = _config(e, p, config)
    expected = parameter_shapes(cfg)
    try:
        opened = safe_open(p, framework="np")  # reads and checks the header only
    except FileNotFoundError:
        refuse(e, "path", "does not exist", value=p)
    except (OSError, SafetensorError) as err:
        refuse(e, "path", f"is not a readable safetensors file ({err})", value=p)
    with opened as f:
        found = _header(e, f, expected, cfg["n_layer"])
        params = [_read(f, found[name]) for name in expected]
        if HEAD in found:
            head = _read(f, found[HEAD])
            if not np.array_equal(head.view(np.uint32), params[0].view(np.uint32)):
                refuse(e, HEAD, "differs from transformer.wte.weight: an untied head is not "
                                "covered (GPT's head is the token embedding)")
    model = cls.__new__(cls)
    model._setup(cfg, backend, numeric_mode)
    model._params = params
    return model


def hf_config(model) -> dict:
    """config.json's content for `model`."""
    c = model.config
    return {"model_type": "gpt2", "vocab_size": c["vocab_size"], "n_positions": c["block_size"],
            "n_embd": c["n_embd"], "n_layer": c["n_layer"], "n_head": c["n_head"],
            "layer_norm_epsilon": c["layer_norm_epsilon"], "activation_function": "gelu_new",
            "tie_word_embeddings": True, "bias": c["bias"], "dropout": c["dropout"]}


def _write(e: str, final: str, write, prefix: str) -> None:
    """write(temporary path) then rename it over `final`: whole or absent."""
    folder = os.path.dirname(os.path.abspath(final))
    try:
        fd, tmp = create_temp(folder, prefix, ".tmp")
        os.close(fd)
    except OSError as err:
        refuse(e, "path", f"cannot be written ({err})", value=final)
    try:
        write(tmp)
        os.replace(tmp, final)
    except OSError as err:
        os.unlink(tmp)
        refuse(e, "path", f"cannot be written ({err})", value=final)
    except BaseException:
        os.unlink(tmp)
        raise


def save(e: str, model, path) -> None:
    """`model.save_safetensors(path)`: the tensors, then config.json beside them."""
    p = _path(e, path)
    tensors = dict(model.named_parameters())
    text = json.dumps(hf_config(model), indent=2) + "\n"

    def config_file(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    _write(e, p, lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}), ".gpt-")
    _write(e, config_path(p), config_file, ".config-")
