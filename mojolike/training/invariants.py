"""What a training run's configuration and state must satisfy before anything is allocated or
written: the arrays a checkpoint holds, the memory a configuration asks for, and the invariants
between the pieces of a trainer's state (`mojolike.train.Trainer` checks them in save and load).

`member_shapes(config, step)` is every array member of the checkpoint of `config` after `step`
steps, computed from the configuration alone (TinyLM's shapes, without building it).
`memory_estimate(config)` bounds the bytes a run holds at its peak, and `check_memory` refuses a
configuration above the budget: `memory_budget=` bytes where the entry point takes it, else the
environment variable MOJOLIKE_TRAIN_MEMORY (bytes), else half this machine's physical memory
(8 GiB where it cannot be read). `check_invariants` replays the scaler and the outlier detector
from the records and refuses a state whose pieces disagree.

>>> from mojolike.train import TrainConfig
>>> c = TrainConfig(d_model=8, vocab=32, seq_len=8, batch_size=2, microbatches=1)
>>> member_shapes(c, 3)["param.fc1.weight"], member_shapes(c, 3)["records"]
((dtype('float32'), (32, 8)), (dtype('float32'), (3, 6)))
"""
from __future__ import annotations

import math
import os

import numpy as np

from ..core import checks
from ..core.refusals import refuse
from ..optim.outlier import OutlierDetector
from ..optim.scaler import GradScaler
from ..oracles import f32

MEMORY_ENV = "MOJOLIKE_TRAIN_MEMORY"
_FALLBACK_MEMORY = 8 * 2**30
_F4 = np.dtype("<f4")
PARAMS = ("embed.weight", "norm1.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
          "norm2.weight", "head.weight")  # TinyLM.NAMES
RECORD_VALUES = 6


def param_shapes(c) -> dict[str, tuple[int, ...]]:
    """TinyLM's parameter shapes for the configuration `c` (models.TinyLM's docstring)."""
    d, h, v = c.d_model, c.d_hidden, c.vocab
    return dict(zip(PARAMS, ((v, d), (d,), (h, d), (h,), (d, h), (d,), (d,), (v, d))))


def member_shapes(c, step: int, order: tuple[str, ...] = PARAMS) -> dict[str, tuple]:
    """name -> (dtype, shape) of every array member of a checkpoint after `step` steps; the
    optimizer's moments follow the parameter `order` of its groups."""
    shapes = param_shapes(c)
    out = {f"param.{k}": (_F4, s) for k, s in shapes.items()}
    for name in ("exp_avg", "exp_avg_sq"):
        out.update({f"optimizer.{name}.{i}": (_F4, shapes[k]) for i, k in enumerate(order)})
    out["records"] = (_F4, (step, RECORD_VALUES))
    return out


def memory_estimate(c) -> dict[str, int]:
    """Bytes at the peak of a step, in two parts: 'parameters' (the parameters, AdamW's two
    moments, the step's rollback copy of all three, each microbatch's gradients and their
    sum) and 'batch' (one step's tokens and targets, the embedding rows' gradients of the
    whole batch, one microbatch's activations and their gradients)."""
    d, h, v = c.d_model, c.d_hidden, c.vocab
    p = sum(math.prod(s) for s in param_shapes(c).values())
    m, n = c.microbatches, c.batch_size * c.seq_len
    rows = n // m
    per_row = 12 * d + 4 * h + 2 * min(v, c.chunk_size)  # values and gradients of the block
    return {"parameters": 4 * p * (6 + m + 1),
            "batch": 8 * 5 * n + 48 * c.batch_size + 4 * 2 * n * d + 4 * rows * per_row}


def memory_budget(entry: str, given=None) -> int:
    """The budget in bytes: `given`, else $MOJOLIKE_TRAIN_MEMORY, else half the physical memory."""
    if given is not None:
        return checks.integer(entry, "memory_budget", given, low=1, what="a positive number of "
                                                                          "bytes")
    text = os.environ.get(MEMORY_ENV)
    if text is not None:
        try:
            value = int(text.strip())
        except ValueError:
            value = 0
        if value < 1:
            refuse(entry, MEMORY_ENV, "must be a positive number of bytes", value=text)
        return value
    total = checks._memory_bytes()
    return _FALLBACK_MEMORY if total is None else total // 2


def check_memory(entry: str, c, given=None) -> None:
    """Refuse a configuration whose `memory_estimate` exceeds the budget, naming the options of
    its larger part; nothing has been allocated yet."""
    need = memory_estimate(c)
    budget = memory_budget(entry, given)
    total = sum(need.values())
    if total <= budget:
        return
    big = max(need, key=need.get)
    option = "d_model, d_hidden" if big == "parameters" else "batch_size"
    refuse(entry, option, f"ask for about {total:,} bytes ({need['parameters']:,} for the "
                          f"parameters, moments and gradients, {need['batch']:,} for one step's "
                          f"batch and activations), more than the memory budget of {budget:,} "
                          f"bytes; make the run smaller, or raise the budget with memory_budget= "
                          f"or the environment variable {MEMORY_ENV} (bytes)")


# -- invariants between the pieces ------------------------------------------------------------------
def check_invariants(entry: str, c, step: int, records: np.ndarray, lossz: list, optimizer: dict,
                     scaler: dict, generator: dict, outlier: dict, *, contract: bool = True,
                     tensors: int = len(PARAMS)) -> None:
    """Refuse a state whose pieces disagree: records (step rows: loss, norm, lr, scale,
    skipped, gated) and z-scores per step; the generator at counter `step` (one stream per
    step) of the configuration's seed; the optimizer's t and every tensor's count equal to
    the steps the records applied (a learning rate recorded); the scaler's scale and growth
    tracker as its update() makes them from the records' skips; the outlier detector's state,
    the z-scores and the gate as the losses make them. With `contract`, also that a step was
    applied exactly when it was neither skipped nor gated, with a norm exactly when applied
    under a clip (save leaves this out: the suite's negative controls break it on purpose).
    Every dict is a state_dict() (the optimizer's: t and steps)."""
    if records.shape != (step, RECORD_VALUES) or len(lossz) != step:
        refuse(entry, "records", f"must hold {step} records of {RECORD_VALUES} values, one per "
                                 f"step taken")
    if generator != {"seed": c.dropout_seed, "counter": step}:
        refuse(entry, "generator", f"must be at counter {step} (one stream per step taken) of "
                                   f"seed {c.dropout_seed}, not {generator}")
    loss, norm, lr, scales, skipped, gated = (records[:, i].astype(np.float64) for i in range(6))
    for name, flags in (("skipped", skipped), ("gated", gated)):
        if not np.isin(flags, (0.0, 1.0)).all():
            refuse(entry, "records", f"hold a '{name}' value other than 0 or 1")
    applied = ~np.isnan(lr)
    if contract and ((applied != ((skipped == 0.0) & (gated == 0.0))).any() or
                     (~applied & ~np.isnan(norm)).any() or
                     (c.max_norm is not None and (applied & np.isnan(norm)).any())):
        refuse(entry, "records", "hold a learning rate or norm where no step was applied (a "
                                 "skipped or gated step), or none where one was")
    t = int(applied.sum())
    if optimizer.get("t") != t or optimizer.get("steps") != [t] * tensors:
        refuse(entry, "optimizer", f"must have taken the {t} step(s) the records applied, every "
                                   f"tensor each of them (t {optimizer.get('t')}, steps "
                                   f"{optimizer.get('steps')})")
    _check_scaler(entry, c, scales, skipped, scaler)
    _check_outlier(entry, c, loss, gated, lossz, outlier)


def _check_scaler(entry: str, c, scales, skipped, state: dict) -> None:
    fresh = GradScaler(c.init_scale, growth_interval=c.growth_interval).state_dict()
    fixed = ("growth_factor", "backoff_factor", "growth_interval")
    if {k: state.get(k) for k in fixed} != {k: fresh[k] for k in fixed}:
        refuse(entry, "scaler", f"must have the configuration's factors and interval "
                                f"{ {k: fresh[k] for k in fixed} }")
    scale, tracker = fresh["scale"], 0
    for i, skip in enumerate(skipped):  # GradScaler.update, operation for operation
        if skip:
            scale, tracker = f32.round_float(scale * fresh["backoff_factor"]), 0
        elif tracker + 1 == fresh["growth_interval"]:
            grown = f32.round_float(scale * fresh["growth_factor"])
            scale, tracker = (grown if math.isfinite(grown) else scale), 0
        else:
            tracker += 1
        if scales[i] != scale:
            refuse(entry, "scaler", f"record {i + 1} holds scale {scales[i]!r} but the skips "
                                    f"before it make {scale!r}")
    if state.get("scale") != scale or state.get("_growth_tracker") != tracker:
        refuse(entry, "scaler", f"must be at scale {scale!r} with growth tracker {tracker}, as the "
                                f"records' skips make it")


def _check_outlier(entry: str, c, loss, gated, lossz: list, state: dict) -> None:
    d = OutlierDetector(c.outlier_window)
    for i, x in enumerate(loss):
        z = d.update(float(x))
        given = lossz[i]
        if not isinstance(given, float) or not (given == z or (math.isnan(given) and
                                                               math.isnan(z))):
            refuse(entry, "lossz", f"of step {i + 1} must be {z!r}, the z-score of the records' "
                                   f"losses")
        if bool(gated[i]) != (c.skip_lossz is not None and z > c.skip_lossz):
            refuse(entry, "records", f"step {i + 1}'s gate disagrees with its z-score {z!r}")
    if state != d.state_dict():
        refuse(entry, "outlier", "must be the detector's state after the records' losses")
