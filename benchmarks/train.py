"""One training step of the reference model (TinyLM) against the same model and step in torch.

    python benchmarks/train.py [--quick] [--rounds 3] [--repeat 2] [--threads N]
                               [--backends cpu-numba,cpu-cffi] [--no-profile] [--targets host]

The model is `mojolike.models.TinyLM` with d_model 512, d_hidden 2048, vocab 8192, and a
step is 2048 tokens (batch 8 x seq_len 256; --quick shrinks everything for a smoke run):
forward on a `mojolike.Tape`, `tape.backward`, and an `AdamW` step with two parameter
groups (weight decay 0.1 on the three weight matrices, 0 on the embedding, norms and
biases), numeric_mode="identical", the tape's arena reset after each step. torch 2.13
eager on the CPU runs the same model and step in float32 from the same initial
parameters: nn.Embedding, nn.RMSNorm, nn.Linear, ReLU, nn.Linear, the residual add,
nn.RMSNorm, nn.Linear(bias=False) + F.cross_entropy, backward, torch.optim.AdamW(fused=True)
with the same groups, zero_grad(set_to_none=True). Tokens and targets are drawn once
from numpy's default_rng over the whole vocabulary (the shipped byte stream has only 256
symbols), the same batch every step.

Sections:

- timings: each row is `rounds` rounds of `repeat` steps after a warm step, every row
  timed once per round, best kept; tokens/s and the ratio to torch (target: cpu-numba
  <= 2.5x torch's time); "other processes used x cores" says how shared the machine was;
- memory: tracemalloc over one mojolike step per phase (forward, backward, optimizer):
  the peak and the level left beyond the step's start, beside the parameters' and the
  gradients' bytes; per op, the temporaries (allocated and freed inside it); the
  contiguous copies of parameter size or more, naming the parameter they copy (the
  answer to "does a step allocate parameter-sized temporaries beyond the gradients");
  and the resident set's peak growth in a step, ours and torch's (a cross-check that
  also sees numba's, C's and torch's own buffers);
- profile (unless --no-profile): each op's best time over a few instrumented steps:
  mojolike's from timers wrapped around the tape's ops and backward rules (this reaches
  into the tape's private `_back_*` and `_contribute` methods), torch's from
  torch.profiler (forward ops and autograd nodes); both summed by layer side by side;
  then cProfile's top functions of a mojolike step.

Not a test: quote ratios from one run, with the CPU line it prints.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
import tracemalloc

import numpy as np
from fold import OtherLoad, best_of_each, cpu_model, numba_target, run_targets
from layers import set_threads as layers_set_threads

DECAY = ("fc1.weight", "fc2.weight", "head.weight")
LR, BETAS, EPS, WD = 3e-3, (0.9, 0.999), 1e-8, 0.1
MiB = 2.0**20


class Setup:
    """The model size and batch of one run."""

    def __init__(self, quick: bool):
        self.d_model, self.vocab, self.batch, self.seq_len = (64, 1024, 4, 64) if quick else \
            (512, 8192, 8, 256)
        self.d_hidden = 4 * self.d_model
        self.tokens_per_step = self.batch * self.seq_len
        rng = np.random.default_rng(0)
        ids = rng.integers(0, self.vocab, (self.batch, self.seq_len + 1))
        self.tokens, self.targets = ids[:, :-1].copy(), ids[:, 1:].copy()

    def __str__(self) -> str:
        return (f"TinyLM d_model {self.d_model}, d_hidden {self.d_hidden}, vocab {self.vocab}; "
                f"batch {self.batch} x seq_len {self.seq_len} = {self.tokens_per_step} tokens/step")


# -- mojolike -------------------------------------------------------------------------------------
class OurStep:
    """forward, tape.backward and AdamW.step of a TinyLM on one backend, identical mode."""

    def __init__(self, setup: Setup, backend: str):
        import mojolike
        from mojolike.training.models import TinyLM
        self.setup, self.backend = setup, backend
        self.model = TinyLM(d_model=setup.d_model, d_hidden=setup.d_hidden, vocab=setup.vocab,
                            seed=0, backend=backend, numeric_mode="identical")
        params = dict(self.model.named_parameters())
        self.order = list(DECAY) + [n for n in self.model.NAMES if n not in DECAY]
        self.opt = mojolike.AdamW([{"params": [params[n] for n in DECAY], "weight_decay": WD},
                                   {"params": [params[n] for n in self.order[len(DECAY):]],
                                    "weight_decay": 0.0}],
                                  lr=LR, betas=BETAS, eps=EPS, backend=backend,
                                  numeric_mode="identical")
        self.tape = mojolike.Tape(backend=backend, numeric_mode="identical")
        self.model.register(self.tape)
        self.mark = self.tape.mark()
        self.first_loss = None

    def forward(self):
        return self.model.forward(self.tape, self.setup.tokens, self.setup.targets)

    def backward(self, loss):
        return dict(zip(self.model.NAMES, self.tape.backward(loss)))

    def optimize(self, grads) -> None:
        self.opt.step([grads[n] for n in self.order])

    def __call__(self) -> float:
        try:
            loss = self.forward()
            self.optimize(self.backward(loss))
        finally:
            self.tape.reset_to(self.mark)
        value = loss.item()
        if self.first_loss is None:
            self.first_loss = value
        return value


# -- torch ----------------------------------------------------------------------------------------
def torch_model(setup: Setup, params: dict):
    """The same model in torch, its parameters copied from a TinyLM's."""
    import torch
    from torch import nn

    class Torch(nn.Module):
        def __init__(self):
            super().__init__()
            d, h, v = setup.d_model, setup.d_hidden, setup.vocab
            self.embed = nn.Embedding(v, d)
            self.norm1 = nn.RMSNorm(d)
            self.fc1 = nn.Linear(d, h)
            self.fc2 = nn.Linear(h, d)
            self.norm2 = nn.RMSNorm(d)
            self.head = nn.Linear(d, v, bias=False)

        def forward(self, tokens, targets, mark=None):
            mark = mark or (lambda name, fn: fn())
            x = mark("embedding", lambda: self.embed(tokens.reshape(-1)))
            a = mark("rms_norm norm1", lambda: self.norm1(x))
            h = mark("linear fc1", lambda: self.fc1(a))
            r = mark("relu", lambda: torch.relu(h))
            m = mark("linear fc2", lambda: self.fc2(r))
            s = mark("add", lambda: x + m)
            z = mark("rms_norm norm2", lambda: self.norm2(s))
            logits = mark("linear head", lambda: self.head(z))
            return mark("cross_entropy", lambda: torch.nn.functional.cross_entropy(
                logits, targets.reshape(-1)))

    model = Torch()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(params[name]))
    return model


class TorchStep:
    def __init__(self, setup: Setup, params: dict):
        import torch
        self.model = torch_model(setup, params)
        named = dict(self.model.named_parameters())
        self.opt = torch.optim.AdamW(
            [{"params": [named[n] for n in DECAY], "weight_decay": WD},
             {"params": [p for n, p in named.items() if n not in DECAY], "weight_decay": 0.0}],
            lr=LR, betas=BETAS, eps=EPS, fused=True)
        self.tokens, self.targets = torch.from_numpy(setup.tokens), torch.from_numpy(setup.targets)
        self.first_loss = None

    def __call__(self, mark=None) -> float:
        loss = self.model(self.tokens, self.targets, mark)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        value = loss.item()
        if self.first_loss is None:
            self.first_loss = value
        return value


# -- sections -------------------------------------------------------------------------------------
def timings(setup: Setup, names: list[str], args) -> None:
    steps = {name: OurStep(setup, name) for name in names}
    params = dict(steps[names[0]].model.named_parameters())
    fns = {"torch eager, AdamW(fused=True)": TorchStep(setup, params)}
    fns.update((f"mojolike {name}", steps[name]) for name in names)
    with OtherLoad() as other:
        best = best_of_each(fns, args.repeat, args.rounds)
    base = best["torch eager, AdamW(fused=True)"]
    print(f"-- one training step (forward, backward, AdamW); best of {args.rounds} rounds x "
          f"{args.repeat} steps; other processes used {other.cores:.2f} cores "
          f"(target: mojolike cpu-numba <= 2.5x torch)")
    width = max(map(len, best))
    for name, t in best.items():
        print(f"   {name:{width}s} {t * 1e3:9.1f} ms {setup.tokens_per_step / t:9.0f} tokens/s "
              f"{t / base:6.2f}x torch", flush=True)
    losses = ", ".join(f"{n.split(',')[0]} {fn.first_loss!r}" for n, fn in fns.items())
    print(f"   first step's loss (same initial parameters and batch): {losses}")


def nbytes(arrays) -> int:
    return sum(a.nbytes for a in arrays if a is not None)


class Recorder:
    """Wraps callables: wall time per label and, with tracemalloc on, each call's peak above
    the level at its start and the level it leaves (net)."""

    def __init__(self, params: dict, memory: bool):
        self.by_id = {id(a): n.split(".")[0] for n, a in params.items()}
        self.memory = memory
        self.rows: dict[str, list] = {}  # label: [calls, seconds, max transient, net bytes]

    def label(self, kind: str, op: str, values) -> str:
        for v in values:
            owner = self.by_id.get(id(getattr(v, "data", None)))
            if owner is not None:
                return f"{kind} {op} {owner}"
        return f"{kind} {op}"

    def wrap(self, kind: str, op: str, fn, values_of):
        def timed(*a, **k):
            label = self.label(kind, op, values_of(a, k))
            if self.memory:
                start = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
            t = time.perf_counter()
            out = fn(*a, **k)
            t = time.perf_counter() - t
            row = self.rows.setdefault(label, [0, 0.0, 0, 0])
            row[0] += 1
            row[1] += t
            if self.memory:
                now, peak = tracemalloc.get_traced_memory()
                row[2] = max(row[2], peak - now)
                row[3] += now - start
            return out
        return timed


FORWARD_OPS = ("embedding", "rms_norm", "linear", "relu", "add", "chunked_lm_head_loss")


def instrument(step: OurStep, rec: Recorder) -> None:
    """Timers around the tape's ops (instance attributes shadow the class's methods)."""
    tape = step.tape
    for op in FORWARD_OPS:
        setattr(tape, op, rec.wrap("fwd", op, getattr(tape, op),
                                   lambda a, k: list(a) + list(k.values())))
        back = "_back_" + op
        setattr(tape, back, rec.wrap("bwd", op, getattr(tape, back), lambda a, k: a[0].inputs))
    tape._contribute = rec.wrap("bwd", "gradient accumulation", tape._contribute, lambda a, k: ())
    step.optimize = rec.wrap("opt", "AdamW.step (two groups)", step.optimize, lambda a, k: ())


def rss_growth(fn) -> int:
    """Peak resident memory during fn beyond the level at its start (Linux: VmHWM after a
    clear_refs reset): sees what tracemalloc does not (numba's and C's own buffers, torch's
    allocator), but an allocator's cached free blocks hide reuse, so it is a lower bound."""
    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        start = status("VmRSS:")
    except (OSError, StopIteration):
        return -1
    fn()
    return status("VmHWM:") - start


class CopyAudit:
    """Logs np.ascontiguousarray calls (the library's transposed copies) of at least `least`
    bytes made while active, naming the parameter the source shares memory with."""

    def __init__(self, params: dict, least: int):
        self.params, self.least, self.rows = params, least, []

    def __enter__(self):
        self._orig = orig = np.ascontiguousarray

        def audited(a, *args, **kw):
            out = orig(a, *args, **kw)
            if out is not a and out.nbytes >= self.least:
                owner = next((n for n, p in self.params.items() if np.may_share_memory(a, p)), None)
                f1, f2 = sys._getframe(1), sys._getframe(2)
                where = f"{f2.f_code.co_name} ({os.path.basename(f2.f_code.co_filename)}) -> " \
                        f"{f1.f_code.co_name}"
                self.rows.append((where, out.shape, out.nbytes, owner))
            return out
        np.ascontiguousarray = audited
        return self

    def __exit__(self, *exc):
        np.ascontiguousarray = self._orig


def memory(setup: Setup, names: list[str]) -> None:
    params = dict(OurStep(setup, names[0]).model.named_parameters())
    t_step = TorchStep(setup, params)
    t_step()
    torch_rss = rss_growth(t_step)
    for name in names:
        step = OurStep(setup, name)
        step()  # warm: compiled kernels, the optimizer's state
        params = dict(step.model.named_parameters())
        p_bytes = nbytes(params.values())
        matrices = [n for n in params if params[n].ndim == 2]
        smallest = min(matrices, key=lambda n: params[n].nbytes)
        rss = rss_growth(step)
        tracemalloc.start()
        try:
            phases = {}
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            loss = step.forward()
            phases["forward"] = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            grads = step.backward(loss)
            phases["backward"] = tracemalloc.get_traced_memory()
            g_bytes = nbytes(grads.values())
            tracemalloc.reset_peak()
            step.optimize(grads)
            phases["optimizer step"] = tracemalloc.get_traced_memory()
            step.tape.reset_to(step.mark)
            del loss, grads
            after = tracemalloc.get_traced_memory()[0]
            rec = Recorder(params, memory=True)  # per op; its peak resets spoil the phases' peaks
            instrument(step, rec)
            with CopyAudit(params, params[smallest].nbytes) as audit:
                step()
        finally:
            tracemalloc.stop()
        step_peak = max(p[1] for p in phases.values()) - base
        sizes = ", ".join(f"{n} {params[n].nbytes / MiB:.1f}" for n in matrices)
        print(f"-- memory of one mojolike {name} step (tracemalloc, beyond the step's start): "
              f"parameters {p_bytes / MiB:.1f} MiB ({sizes} MiB), gradients {g_bytes / MiB:.1f} "
              f"MiB, optimizer.packed_ {step.opt.packed_}")
        for phase, (now, peak) in phases.items():
            print(f"   {phase:15s} peak {(peak - base) / MiB:8.1f} MiB, left "
                  f"{(now - base) / MiB:8.1f} MiB")
        print(f"   whole step: peak {step_peak / MiB:.1f} MiB = {step_peak / p_bytes:.2f} x the "
              f"parameters; left after reset_to {(after - base) / MiB:.1f} MiB; resident-set peak "
              f"growth {rss / MiB:.1f} MiB (torch's step: {torch_rss / MiB:.1f} MiB)")
        print("   per op: temporary = its peak above the level it leaves (freed inside it); net = "
              "what it leaves (activations, gradients)")
        for label, (calls, _, transient, net) in rec.rows.items():
            print(f"   {label:40s} temporary {transient / MiB:7.1f} MiB  net "
                  f"{net / calls / MiB:7.1f} MiB")
        worst = max(rec.rows, key=lambda k: rec.rows[k][2])
        opt_tmp = rec.rows["opt AdamW.step (two groups)"][2]
        print(f"   largest temporary {rec.rows[worst][2] / MiB:.1f} MiB in '{worst}'; the "
              f"optimizer step's {opt_tmp / MiB:.2f} MiB")
        print(f"   contiguous copies of >= {params[smallest].nbytes / MiB:.1f} MiB ({smallest}'s "
              f"size) in one step: {len(audit.rows)}, {sum(r[2] for r in audit.rows) / MiB:.1f} "
              f"MiB in all:")
        for where, shape, size, owner in audit.rows:
            print(f"      {where:50s} {shape!s:14s} {size / MiB:6.1f} MiB  of "
                  f"{owner or 'an activation or gradient'}")
        sized = sum(r[2] for r in audit.rows if r[3] is not None)
        print(f"   parameter-sized temporaries beyond the gradients: "
              f"{'yes' if sized else 'none seen'} ({sized / MiB:.1f} MiB of copies of parameters "
              f"per step)", flush=True)


def profile_ours(setup: Setup, name: str, steps: int) -> dict:
    """{label: best seconds over `steps` steps} for one backend, "total" the whole step."""
    step = OurStep(setup, name)
    step()
    best: dict[str, float] = {}
    for _ in range(steps):
        rec = Recorder(dict(step.model.named_parameters()), memory=False)
        instrument(step, rec)
        t = time.perf_counter()
        step()
        rows = {"total": time.perf_counter() - t, **{k: v[1] for k, v in rec.rows.items()}}
        best = {k: min(v, best.get(k, v)) for k, v in rows.items()}
    return best


def profile_torch(setup: Setup, params: dict, steps: int) -> dict:
    """{label: best seconds over `steps` steps} from torch.profiler (CPU total of each forward
    op, of each autograd node's evaluate_function, of the optimizer step), "total" the step."""
    from torch.profiler import ProfilerActivity, profile, record_function

    def mark(name, fn):
        with record_function(f"fwd {name}"):
            return fn()

    step = TorchStep(setup, params)
    step()
    best: dict[str, float] = {}
    for _ in range(steps):
        with profile(activities=[ProfilerActivity.CPU]) as prof, record_function("step"):
            step(mark)
        rows = {}
        for e in prof.key_averages():
            key = e.key
            if key.startswith("Optimizer.step"):
                label = "opt AdamW.step (fused)"
            elif key.startswith("fwd ") or key == "step":
                label = key
            elif key.startswith("autograd::engine::evaluate_function: "):
                label = "bwd " + key.split(": ", 1)[1]
            else:
                continue
            rows[label] = rows.get(label, 0.0) + e.cpu_time_total * 1e-6
        rows["total"] = rows.pop("step")
        best = {k: min(v, best.get(k, v)) for k, v in rows.items()}
    return best


# each op's rows, torch's and ours, by the layer they belong to (a label's first match wins)
LAYERS = (
    ("head + loss (fwd + bwd)", ("linear head", "cross_entropy", "NllLoss", "LogSoftmax",
                                 "MmBackward", "TBackward", "chunked_lm_head_loss")),
    ("fc1, fc2 (fwd + bwd)", ("linear fc", "AddmmBackward")),
    ("rms_norm x2 (fwd + bwd)", ("rms_norm", "MulBackward", "RsqrtBackward", "MeanBackward",
                                 "PowBackward", "AddBackward1")),
    ("relu (fwd + bwd)", ("relu", "ReluBackward")),
    ("embedding (fwd + bwd)", ("embedding", "EmbeddingBackward")),
    ("residual add, accumulation", ("add", "AddBackward0", "accumulation", "AccumulateGrad")),
    ("optimizer step", ("opt ",)),
)


def by_layer(rows: dict) -> dict:
    out = dict.fromkeys([name for name, _ in LAYERS] + ["other"], 0.0)
    for label, t in rows.items():
        if label == "total":
            continue
        layer = next((name for name, keys in LAYERS if any(k in label for k in keys)), "other")
        out[layer] += t
    out["outside the timed ops"] = rows["total"] - sum(out.values())
    out["step"] = rows["total"]
    return out


def profile(setup: Setup, names: list[str], args) -> None:
    steps = 2 if args.quick else 3
    params = dict(OurStep(setup, names[0]).model.named_parameters())
    with OtherLoad() as other:
        results = {"torch": profile_torch(setup, params, steps)}
        results.update((n, profile_ours(setup, n, steps)) for n in names)
    print(f"-- profile: each op's best of {steps} instrumented steps, ms; other processes used "
          f"{other.cores:.2f} cores. torch: torch.profiler's CPU total per forward op and per "
          f"autograd node (a node's time includes what it runs); mojolike: timers around the "
          f"tape's ops (the head's gradient is computed in its forward)")
    for name, rows in results.items():
        total = rows["total"]
        print(f"   {name}: step {total * 1e3:.1f} ms")
        for label, t in rows.items():
            if label != "total":
                print(f"      {label:48s} {t * 1e3:8.1f} ms {100 * t / total:5.1f}%")
    layers = {name: by_layer(rows) for name, rows in results.items()}
    print("   by layer, ms (ratio to torch):")
    print("      " + f"{'':28s}" + "".join(f"{n:>20s}" for n in layers))
    for layer in layers["torch"]:
        base = layers["torch"][layer]
        cells = "".join(f"{v[layer] * 1e3:11.1f}" + (f" ({v[layer] / base:4.1f}x)" if base > 1e-4
                                                      else " " * 8) for v in layers.values())
        print(f"      {layer:28s}{cells}")
    step = OurStep(setup, names[0])
    step()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(steps):
        step()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    body = s.getvalue()
    body = body[body.find("ncalls"):]
    print(f"-- cProfile of {steps} mojolike {names[0]} steps, top functions by own time")
    print("\n".join("   " + line for line in body.rstrip().splitlines()), flush=True)


def set_threads(n: int | None, names: list[str]) -> str:
    """benchmarks/layers.py's set_threads, with cpu-cffi's layers kernels when it is timed."""
    from mojolike.core import registry
    cffi = registry.kernels("benchmark", "layers", "cpu-cffi", "identical") if "cpu-cffi" in names \
        else None
    return layers_set_threads(n, cffi)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="for torch, numba and cpu-cffi alike")
    p.add_argument("--backends", default=None,
                   help="comma-separated; default: every available CPU backend")
    p.add_argument("--no-profile", action="store_true", help="skip the per-op profile")
    p.add_argument("--targets", default="host",
                   help="comma-separated numba targets: host, haswell, generic, ...")
    args = p.parse_args()
    if not os.environ.get("NUMBA_CPU_NAME") and \
            not run_targets(args.targets, __file__, sys.argv[1:]):
        return

    import torch
    from timing import backend_names

    import mojolike
    names = [b for b in backend_names(args.backends) if b.startswith("cpu-")]
    setup = Setup(args.quick)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"{cpu_model()}; torch {torch.__version__}; numba target {numba_target()}; "
          f"{set_threads(args.threads, names)}")
    print(f"mojolike {mojolike.__version__}, numeric_mode identical; {setup}; loadavg {load}",
          flush=True)
    timings(setup, names, args)
    memory(setup, names)
    if not args.no_profile:
        profile(setup, names, args)


if __name__ == "__main__":
    main()
