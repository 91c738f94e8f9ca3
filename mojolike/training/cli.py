"""`mojolike train`: the reference run on a backend, with a progress bar, a checkpoint, a run
card and one digest line (the run card's md5, the same on every backend).

    mojolike train [--steps N] [--backend B] [--out DIR] [--resume CKPT] [--stop-at K]
                   [--checkpoint-every N] [--model tiny|gpt] [--batch-size N]
                   [--n-layer N --n-head N --n-embd N --block-size N]   (--model gpt)

`--model gpt` trains `mojolike.models.GPT` (default n_layer 2, n_head 2, n_embd 32,
block 32, batch 16: a tiny GPT on the shipped text's bytes, vocab 256) instead of the
TinyLM; the GPT's options with the TinyLM, and any model option with --resume (the
checkpoint's configuration decides), are refused by name.

Writes DIR/checkpoint.npz (the run after its last step; `--resume` continues from
it; with --checkpoint-every N also after every N-th step, each time whole or not at
all: a temporary file renamed over it), DIR/train.card (one record per step and
value, then the final state: `mojolike compare` of two of them names the first
differing step) and DIR/train.meta.json (the machine, the backend, the thread
count, mojolike's version and the timings, which the card leaves out).

On SIGINT or SIGTERM the step under way finishes or is rolled back (a Trainer step
is one transaction), then the checkpoint, DIR/train.partial.card (the run card of
the steps done) and DIR/train.partial.meta.json ("partial": true) are written and
the command to resume is printed. Exit codes: 0 the run finished its steps (or
reached --stop-at), 2 a usage error, a refused option or an unavailable backend,
130 interrupted.
"""
from __future__ import annotations

import os
import platform
import signal
import sys
import time
from pathlib import Path

from ..core import checks
from ..core.refusals import Refusal


def add_parser(sub) -> None:
    t = sub.add_parser("train", help="train the reference model on the shipped text; write a "
                                     "checkpoint, a run card and its digest")
    t.add_argument("--steps", type=int, default=None,
                   help="steps of the run (default 200; with --resume, the checkpoint's)")
    t.add_argument("--backend", default=None, help="a backend name (default: the registry's)")
    t.add_argument("--numeric-mode", default=None,
                   help="identical (the contract's, default), deterministic or fast "
                        "(MOJOLIKE_NUMERIC_MODE)")
    t.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads of both CPU backends (NUMBA_NUM_THREADS and OMP_NUM_THREADS)")
    t.add_argument("--json", action="store_true",
                   help="print the result (digest, files, steps) as JSON instead of the digest line")
    t.add_argument("--out", default="train-out", help="output folder (default ./train-out)")
    t.add_argument("--resume", default=None, help="continue the run saved in this checkpoint")
    t.add_argument("--stop-at", type=int, default=None,
                   help="stop after this many steps of the run (the checkpoint continues it)")
    t.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="also write the checkpoint after every N-th step")
    t.add_argument("--model", default=None, help="'tiny' (the TinyLM, default) or 'gpt'")
    t.add_argument("--batch-size", type=int, default=None, help="windows per step (default 16)")
    for flag, what in (("--n-layer", "layers"), ("--n-head", "attention heads"),
                       ("--n-embd", "embedding width"), ("--block-size", "window length")):
        t.add_argument(flag, type=int, default=None, help=f"the GPT's {what} (--model gpt)")
    t.add_argument("--precision", default=None, choices=("fp32", "bf16", "fp16"),
                   help="the type the forward reads the weights in: fp32 (default), or bf16 / "
                        "fp16 twins of float32 master weights")
    t.set_defaults(func=main)


_MODEL_FLAGS = (("model", "--model"), ("batch_size", "--batch-size"), ("n_layer", "--n-layer"),
                ("n_head", "--n-head"), ("n_embd", "--n-embd"), ("block_size", "--block-size"),
                ("precision", "--precision"))


def _trainer(args):
    from .trainer import TrainConfig, Trainer
    given = {k: getattr(args, k) for k, _ in _MODEL_FLAGS if getattr(args, k, None) is not None}
    if args.resume is None:
        if args.steps is not None:
            given["steps"] = args.steps
        try:
            config = TrainConfig(**given)
        except Refusal as r:  # named by the command line's flag
            flag = dict(_MODEL_FLAGS).get(r.option)
            if flag is None:
                raise
            raise Refusal(_E, flag, r.reason, value=r._value) from None
        return Trainer(config, backend=args.backend, numeric_mode=args.numeric_mode)
    for k, flag in _MODEL_FLAGS:
        if k in given:
            raise Refusal(_E, flag, "does not apply with --resume (the checkpoint's configuration "
                                    "is the run's)")
    t = Trainer.load(args.resume, backend=args.backend, numeric_mode=args.numeric_mode)
    if args.steps is not None and args.steps != t.config.steps:
        raise Refusal("mojolike train", "--steps", f"is {args.steps} but the checkpoint's run has "
                                                   f"{t.config.steps} steps (its schedule's horizon); "
                                                   "leave --steps out to finish it")
    return t


_E = "mojolike train"


def set_threads(n: int | None) -> None:
    """--threads N: the thread count of both CPU backends (numba's pool, OpenMP), as
    NUMBA_NUM_THREADS and OMP_NUM_THREADS set it; ValueError saying why when it cannot."""
    if n is None:
        return
    if n < 1:
        raise ValueError(f"--threads {n} is not a thread count; give 1 or more")
    os.environ["NUMBA_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(n)
    if "numba" in sys.modules:  # already imported (tests, an embedding program): resize its pool
        import numba
        if n > numba.config.NUMBA_NUM_THREADS:
            raise ValueError(f"--threads {n}: numba was started with "
                             f"{numba.config.NUMBA_NUM_THREADS} threads in this process")
        numba.set_num_threads(n)
# a test hook: "STEP:POINT:SIGNAL" sends this process SIGNAL (INT, TERM, KILL) in step STEP at
# POINT: 'backward' (each microbatch's), 'commit' (the scaler's step) or 'after' (the step done)
TEST_HOOK = "MOJOLIKE_TRAIN_TEST_INTERRUPT"


class _Stopped(BaseException):
    """SIGINT or SIGTERM arrived; the trainer is at a whole step."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.name = signal.Signals(signum).name


def _stop(signum, frame):
    raise _Stopped(signum)


def _arm_test_hook(t) -> int | None:
    """Install the TEST_HOOK's signal on the trainer; the step of its 'after' point."""
    spec = os.environ.get(TEST_HOOK)
    if not spec:
        return None
    step, point, name = spec.split(":")
    step, sig = int(step), getattr(signal, f"SIG{name}")
    fire = lambda: os.kill(os.getpid(), sig)
    if point == "after":
        return step
    owner, attr = {"backward": (t._tape, "backward"), "commit": (t.scaler, "step")}[point]
    real = getattr(owner, attr)

    def hooked(*a, **kw):
        if t.step + 1 == step:
            fire()
        return real(*a, **kw)

    setattr(owner, attr, hooked)
    return None


def _meta(t, first: int, elapsed: float, digest: str, **extra) -> dict:
    c = t.config
    return {"backend": t.backend, "numeric_mode": t.numeric_mode, "config": c.to_dict(),
            "steps_done": t.step, "steps_this_run": t.step - first, "elapsed_s": round(elapsed, 3),
            "tokens_per_s": round((t.step - first) * c.tokens_per_step / elapsed, 1)
            if elapsed else None,
            "microbatch_invariant": t.microbatch_invariant, "threads": t.threads(),
            "mojolike_version": _version(), **extra,
            "card_md5": digest, "text_md5": t.stream.md5, "python": platform.python_version(),
            "machine": platform.machine(), "argv": " ".join(sys.argv)}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("mojolike")
    except PackageNotFoundError:
        from .. import __version__
        return __version__


def main(args) -> int:
    out = Path(args.out)
    try:
        set_threads(args.threads)
    except ValueError as e:
        print(f"mojolike train: {e}", file=sys.stderr)
        return 2
    try:
        t = _trainer(args)
        until = t.config.steps if args.stop_at is None else checks.integer(
            _E, "--stop-at", args.stop_at, low=t.step, high=t.config.steps,
            what=f"in [{t.step}, {t.config.steps}] (the steps done, the steps of the run)")
        every = None if args.checkpoint_every is None else checks.integer(
            _E, "--checkpoint-every", args.checkpoint_every, low=1, what="a number of steps >= 1")
    except Refusal as e:
        print(e if e.entry_point == _E else f"mojolike train: {e}", file=sys.stderr)
        return 2
    try:  # before the run, so that a folder that cannot be written costs no training
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"mojolike train: --out {str(out)!r} cannot be created ({e})", file=sys.stderr)
        return 2
    c = t.config
    split = "" if t.microbatch_invariant else " (not aligned: the records depend on the split)"
    print(f"mojolike train: {t.train_model.describe()}, {c.tokens_per_step} tokens "
          f"per step in {c.microbatches} microbatch(es){split}, steps {t.step + 1}..{until} of "
          f"{c.steps} on {t.backend} ({t.numeric_mode})", file=sys.stderr)
    from tqdm import tqdm  # only the training command needs it (certify does not)
    bar = tqdm(total=until, initial=t.step, unit="step", file=sys.stderr, mininterval=0.25,
               dynamic_ncols=True)
    started, timed = time.perf_counter(), {"t": time.perf_counter()}
    after = _arm_test_hook(t)

    def show(r) -> None:
        now = time.perf_counter()
        rate = c.tokens_per_step / max(now - timed["t"], 1e-9)
        timed["t"] = now
        bar.set_postfix_str(f"loss {r.loss:.4f} norm {r.norm:.3f} {rate:,.0f} tok/s"
                            + (" skipped" if r.skipped else "") + (" gated" if r.gated else ""),
                            refresh=False)
        bar.update(1)
        if every is not None and r.step % every == 0 and r.step < until:
            t.save(out / "checkpoint.npz")
        if r.step == after:
            os.kill(os.getpid(), getattr(signal, f"SIG{os.environ[TEST_HOOK].split(':')[2]}"))

    first, stopped = t.step, None
    old = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        t.run(until=until, callback=show)
    except (_Stopped, KeyboardInterrupt) as e:
        stopped = e.name if isinstance(e, _Stopped) else "SIGINT"
    finally:
        # what follows writes the files; a second signal waits for them
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        bar.close()
    try:
        return _finish(t, args, out, first, started, stopped)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _finish(t, args, out: Path, first: int, started: float, stopped: str | None) -> int:
    """Write the checkpoint, the run card and its meta (partial ones after a signal)."""
    from ..core import cardformat
    c = t.config
    elapsed = time.perf_counter() - started
    card = t.card()
    digest = cardformat.card_md5(card)
    name = "train" if stopped is None else "train.partial"
    cardformat.write_atomic(out / f"{name}.card", card)
    ckpt = t.save(out / "checkpoint.npz")
    extra = {} if stopped is None else {"partial": True, "interrupted_by": stopped}
    cardformat.write_json_atomic(out / f"{name}.meta.json", _meta(t, first, elapsed, digest,
                                                                  **extra))
    print(f"run card {out / f'{name}.card'}, checkpoint {ckpt}, meta {out / f'{name}.meta.json'}",
          file=sys.stderr)
    if stopped is not None:
        again = ["mojolike train --resume", ckpt, "--out", str(out), "--backend", t.backend]
        if args.stop_at is not None:
            again += ["--stop-at", str(args.stop_at)]
        print(f"mojolike train: interrupted by {stopped} after step {t.step} of {c.steps} (the "
              f"step under way was rolled back or finished); resume with: {' '.join(again)}",
              file=sys.stderr)
        return 130
    last = t.records[-1] if t.records else None
    if getattr(args, "json", False):
        import json
        print(json.dumps({"digest": digest, "step": t.step, "steps": c.steps,
                          "loss": None if last is None else float(last.loss),
                          "backend": t.backend, "numeric_mode": t.numeric_mode,
                          "card": str(out / f"{name}.card"), "checkpoint": str(ckpt),
                          "meta": str(out / f"{name}.meta.json")}, indent=2, sort_keys=True))
        return 0
    tail = f", loss {last.loss:.6f}" if last else ""
    print(f"train digest {digest} (step {t.step} of {c.steps}{tail})")
    return 0
