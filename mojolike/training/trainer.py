"""The reference training run: TinyLM (or, with model="gpt", `mojolike.models.GPT`) on the
shipped text, certified end to end (`Trainer`). Everything model-specific (the parameters,
the groups, the input rows, the loss on the tape, the embeddings' gradients) is the
model's `train_models.TrainModel`; the step below is one code path for both.

One step s (counted from 1) of a `TrainConfig`:

1. The batch: the shipped text's windows at rows (s - 1) batch_size onwards
   (`mojolike.data`), bytes folded to byte mod vocab below 256, split into
   `microbatches` equal parts; the step's dropout stream is the generator's next.
2. Each microbatch j of b rows runs the model's forward on a tape (the model's
   graph, with its input rows, the embedding lookups, as the tape's leaf) with the head's loss
   'mean' over all N tokens of the step (num_items=N), dropout keyed by the
   element's position in the step (row offset j b), and the backward seeded with
   the loss scale. Its loss is the mean of its rows' losses over N.
3. The step's loss is the pairwise sum of the microbatch losses; its gradients
   the pairwise sum (`accumulate_grads`) of the microbatch gradients, except the
   embeddings': the input rows' gradients are concatenated and `embedding_backward`
   runs once over the whole step, so that its per-token folds see every position
   (the GPT's tied wte: the summed head gradient plus that, one addition).
4. The gate: the loss's z-score from `OutlierDetector`; above `skip_lossz` the
   step is not applied.
5. `GradScaler.step(optimizer, grads, max_norm, update_gate)`: the gradients read
   as g * inv_scale with the clip coefficient folded in, or the step skipped
   when their checksum is not finite; then `update()` (back off or grow).
6. One record: loss, total norm (NaN when not applied), the learning rate
   (NaN when not applied), the scale after update, skipped (the scaler found
   an overflow) and gated.

Reproducibility: every value is a certified op or one IEEE float32 operation in
an order fixed by the program, so the records and the final state have the
oracle's bits on every backend and thread count (numeric_mode="identical"), when
resumed from a checkpoint (`save` / `load`: one .npz, no pickle), and, when the
microbatches are aligned (`mojolike.accumulation_is_aligned` of their token
counts, and the scale a power of two, as GradScaler keeps it), for any such
split of the batch; with N a power of two the loss too. contracts/train.md.

>>> from mojolike.train import TrainConfig, Trainer
>>> cfg = TrainConfig(steps=3, d_model=8, d_hidden=16, vocab=32, batch_size=2, seq_len=8,
...                   microbatches=2, overflow_steps=(2,))
>>> t = Trainer(cfg, backend="cpu-numba")
>>> [(r.step, round(r.loss, 4), r.skipped, r.scale) for r in t.run()]
[(1, 3.3035, False, 65536.0), (2, 2.8163, True, 32768.0), (3, 2.4948, False, 32768.0)]
>>> oracle = Trainer(cfg, backend="oracle")
>>> _ = oracle.run(); oracle.digest() == t.digest()
True
"""
from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

import numpy as np

from ..core import cardformat, checks, registry
from ..core.entry import entry_point
from ..core.refusals import Refusal, refuse
from ..ops.rng import Generator
from ..ops.schedule import WarmupCosineLR
from ..optim.grads import accumulate_grads, accumulation_is_aligned
from ..optim.optimizers import AdamW
from ..optim.outlier import OutlierDetector
from ..optim.scaler import GradScaler
from ..oracles.fold import pairwise
from . import checkpoint as ckpt
from . import data, invariants, train_models
from .config import TrainConfig
from .rollback import Rollback, signals_held
from .tape import Tape

__all__ = ["FORMAT", "StepRecord", "TrainConfig", "Trainer"]

FORMAT = "mojolike.train.checkpoint.v1"
# TinyLM's: weight decay on the matrices; norms, biases and the embedding take none (the
# optimizer's order); each model's own lists are its train_models.TrainModel's
DECAY, NO_DECAY = train_models.TINY_DECAY, train_models.TINY_NO_DECAY
ON_TAPE = train_models.TINY_ON_TAPE
OVERFLOW_CELL = "fc2.weight"  # where overflow_steps write their inf (cell 0; the GPT's: its own)
RECORDS = ("loss", "norm", "lr", "scale", "skipped", "gated")


class StepRecord(NamedTuple):
    """One step: its number (from 1), the loss, the total norm and learning rate (NaN when the
    step was not applied), the scale after update, whether the scaler skipped it (an
    overflow), whether the gate closed, and the loss's z-score (NaN while the window fills)."""

    step: int
    loss: float
    norm: float
    lr: float
    scale: float
    skipped: bool
    gated: bool
    lossz: float


def microbatch_rows(index: int, rows: int) -> int:
    """The first row of microbatch `index` within its step: dropout is keyed by position."""
    return index * rows


def _found_inf(scaler: GradScaler, optimizer) -> bool:
    """Whether the scaler found an inf or NaN in this step's check (between step and update)."""
    return bool(scaler._states[id(optimizer)]["found_inf"])


class Trainer:
    """A training run of `TrainConfig` on `backend`: the model, AdamW (two groups), the
    schedule, the GradScaler, the outlier gate, the dropout generator and the data position.

    `run(until=None, callback=None)` takes steps up to `until` (default: the config's
    steps), calling `callback(record)` after each; `train_step()` takes one. `records`
    holds every step's `StepRecord`. `save(path)` writes one checkpoint file and
    `Trainer.load(path, backend=...)` continues from it. `outputs()` lists the run's
    certified values, `card()` renders them as a card (contracts/cardformat.py: one
    record per step and value, then the final parameters and states) and `digest()`
    is the card's md5: the same on every backend.

    Parameters: `config` (a TrainConfig; None: the defaults), `backend`, `numeric_mode`.
    Reproducibility: see the module docstring.

    >>> t = Trainer(TrainConfig(steps=2, d_model=4, vocab=16, batch_size=1, seq_len=4,
    ...                         microbatches=1), backend="oracle")
    >>> len(t.run()), t.step, t.optimizer.t
    (2, 2, 2)
    """

    _ENTRY = "mojolike.train.Trainer"

    @entry_point()
    def __init__(self, config=None, *, backend=None, numeric_mode=None, memory_budget=None,
                 entry, **unknown):
        e = entry
        c = TrainConfig() if config is None else config
        if not isinstance(c, TrainConfig):
            refuse(e, "config", f"must be a mojolike.train.TrainConfig, not {type(c).__name__}")
        k = registry.kernels(e, "layers", backend, numeric_mode)  # refuses a backend not here
        self.backend, self.numeric_mode = k.backend, k.numeric_mode
        on = self._on = {"backend": self.backend, "numeric_mode": self.numeric_mode}
        self.config, self.stream = c, data.default_stream()
        if c.seq_len > len(self.stream) - 1:
            refuse(e, "seq_len", f"must be at most {len(self.stream) - 1} (one window of the text)",
                   value=c.seq_len)
        train_models.for_config(c).check_memory(e, memory_budget)  # before the model is built
        self.train_model = tm = train_models.for_config(c, on, e)
        self.model = tm.model
        p = dict(self.model.named_parameters())
        self.schedule = WarmupCosineLR(c.lr, warmup_steps=c.warmup_steps, total_steps=c.steps,
                                       min_lr=c.min_lr, **on)
        self.optimizer = AdamW([{"params": [p[k] for k in tm.decay],
                                 "weight_decay": c.weight_decay},
                                {"params": [p[k] for k in tm.no_decay], "weight_decay": 0.0}],
                               lr=c.lr, betas=c.betas, eps=c.eps, lr_schedule=self.schedule,
                               twins=self._twins(tm), **on)
        self.scaler = GradScaler(c.init_scale, growth_interval=c.growth_interval, **on)
        self.generator = Generator(c.dropout_seed, **on)
        self.outlier = OutlierDetector(c.outlier_window)
        self.step = 0  # steps taken (applied or not): the data position is step * batch_size
        self.records: list[StepRecord] = []
        rows = c.batch_size // c.microbatches
        # whether the microbatches' sums are whole subtrees of the one batch's folds
        self.microbatch_invariant = accumulation_is_aligned([rows * c.seq_len] * c.microbatches,
                                                            c.microbatches)
        self._threads = getattr(k, "get_num_threads", None)
        self._tape = Tape(**on)
        self._handles = [self._tape.param(p[k]) for k in tm.on_tape]
        self._mark = self._tape.mark()
        self._rollback = Rollback(self)

    @staticmethod
    def _twins(tm):
        """The optimizer's twins= in its parameter order (None: a float32 run, no twins)."""
        twins = tm.twins()
        return [twins.get(k) for k in tm.decay + tm.no_decay] if twins else None

    def __repr__(self) -> str:
        return f"Trainer(step={self.step}/{self.config.steps}, backend={self.backend!r})"

    # -- the step -----------------------------------------------------------------------------
    @entry_point()
    def run(self, until=None, *, callback=None, entry, **unknown) -> list[StepRecord]:
        """Take steps until `until` steps are done (default: all); the records of this call."""
        e = entry
        end = self.config.steps if until is None else checks.integer(
            e, "until", until, low=self.step, high=self.config.steps,
            what=f"in [{self.step}, {self.config.steps}] (steps done so far, steps of the run)")
        out = []
        while self.step < end:
            out.append(self.train_step())
            if callback is not None:
                callback(out[-1])
        return out

    @entry_point()
    def train_step(self, *, entry, **unknown) -> StepRecord:
        """Take the next step (see the module docstring) and return its record.

        A step is one transaction: the forward and backward change no state of the trainer
        (the dropout stream is the generator's counter, taken at the commit), and the commit
        (the gate, the scaler's step and update, the counters, the record) runs with SIGINT
        and SIGTERM held (in the main thread), from a copy of everything it writes. An
        exception before or inside it leaves every piece as it was before the step; a signal
        that arrives during the commit is delivered once the step is complete."""
        c = self.config
        if self.step >= c.steps:
            refuse(entry, "steps", f"are all taken ({c.steps}); the run is complete")
        self._tape.reset_to(self._mark)  # nodes left by an interrupted step are dropped
        stream = self.generator.state_dict()["counter"]
        if stream >= 2**64:
            self.generator.next_stream()  # refuses an exhausted generator by its own name
        loss, named, _ = self._gradients(stream)
        with signals_held():
            self._rollback.save()
            try:
                return self._commit(loss, named, stream)
            except BaseException:
                self._rollback.restore()
                raise

    def _gradients(self, stream: int):
        """(the step's loss, its gradients by name, the tokens): nothing of the trainer changes."""
        c, n = self.config, self.step + 1
        tok, tgt = self.stream.windows(self.step * c.batch_size, c.batch_size, c.seq_len)
        if c.vocab < data.VOCAB:
            tok, tgt = tok % c.vocab, tgt % c.vocab
        scale = self.scaler.get_scale()
        rows, count = c.batch_size // c.microbatches, tok.size
        losses, grads, d_rows = [], [], []
        for j in range(c.microbatches):
            part = slice(j * rows, (j + 1) * rows)
            loss, g, dx = self._microbatch(tok[part], tgt[part], microbatch_rows(j, rows), stream,
                                           count, scale)
            losses.append(loss)
            grads.append(g)
            d_rows.append(dx)
        loss = pairwise(losses)
        if len(grads) == 1:
            summed = grads[0]
        else:
            # an unaligned split is asked for by name: its bits are this split's alone
            split = {} if self.microbatch_invariant else {"aligned": False}
            summed = accumulate_grads(grads, [rows * c.seq_len] * c.microbatches, **split,
                                      **self._on)
        tm = self.train_model
        named = dict(zip(tm.on_tape, summed))
        tm.embedding_grads(named, grads, np.concatenate(d_rows), tok)
        if n in c.overflow_steps:
            named[tm.overflow_cell].reshape(-1)[0] = np.float32(np.inf)
        return loss, named, tok

    def _commit(self, loss: float, named: dict, stream: int) -> StepRecord:
        """The gate, the scaler's step and update, the counters and the record."""
        c, n = self.config, self.step + 1
        if self.generator.next_stream() != stream:
            raise RuntimeError("the dropout generator moved during the step")
        z = self.outlier.update(loss)
        gate = not (c.skip_lossz is not None and z > c.skip_lossz)
        t0 = self.optimizer.t
        tm = self.train_model
        norm = self.scaler.step(self.optimizer, [named[k] for k in tm.decay + tm.no_decay],
                                max_norm=c.max_norm, update_gate=gate)
        applied = self.optimizer.t != t0
        # the scaler's own decision, which a closed gate does not hide, not a comparison of
        # scales, which says nothing once the scale is 0
        skipped = _found_inf(self.scaler, self.optimizer)
        self.scaler.update()
        rec = StepRecord(n, loss, math.nan if norm is None else norm,
                         self.optimizer.lr_ if applied else math.nan, self.scaler.get_scale(),
                         skipped, not gate, z)
        self.records.append(rec)
        self.step = n
        return rec

    def _microbatch(self, tok, tgt, first_row, stream, count, scale):
        """(loss, the gradients of the model's on_tape names, the input rows' gradient) of one
        microbatch: the model's input rows (its embedding lookups) are the tape's leaf."""
        tape, tm = self._tape, self.train_model
        try:
            x = tape.param(tm.rows(tok))
            loss = tm.loss(tape, self._handles, x, tgt, count, (self.generator, stream, first_row))
            grads = tape.backward(loss, seed=scale)
            return loss.item(), grads[:-1], grads[-1]
        finally:
            tape.reset_to(self._mark)

    # -- results ------------------------------------------------------------------------------
    @entry_point()
    def outputs(self, **unknown) -> list[tuple[str, np.ndarray]]:
        """The certified values: per step 'step-NNNN/<loss|norm|lr|scale|skipped|gated>', then
        'final/<parameter name>', the optimizer's moments and step counts, the scaler's scale
        and growth tracker, the generator's counter and the outlier detector's state."""
        width = max(4, len(str(self.config.steps)))
        out = []
        for r in self.records:
            values = (r.loss, r.norm, r.lr, r.scale, float(r.skipped), float(r.gated))
            out += [(f"step-{r.step:0{width}d}/{name}", np.float32([v]))
                    for name, v in zip(RECORDS, values)]
        out += [(f"final/{name}", a.reshape(-1).copy()) for name, a in self.model.named_parameters()]
        state = self.optimizer.state_dict()
        for name in ("exp_avg", "exp_avg_sq"):
            out.append((f"final/{name}", np.concatenate([a.reshape(-1) for a in state[name]])))
        s, o = self.scaler.state_dict(), self.outlier.state_dict()
        out += [("final/steps", np.float32([state["t"], *state["steps"]])),
                ("final/scaler", np.float32([s["scale"], s["_growth_tracker"]])),
                ("final/generator", np.float32([self.generator.state_dict()["counter"]])),
                ("final/outlier", np.float32([o["count"], o["index"], o["sum"], o["sum_sq"],
                                              *o["buffer"]]))]
        return out

    @entry_point()
    def threads(self, **unknown) -> int | None:
        """The backend's thread count as it reports it (numba's on cpu-numba, OpenMP's on
        cpu-cffi); None for a backend without one. The bits do not depend on it."""
        return None if self._threads is None else int(self._threads())

    @entry_point()
    def profile(self, **unknown) -> str:
        """The run card's profile: the mode, and the md5 of the configuration and the text."""
        h = hashlib.md5(f"{self.config.key()} {self.stream.md5}".encode()).hexdigest()[:16]
        return f"mojolike.{self.numeric_mode}.train-run.fp32.v1:config-{h}"

    @entry_point()
    def card(self, **unknown) -> str:
        """The run card: one record per output (cardformat's text, trailer included)."""
        recs = [cardformat.record(*name.rsplit("/", 1), a) for name, a in self.outputs()]
        return cardformat.render(self.profile(), recs)

    @entry_point()
    def digest(self, **unknown) -> str:
        """The run card's md5: the same on every backend for the same configuration and steps."""
        return cardformat.card_md5(self.card())

    # -- checkpoints --------------------------------------------------------------------------
    @entry_point()
    def save(self, path, *, entry, **unknown) -> str:
        """Write one checkpoint file (.npz, no pickle): the parameters, the optimizer's state,
        the scaler, the generator, the schedule and data positions, the outlier detector and
        the records so far. Returns the path written (`.npz` added when missing). A state
        whose pieces disagree (`_train_checks.check_invariants`) is refused, nothing written."""
        e = entry
        self._check_state(e)
        opt = self.optimizer.state_dict()
        arrays = {f"param.{k}": a.copy() for k, a in self.model.named_parameters()}
        for name in ("exp_avg", "exp_avg_sq"):
            arrays.update({f"optimizer.{name}.{i}": a for i, a in enumerate(opt[name])})
        arrays["records"] = self._records_array()
        meta = {"format": FORMAT, "config": self.config.to_dict(), "text_md5": self.stream.md5,
                "step": self.step, "lossz": [r.lossz for r in self.records],
                "optimizer": {k: v for k, v in opt.items() if k not in ("exp_avg", "exp_avg_sq")},
                "scaler": self.scaler.state_dict(), "generator": self.generator.state_dict(),
                "outlier": self.outlier.state_dict(),
                "schedule": {"config": self.schedule.config(), "t": self.optimizer.t}}
        return ckpt.write(e, path, meta, arrays)

    def _records_array(self) -> np.ndarray:
        return np.float32([r[1:7] for r in self.records]).reshape(-1, len(RECORDS))

    def _check_state(self, e: str, contract: bool = False) -> None:
        """Refuse a state whose pieces disagree (the step count, the records, the generator's
        counter, the optimizer's step counts, the scaler, the outlier detector); `contract`:
        see `_train_checks.check_invariants`."""
        if self.scaler._states:
            refuse(e, "scaler", "is between step() and update(); a checkpoint holds whole steps")
        opt = self.optimizer
        invariants.check_invariants(e, self.config, self.step, self._records_array(),
                                    [r.lossz for r in self.records],
                                    {"t": opt.t, "steps": list(opt._steps)},
                                    self.scaler.state_dict(), self.generator.state_dict(),
                                    self.outlier.state_dict(), contract=contract,
                                    tensors=len(self.model.parameters()))

    @classmethod
    @entry_point()
    def load(cls, path, *, backend=None, numeric_mode=None, memory_budget=None,
             entry, **unknown) -> Trainer:
        """A Trainer continuing the run saved at `path` (on any backend). The configuration is
        checked first: the arrays it implies (`_train_checks.member_shapes`) against the
        file's members, and its memory against the budget (`memory_budget=` bytes, else
        $MOJOLIKE_TRAIN_MEMORY, else half the physical memory), before the model is built;
        then every part of the file, and the invariants between the parts."""
        e = entry
        if memory_budget is not None:
            invariants.memory_budget(e, memory_budget)
        expect = lambda meta: _as_load_refusal(e, path, _expected, e, meta, memory_budget)
        meta, arrays = ckpt.read(e, path, expect=expect)  # checked before any data is read
        return _as_load_refusal(e, path, cls._continued, e, meta, arrays, backend, numeric_mode,
                                memory_budget)

    @classmethod
    def _continued(cls, e, meta, arrays, backend, numeric_mode, memory_budget) -> Trainer:
        t = cls(TrainConfig.from_dict(meta["config"]), backend=backend, numeric_mode=numeric_mode,
                memory_budget=memory_budget)
        t._restore(e, meta, arrays)
        t._check_state(e, contract=True)
        return t

    def _restore(self, e: str, meta: dict, arrays: dict) -> None:
        step = checks.integer(e, "step", meta["step"], low=0, high=self.config.steps)
        rec = arrays["records"]
        lossz = meta["lossz"]
        if rec.dtype != np.float32 or rec.shape != (step, len(RECORDS)) or \
                not isinstance(lossz, list) or len(lossz) != step:
            refuse(e, "records", f"must hold {step} records of {len(RECORDS)} values")
        if not all(isinstance(z, float) for z in lossz):
            refuse(e, "lossz", "must be a list of floats (NaN while the window fills)")
        state = dict(meta["optimizer"])
        for name in ("exp_avg", "exp_avg_sq"):
            state[name] = [arrays[f"optimizer.{name}.{i}"]
                           for i in range(len(self.train_model.decay + self.train_model.no_decay))]
        want = self.schedule.config()
        if meta["schedule"] != {"config": want, "t": state.get("t")}:
            refuse(e, "schedule", f"must be the configuration's schedule {want} at the optimizer's "
                                  f"step")
        self.optimizer.load_state_dict(state)
        self.scaler.load_state_dict(meta["scaler"])
        self.generator.load_state_dict(meta["generator"])
        self.outlier.load_state_dict(meta["outlier"])
        for name, a in self.model.named_parameters():
            a[...] = arrays[f"param.{name}"]
        if self.train_model.twins():
            self.optimizer.refresh_twins()  # the twins are the restored masters, rounded
        self.step = step
        self.records = [StepRecord(i + 1, *(float(v) for v in r[:4]), bool(r[4]), bool(r[5]),
                                   float(z)) for i, (r, z) in enumerate(zip(rec, lossz))]
        if self._records_array().tobytes() != rec.tobytes():  # flags other than 0 and 1
            refuse(e, "records", "hold values no step records (a skipped or gated flag other "
                                 "than 0 or 1)")


def _expected(e: str, meta: dict, memory_budget) -> dict:
    """The members the checkpoint's configuration implies, once it is checked whole and its
    memory is within the budget."""
    if meta.get("format") != FORMAT:
        refuse(e, "path", f"is not a {FORMAT} file (format {str(meta.get('format'))[:40]!r})")
    if meta["text_md5"] != data.default_stream().md5:
        refuse(e, "text_md5", "differs from the shipped text's md5: the run trained on another "
                              "text")
    c = TrainConfig.from_dict(meta["config"])
    step = checks.integer(e, "step", meta["step"], low=0, high=c.steps)
    tm = train_models.for_config(c)
    tm.check_memory(e, memory_budget)
    return tm.member_shapes(step)


def _as_load_refusal(e: str, path, fn, *args):
    """fn(*args), any refusal or malformed entry it meets refused by Trainer.load's name."""
    try:
        return fn(*args)
    except Refusal as r:
        raise r.at(e) from None
    except KeyError as err:
        refuse(e, "path", f"lacks the checkpoint entry {err}", value=path)
    except (TypeError, ValueError, AttributeError) as err:  # JSON of the wrong shape
        refuse(e, "path", f"holds a malformed checkpoint entry ({type(err).__name__}: {err})",
               value=path)
