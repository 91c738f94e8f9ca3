"""`mojolike generate`: decode prompts with a GPT's KV cache from a safetensors file or a
checkpoint of `mojolike train --model gpt`.

    mojolike generate (--safetensors FILE | --checkpoint DIR/checkpoint.npz) --prompt TEXT ...

Prompts are text, encoded as UTF-8 bytes (token id = byte value: the byte-level
vocabulary of 256 that `mojolike.data` and `mojolike train` use), or comma-separated
token ids with `--ids`. Each prompt's line shows the generated text (or ids) and the
sum of its log-probs; the last line is one digest over every prompt's tokens and the
bit patterns of every log-prob, so runs on two backends or thread counts compare by one
line. The log-prob of a generated token is the training forward's (the negated
per-token cross-entropy, contracts: `mojolike.training.generate`).
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..core.refusals import Refusal

_E = "mojolike generate"


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="decode prompts with a GPT's KV cache (safetensors "
                                        "weights); print the tokens, log-probs and a digest")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--safetensors",
                     help="a GPT-2 model.safetensors in Hugging Face's layout (config.json "
                          "beside it)")
    src.add_argument("--checkpoint",
                     help="a checkpoint.npz of `mojolike train --model gpt` (its parameters)")
    g.add_argument("--prompt", action="append", required=True,
                   help="a prompt (repeat for several, decoded together)")
    g.add_argument("--ids", action="store_true",
                   help="prompts are comma-separated token ids instead of text")
    g.add_argument("--max-new-tokens", type=int, default=32)
    g.add_argument("--temperature", type=float, default=1.0, help="0 is greedy (lowest id on ties)")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--backend", default=None, help="a backend name (default: the registry's)")
    g.set_defaults(func=main)


def _prompt(text: str, ids: bool) -> list[int]:
    if not ids:
        return list(text.encode("utf-8"))
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise Refusal(_E, "--prompt", f"{text!r} is not comma-separated integers (--ids)") from None


def digest(tokens: list[list[int]], logprobs: list[list[float]]) -> str:
    """md5 over every prompt's tokens (int64) and log-probs (float32 bit patterns)."""
    h = hashlib.md5()
    for t, lp in zip(tokens, logprobs):
        h.update(np.asarray(t, np.int64).tobytes())
        h.update(np.asarray(lp, np.float32).view(np.uint32).tobytes())
    return h.hexdigest()


def _model(args):
    """The GPT of --safetensors, or of --checkpoint (a `mojolike train --model gpt` run)."""
    from .gpt import GPT
    if args.safetensors is not None:
        return GPT.from_safetensors(args.safetensors, backend=args.backend)
    from .trainer import Trainer
    t = Trainer.load(args.checkpoint, backend=args.backend)
    if not isinstance(t.model, GPT):
        raise Refusal(_E, "--checkpoint", f"is a checkpoint of model {t.config.model!r}; "
                                          f"generate decodes a GPT (mojolike train --model gpt)")
    return t.model


def main(args) -> int:
    from .generate import generate
    try:
        model = _model(args)
        prompts = [_prompt(p, args.ids) for p in args.prompt]
        tokens, logprobs = generate(dict(model.named_parameters()), model.config, prompts,
                                    args.max_new_tokens, temperature=args.temperature,
                                    top_k=args.top_k, seed=args.seed, backend=args.backend)
    except Refusal as r:
        print(f"error: {r}")
        return 2
    for p, t, lp in zip(prompts, tokens, logprobs):
        new = t[len(p):]
        shown = ",".join(map(str, new)) if args.ids or max(new, default=0) > 255 else \
            repr(bytes(new).decode("utf-8", "replace"))
        total = float(np.sum(np.asarray(lp, np.float64)))
        print(f"{shown}  (log-prob sum {total:.6g})")
    print(f"digest {digest(tokens, logprobs)}")
    return 0
