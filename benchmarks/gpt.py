"""mojolike's GPT against torch's same GPT-2 (CPU, same run, same threads): the training step,
KV-cache generation, and one step of the GPT-2 124M configuration with its peak memory.

    python benchmarks/gpt.py [--backend cpu-numba] [--repeat 3] [--only train,generate,124m]

The torch model is the one tests/test_gpt_torch.py checks parity with (Hugging Face's
GPT-2 names and Conv1D layout, F.scaled_dot_product_attention, the tied head), loaded
with the same weights; its optimizer is torch.optim.AdamW(fused=True).
- train: n_layer 4, n_embd 256, n_head 4, block 256, batch 8: forward + backward + AdamW,
  time per step and tokens/s of both (target <= 2.5x torch eager);
- generate: 8 prompts of 16 tokens, 128 new tokens each, greedy, KV cache on both sides:
  `GPT.generate` against a torch KV-cache decoder of the same model written here
  (target <= 3x);
- 124m: n_layer 12, n_embd 768, n_head 12, vocab 50257, block 1024, batch 1 x 256 tokens:
  one forward + backward + AdamW step each, in its own process, with the time and the
  peak resident memory the step added over the built model (VmHWM) (targets <= 2.5x the
  time, <= 1.5x the peak memory).
Best-of-`repeat` after a warm call; quote ratios from one run, with the CPU model and the
load average it prints. Not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from timing import best_of
from transformer import cpu_model

import mojolike
from mojolike.models import GPT

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_gpt_torch import TorchGPT2  # the model the parity tests check

SMALL = {"vocab_size": 256, "block_size": 256, "n_layer": 4, "n_head": 4, "n_embd": 256}
BIG = {"vocab_size": 50257, "block_size": 1024, "n_layer": 12, "n_head": 12, "n_embd": 768}
HYPER = {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}


def pair(config: dict, backend: str, tmp: Path):
    """(mojolike GPT, torch GPT-2) with the same weights, through one safetensors file."""
    from safetensors.torch import load_file
    ours = GPT(**config, seed=0, backend=backend)
    path = tmp / f"gpt-{config['n_layer']}-{config['n_embd']}.safetensors"
    ours.save_safetensors(path)
    theirs = TorchGPT2(**config)
    theirs.load_state_dict(load_file(str(path)), strict=True)
    return ours, theirs


def batch(config: dict, b: int, t: int, key: int):
    rng = np.random.default_rng(key)
    tok = rng.integers(0, config["vocab_size"], (b, t + 1)).astype(np.int64)
    return tok[:, :-1].copy(), tok[:, 1:].copy()


def step_functions(ours: GPT, theirs, backend: str, tokens, targets):
    """(our step, torch's step): forward, backward and AdamW on the same batch."""
    opt = mojolike.AdamW(ours.parameters(), backend=backend, **HYPER)
    tape = mojolike.Tape(backend=backend)
    ours.register(tape)
    mark = tape.mark()

    def ours_step():
        loss = ours.forward(tape, tokens, targets)
        opt.step(tape.backward(loss))
        tape.reset_to(mark)

    topt = torch.optim.AdamW(theirs.parameters(), fused=True, **HYPER)
    tt, ty = torch.from_numpy(tokens), torch.from_numpy(targets)

    def torch_step():
        topt.zero_grad(set_to_none=True)
        _, loss = theirs(tt, ty)
        loss.backward()
        topt.step()

    return ours_step, torch_step


def train_case(backend: str, repeat: int, tmp: Path) -> None:
    ours, theirs = pair(SMALL, backend, tmp)
    tokens, targets = batch(SMALL, 8, SMALL["block_size"], 0)
    ours_step, torch_step = step_functions(ours, theirs, backend, tokens, targets)
    t_ours, t_torch = best_of(ours_step, repeat), best_of(torch_step, repeat)
    n = tokens.size
    print(f"train step (4 layers, 256 wide, 4 heads, 8 x 256 tokens): mojolike {t_ours * 1e3:.0f} ms "
          f"({n / t_ours:,.0f} tokens/s), torch {t_torch * 1e3:.0f} ms ({n / t_torch:,.0f} tokens/s): "
          f"{t_ours / t_torch:.2f}x (target <= 2.5x)")


@torch.no_grad()
def torch_generate(model, prompts: np.ndarray, new: int) -> np.ndarray:
    """Greedy decoding of equal-length prompts with a per-layer KV cache, on `model`'s modules."""
    tr = model.transformer
    tok = torch.from_numpy(prompts)
    cache: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(tr.h)
    out, pos0, x_ids = [], 0, tok
    for _ in range(new):
        t = x_ids.shape[1]
        x = tr.wte(x_ids) + tr.wpe(torch.arange(pos0, pos0 + t))
        for i, block in enumerate(tr.h):
            a = block.attn
            b_, _, c = x.shape
            q, k, v = a.c_attn(block.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b_, t, a.n_head, c // a.n_head).transpose(1, 2) for z in (q, k, v))
            if cache[i] is not None:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
            # the first call is the causal prompt; later calls are one query over every key
            y = F.scaled_dot_product_attention(q, k, v, is_causal=cache[i][0].shape[2] == t)
            x = x + a.c_proj(y.transpose(1, 2).contiguous().view(b_, t, c))
            x = x + block.mlp(block.ln_2(x))
        logits = F.linear(tr.ln_f(x[:, -1]), tr.wte.weight)
        x_ids = logits.argmax(-1, keepdim=True)
        out.append(x_ids)
        pos0 += t
    return torch.cat(out, 1).numpy()


def generate_case(backend: str, repeat: int, tmp: Path) -> None:
    ours, theirs = pair(SMALL, backend, tmp)
    prompts, _ = batch(SMALL, 8, 16, 1)
    new = 128
    t_ours = best_of(lambda: ours.generate([list(p) for p in prompts], new, temperature=0.0,
                                           backend=backend), repeat)
    t_torch = best_of(lambda: torch_generate(theirs, prompts, new), repeat)
    mine = np.array(ours.generate([list(p) for p in prompts], new, temperature=0.0, backend=backend)[0])
    same = float((mine[:, -new:] == torch_generate(theirs, prompts, new)).mean())
    print(f"generate (8 prompts x 16 tokens, 128 new, greedy, KV cache): mojolike {t_ours:.2f} s "
          f"({8 * new / t_ours:,.0f} tokens/s), torch {t_torch:.2f} s ({8 * new / t_torch:,.0f} "
          f"tokens/s): {t_ours / t_torch:.2f}x (target <= 3x); greedy tokens equal to torch's: "
          f"{same:.1%}")


def _status_kib(field: str) -> int:
    """A memory field of /proc/self/status (VmHWM: the peak resident size, VmRSS: now), KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def one_big_step(side: str, backend: str, tmp: Path) -> dict:
    """In this process: build the 124M pair, then run two steps of `side`, time the second and
    read VmHWM. Both models exist in both processes, so the models' own memory is the same;
    the peak over the resident memory before the first step is what training added: the
    optimizer's state, the gradients and the activations kept for the backward. (The first
    step compiles on mojolike's side; numba's compiler memory is counted, which only makes
    mojolike's figure larger.)"""
    ours, theirs = pair(BIG, backend, tmp)
    tokens, targets = batch(BIG, 1, 256, 2)
    ours_step, torch_step = step_functions(ours, theirs, backend, tokens, targets)
    fn = ours_step if side == "mojolike" else torch_step
    before = _status_kib("VmRSS")
    fn()
    t = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "rss_before_mib": before / 1024, "hwm_mib": _status_kib("VmHWM") / 1024}


def big_case(backend: str, tmp: Path) -> None:
    got = {}
    for side in ("mojolike", "torch"):
        r = subprocess.run([sys.executable, __file__, "--big-step", side, "--backend", backend,
                            "--tmp", str(tmp)], capture_output=True, text=True, check=False,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)})
        if r.returncode != 0:
            print(f"124m {side}: failed\n{r.stderr[-2000:]}")
            return
        got[side] = json.loads(r.stdout.strip().splitlines()[-1])
    m, t = got["mojolike"], got["torch"]
    dm, dt = m["hwm_mib"] - m["rss_before_mib"], t["hwm_mib"] - t["rss_before_mib"]
    print(f"124M step (batch 1 x 256 tokens): mojolike {m['seconds']:.2f} s, torch {t['seconds']:.2f} s: "
          f"{m['seconds'] / t['seconds']:.2f}x (target <= 2.5x); peak resident memory "
          f"{m['hwm_mib']:.0f} MiB vs {t['hwm_mib']:.0f} MiB in all, training's own (state, grads, "
          f"activations) "
          f"{dm:.0f} MiB vs {dt:.0f} MiB: {dm / dt:.2f}x (target <= 1.5x)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="cpu-numba")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", default="train,generate,124m")
    p.add_argument("--big-step", default=None, help=argparse.SUPPRESS)
    p.add_argument("--tmp", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    threads = int(os.environ.get("NUMBA_NUM_THREADS", os.cpu_count() or 1))
    torch.set_num_threads(threads)
    tmp = Path(a.tmp or "/tmp/mojolike-bench-gpt")
    tmp.mkdir(parents=True, exist_ok=True)
    if a.big_step:
        print(json.dumps(one_big_step(a.big_step, a.backend, tmp)))
        return
    print(f"CPU: {cpu_model()}; {threads} threads each; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; backend {a.backend}; torch {torch.__version__}")
    only = a.only.split(",")
    if "train" in only:
        train_case(a.backend, a.repeat, tmp)
    if "generate" in only:
        generate_case(a.backend, a.repeat, tmp)
    if "124m" in only:
        big_case(a.backend, tmp)


if __name__ == "__main__":
    main()
