"""The configuration of a training run: `TrainConfig` (the model, the data, the optimizer, the
scaler, the gate and the certification hooks), checked whole when it is made.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from ..core import checks
from ..core.entry import entry_point
from ..core.refusals import refuse
from ..oracles.fold import CHUNK

MODELS = ("tiny", "gpt")
# the options only one model takes (the other's configuration refuses them by name)
MODEL_OPTIONS = {"tiny": ("d_model", "d_hidden", "chunk_size"),
                 "gpt": ("n_layer", "n_head", "n_embd", "block_size")}
# --precision: the type the forward reads the weights in (float32 masters either way)
PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
GPT_DEFAULTS = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.0,
                "microbatches": 1}


@dataclass(frozen=True, init=False)
class TrainConfig:
    """Everything that decides a training run's bits (the backend does not).

    Model (`mojolike.models.TinyLM`): `d_model`, `d_hidden` (None: 4 d_model),
    `vocab` (256: the text's bytes; below 256 each byte is folded to byte mod
    vocab, so 32 maps upper and lower case letters onto 1..26 and the space onto
    0), `dropout` after the MLP, `chunk_size` of the head, `seed` of the
    initializer. Data (`mojolike.data`, the shipped text): step s (counted from 1)
    takes the `batch_size` windows of `seq_len` tokens at rows (s - 1) batch_size
    onwards, split into `microbatches` equal parts. Optimizer: AdamW with
    `betas`, `eps`, `weight_decay` on the matrices only (fc1, fc2 and head
    weights; norms, biases and the embedding take none), `WarmupCosineLR(lr,
    warmup_steps, total_steps=steps, min_lr)` (warmup_steps None: min(10, steps)),
    the global-norm clip `max_norm`
    (None: no clip). Loss scaling: `GradScaler(init_scale, growth_interval=...)`.
    The gate: `OutlierDetector(outlier_window)` on the loss; a step whose loss
    z-score exceeds `skip_lossz` is not applied (None: never). Dropout draws from
    `Generator(dropout_seed)`, one stream per step. `overflow_steps`: steps whose
    scaled gradients get an inf written into one cell after the backward (as an
    overflowing float16 backward would), so that the scaler skips them and backs
    off: a certification hook.

    `model` "gpt" trains `mojolike.models.GPT` instead (`n_layer`, `n_head`,
    `n_embd`, `block_size`: defaults 2, 2, 32, 32; the windows are block_size
    tokens, so `seq_len` is block_size; `vocab` is the GPT's vocab_size; `dropout`
    defaults to 0.0 and `microbatches` to 1; weight decay on every parameter of
    dimension >= 2, as nanoGPT's recipe: wte, wpe and the four Conv1D weights of
    each layer). The options of the other model are refused by name (TinyLM's
    d_model, d_hidden, chunk_size; the GPT's four). A "tiny" configuration's
    `to_dict` and `key` are today's, without the GPT's fields.

    `precision` "bf16" or "fp16" trains the model with float32 master weights and
    bfloat16 / float16 twins (`mojolike.mixed_precision.with_master_weights`): the
    forward reads the twins, AdamW steps the masters and writes each twin in the same
    pass, the GradScaler scales the loss as in every run; "fp32" (the default, left
    out of `to_dict` and `key`) reads the masters.

    Every real is kept as the shortest decimal that reads back to the binary32
    value the run uses (skip_lossz: as a binary64 float, which the gate compares
    with), so spellings of the same values (lr=1, 1.0, numpy.float32(1),
    Fraction(1)) make equal configurations with one `key`.

    Reproducibility: a run's records and final state are a function of this
    configuration and the shipped text alone (contracts/train.md).

    >>> c = TrainConfig(steps=12, d_model=8)
    >>> c.d_hidden, c.tokens_per_step, TrainConfig.from_dict(c.to_dict()) == c
    (32, 2048, True)
    >>> g = TrainConfig(model="gpt", steps=4)
    >>> g.n_layer, g.n_embd, g.seq_len, g.dropout, g.microbatches, g.d_model
    (2, 32, 32, 0.0, 1, None)
    """

    _ENTRY = "mojolike.train.TrainConfig"
    steps: int = 200
    d_model: int = 32
    d_hidden: int | None = None
    vocab: int = 256
    dropout: float = 0.1
    chunk_size: int = 1024
    seed: int = 0
    batch_size: int = 16
    seq_len: int = 128
    microbatches: int = 2
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int | None = None
    betas: tuple = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    max_norm: float | None = 1.0
    init_scale: float = 65536.0
    growth_interval: int = 2000
    outlier_window: int = 16
    skip_lossz: float | None = None
    dropout_seed: int = 1
    overflow_steps: tuple = ()
    model: str = "tiny"
    n_layer: int | None = None
    n_head: int | None = None
    n_embd: int | None = None
    block_size: int | None = None
    precision: str = "fp32"

    # the keywords are the fields, known once the class is made
    @entry_point(takes=lambda: [f.name for f in dataclasses.fields(TrainConfig)])
    def __init__(self, *, entry, **options):
        model = options.get("model", "tiny")
        if model not in MODELS:
            refuse(entry, "model", f"must be one of {', '.join(map(repr, MODELS))}", value=model)
        other = next(m for m in MODELS if m != model)
        for name in MODEL_OPTIONS[other]:
            if options.get(name) is not None:
                refuse(entry, name, f"does not apply to model {model!r} (it is an option of "
                                    f"model {other!r})",
                       value=options[name])
        defaults = GPT_DEFAULTS if model == "gpt" else {}
        if model == "gpt" and options.get("seq_len") is not None and \
                options.get("seq_len") != options.get("block_size", GPT_DEFAULTS["block_size"]):
            refuse(entry, "seq_len", "is block_size for model 'gpt' (its windows are the "
                                     "model's block)", value=options["seq_len"])
        values = {f.name: options.get(f.name, defaults.get(f.name, f.default))
                  for f in dataclasses.fields(self)}
        if model == "gpt":
            values.update({k: None for k in MODEL_OPTIONS["tiny"]})
        for name, value in _checked(entry, values).items():
            object.__setattr__(self, name, value)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    @entry_point()
    def to_dict(self, **unknown) -> dict:
        """The configuration as plain JSON values (tuples as lists; every real a float); the
        other model's options left out (a "tiny" configuration has no `model` key either, as
        before the GPT: the same key, the same run card profile)."""
        skip = MODEL_OPTIONS["gpt"] + ("model",) if self.model == "tiny" else MODEL_OPTIONS["tiny"]
        skip += ("precision",) if self.precision == "fp32" else ()
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self).items() if k not in skip}

    @classmethod
    @entry_point()
    def from_dict(cls, d, **unknown) -> TrainConfig:
        """The configuration `to_dict` wrote (unknown keys are refused by name)."""
        if not isinstance(d, dict):
            refuse(cls._ENTRY, "config", f"must be a dict as to_dict() returns, not "
                                         f"{type(d).__name__}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    @entry_point()
    def key(self, **unknown) -> str:
        """The configuration as canonical JSON (what a checkpoint and a run card name): the
        same text for every spelling of the same binary32 values (lr=1, 1.0, 1.00000001)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))


def _shortest(r: float) -> float:
    """The binary32 value `r` as the float of the shortest decimal text that reads back to it
    (3e-3 for binary32(0.003)): one value, and one key text, per binary32 value the run uses,
    whichever spelling (1, 1.0, numpy.float32(1), Fraction(1)) gave it."""
    d = float(str(np.float32(r)))
    same = np.float32(d).view(np.uint32) == np.float32(r).view(np.uint32)
    return d if same else r  # a decimal that double rounding moves: the exact value instead


def _checked(e: str, v: dict) -> dict:
    """Every option checked (refused by its name), in the form the run uses."""
    whole = lambda name, low=1, high=None: checks.integer(e, name, v[name], low=low, high=high)
    out = dict(v)
    if v["model"] == "gpt":
        for name in MODEL_OPTIONS["gpt"]:
            out[name] = whole(name)
        if out["n_embd"] % out["n_head"]:
            refuse(e, "n_head", f"does not divide n_embd={out['n_embd']} (each head has "
                                f"n_embd // n_head features)", value=v["n_head"])
        v = dict(v, seq_len=out["block_size"])
        out["seq_len"] = out["block_size"]
        return _common(e, v, out, whole)
    for name in ("d_model",):
        out[name] = whole(name)
    if v["d_hidden"] is not None:
        out["d_hidden"] = whole("d_hidden")
    else:
        out["d_hidden"] = 4 * out["d_model"]
    out["chunk_size"] = whole("chunk_size", CHUNK)
    if out["chunk_size"] % CHUNK:
        refuse(e, "chunk_size", "must be a multiple of 1024", value=v["chunk_size"])
    return _common(e, v, out, whole)


def _common(e: str, v: dict, out: dict, whole) -> dict:
    """The options both models take."""
    if v["precision"] not in PRECISIONS:
        refuse(e, "precision", f"must be one of {', '.join(map(repr, PRECISIONS))}",
               value=v["precision"])
    for name in ("steps", "batch_size", "seq_len", "microbatches", "growth_interval",
                 "outlier_window"):
        out[name] = whole(name)
    out["vocab"] = whole("vocab", 2, 256)
    for name in ("seed", "dropout_seed"):
        out[name] = whole(name, 0, 2**64 - 1)
    out["warmup_steps"] = min(10, out["steps"]) if v["warmup_steps"] is None else \
        whole("warmup_steps", 0, out["steps"])
    if out["batch_size"] % out["microbatches"]:
        refuse(e, "microbatches", f"must divide batch_size={out['batch_size']} (equal microbatches)",
               value=v["microbatches"])
    real = lambda name, x, **bounds: _shortest(checks.real32(e, name, x, **bounds))
    out["dropout"] = real("dropout", v["dropout"], low=0.0, high=1.0, high_open=True,
                          what="in [0, 1)")
    for name in ("lr", "eps", "weight_decay"):
        out[name] = real(name, v[name], low=0.0)
    out["min_lr"] = real("min_lr", v["min_lr"], low=0.0, high=checks.real32(e, "lr", v["lr"]),
                         what="in [0, lr]")
    if v["max_norm"] is not None:
        out["max_norm"] = real("max_norm", v["max_norm"], low=0.0)
    out["init_scale"] = real("init_scale", v["init_scale"], low=0.0)
    if out["init_scale"] == 0.0:
        refuse(e, "init_scale", "must be > 0", value=v["init_scale"])
    if v["skip_lossz"] is not None:
        checks.real32(e, "skip_lossz", v["skip_lossz"])
        # the gate compares the detector's binary64 z-score with it: its binary64 value
        out["skip_lossz"] = float(checks.exact(e, "skip_lossz", v["skip_lossz"]))
    b = v["betas"]
    if not isinstance(b, tuple) or len(b) != 2:
        refuse(e, "betas", "must be a pair (beta1, beta2)", value=b)
    out["betas"] = tuple(real(f"betas[{i}]", x, low=0.0, high=1.0, high_open=True,
                              what="in [0, 1)") for i, x in enumerate(b))
    s = v["overflow_steps"]
    if not isinstance(s, tuple):
        refuse(e, "overflow_steps", "must be a tuple of step numbers", value=s)
    steps = [checks.integer(e, "overflow_steps", x, low=1, high=out["steps"]) for x in s]
    if steps != sorted(set(steps)):
        refuse(e, "overflow_steps", "must be increasing, each step once", value=s)
    out["overflow_steps"] = tuple(steps)
    return out
