"""`mojolike train`: the reference run on a backend, with a progress bar, a checkpoint, a run
card and one digest line (the run card's md5, the same on every backend).

    mojolike train [--steps N] [--backend B] [--out DIR] [--resume CKPT] [--stop-at K]

Writes DIR/checkpoint.npz (the run after its last step; `--resume` continues from
it), DIR/train.card (one record per step and value, then the final state:
`mojolike compare` of two of them names the first differing step) and
DIR/train.meta.json (the machine, the backend and the timings, which the card
leaves out). Exit codes: 0 the run finished its steps (or reached --stop-at), 2 a
usage error, a refused option or an unavailable backend.
"""
from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

from tqdm import tqdm

from . import checks
from .refusals import Refusal


def add_parser(sub) -> None:
    t = sub.add_parser("train", help="train the reference model on the shipped text; write a "
                                     "checkpoint, a run card and its digest")
    t.add_argument("--steps", type=int, default=None,
                   help="steps of the run (default 200; with --resume, the checkpoint's)")
    t.add_argument("--backend", default=None, help="a backend name (default: the registry's)")
    t.add_argument("--out", default="train-out", help="output folder (default ./train-out)")
    t.add_argument("--resume", default=None, help="continue the run saved in this checkpoint")
    t.add_argument("--stop-at", type=int, default=None,
                   help="stop after this many steps of the run (the checkpoint continues it)")
    t.set_defaults(func=main)


def _trainer(args):
    from .train import TrainConfig, Trainer
    if args.resume is None:
        steps = {} if args.steps is None else {"steps": args.steps}
        return Trainer(TrainConfig(**steps), backend=args.backend)
    t = Trainer.load(args.resume, backend=args.backend)
    if args.steps is not None and args.steps != t.config.steps:
        raise Refusal("mojolike train", "--steps", f"is {args.steps} but the checkpoint's run has "
                                                   f"{t.config.steps} steps (its schedule's horizon); "
                                                   "leave --steps out to finish it")
    return t


def main(args) -> int:
    out = Path(args.out)
    try:
        t = _trainer(args)
        until = t.config.steps if args.stop_at is None else checks.integer(
            "mojolike train", "--stop-at", args.stop_at, low=t.step, high=t.config.steps,
            what=f"in [{t.step}, {t.config.steps}] (the steps done, the steps of the run)")
    except Refusal as e:
        print(e if e.entry_point == "mojolike train" else f"mojolike train: {e}", file=sys.stderr)
        return 2
    try:  # before the run, so that a folder that cannot be written costs no training
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"mojolike train: --out {str(out)!r} cannot be created ({e})", file=sys.stderr)
        return 2
    c = t.config
    print(f"mojolike train: TinyLM d_model={c.d_model} vocab={c.vocab}, {c.tokens_per_step} tokens "
          f"per step in {c.microbatches} microbatch(es), steps {t.step + 1}..{until} of {c.steps} "
          f"on {t.backend} ({t.numeric_mode})", file=sys.stderr)
    bar = tqdm(total=until, initial=t.step, unit="step", file=sys.stderr, mininterval=0.25,
               dynamic_ncols=True)
    started, timed = time.perf_counter(), {"t": time.perf_counter()}

    def show(r) -> None:
        now = time.perf_counter()
        rate = c.tokens_per_step / max(now - timed["t"], 1e-9)
        timed["t"] = now
        bar.set_postfix_str(f"loss {r.loss:.4f} norm {r.norm:.3f} {rate:,.0f} tok/s"
                            + (" skipped" if r.skipped else "") + (" gated" if r.gated else ""),
                            refresh=False)
        bar.update(1)

    first = t.step
    try:
        t.run(until=until, callback=show)
    finally:
        bar.close()
    elapsed = time.perf_counter() - started
    from .contracts import cardformat
    card = t.card()
    cardformat.write_atomic(out / "train.card", card)
    ckpt = t.save(out / "checkpoint.npz")
    digest = cardformat.card_md5(card)
    cardformat.write_json_atomic(out / "train.meta.json", {
        "backend": t.backend, "numeric_mode": t.numeric_mode, "config": c.to_dict(),
        "steps_done": t.step, "steps_this_run": t.step - first, "elapsed_s": round(elapsed, 3),
        "tokens_per_s": round((t.step - first) * c.tokens_per_step / elapsed, 1) if elapsed else None,
        "card_md5": digest, "text_md5": t.stream.md5, "python": platform.python_version(),
        "machine": platform.machine(), "argv": " ".join(sys.argv)})
    print(f"run card {out / 'train.card'}, checkpoint {ckpt}, meta {out / 'train.meta.json'}",
          file=sys.stderr)
    last = t.records[-1] if t.records else None
    tail = f", loss {last.loss:.6f}" if last else ""
    print(f"train digest {digest} (step {t.step} of {c.steps}{tail})")
    return 0
