"""`mojolike generate` decodes from a safetensors file or a `mojolike train --model gpt` checkpoint
and prints one digest, the same on every backend; a bad prompt or file is refused by name with
exit status 2."""
from __future__ import annotations

import pytest

from mojolike.cli import main
from mojolike.models import GPT


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt") / "model.safetensors"
    GPT(vocab_size=256, block_size=32, n_layer=1, n_head=2, n_embd=16, seed=1).save_safetensors(path)
    return str(path)


def _digest(capsys, *argv) -> str:
    assert main(["generate", *argv]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("digest ")
    return lines[-1]


def test_generate_prints_the_same_digest_on_every_cpu_backend(weights, capsys):
    args = ("--safetensors", weights, "--prompt", "hello", "--prompt", "ab",
            "--max-new-tokens", "5", "--seed", "3")
    got = {b: _digest(capsys, *args, "--backend", b) for b in ("oracle", "cpu-numba", "cpu-cffi")}
    assert len(set(got.values())) == 1, got


def test_a_prompt_decoded_alone_keeps_its_greedy_tokens_beside_another(weights, capsys):
    common = ("--safetensors", weights, "--ids", "--temperature", "0", "--max-new-tokens", "4")
    assert main(["generate", *common, "--prompt", "1,2,3"]) == 0
    alone = capsys.readouterr().out.splitlines()[0]
    assert main(["generate", *common, "--prompt", "1,2,3", "--prompt", "7"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == alone


def test_a_prompt_that_is_not_ids_is_refused_by_name(weights, capsys):
    assert main(["generate", "--safetensors", weights, "--ids", "--prompt", "1,x"]) == 2
    assert "mojolike generate: --prompt" in capsys.readouterr().out


def test_a_missing_file_is_refused_with_status_2(tmp_path, capsys):
    assert main(["generate", "--safetensors", str(tmp_path / "none.safetensors"),
                 "--prompt", "a"]) == 2
    assert "error:" in capsys.readouterr().out


@pytest.fixture(scope="module")
def gpt_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    assert main(["train", "--model", "gpt", "--n-layer", "1", "--n-embd", "16", "--block-size",
                 "16", "--batch-size", "2", "--steps", "2", "--backend", "cpu-numba", "--out",
                 str(out)]) == 0
    return out / "checkpoint.npz"


def test_generate_from_a_gpt_training_checkpoint_gives_its_weights_safetensors_digest(
        gpt_checkpoint, tmp_path, capsys):
    from mojolike.train import Trainer
    capsys.readouterr()
    model = Trainer.load(gpt_checkpoint, backend="cpu-numba").model
    model.save_safetensors(tmp_path / "model.safetensors")
    args = ("--prompt", "def ", "--prompt", "x", "--max-new-tokens", "4", "--seed", "2")
    got = {b: _digest(capsys, "--checkpoint", str(gpt_checkpoint), *args, "--backend", b)
           for b in ("cpu-numba", "cpu-cffi")}
    assert len(set(got.values())) == 1, got
    assert _digest(capsys, "--safetensors", str(tmp_path / "model.safetensors"), *args,
                   "--backend", "cpu-numba") == got["cpu-numba"]
    # trained weights, not the initialization: another digest than the seed's fresh GPT
    GPT(vocab_size=256, block_size=16, n_layer=1, n_head=2, n_embd=16, seed=0).save_safetensors(
        tmp_path / "init.safetensors")
    assert _digest(capsys, "--safetensors", str(tmp_path / "init.safetensors"), *args,
                   "--backend", "cpu-numba") != got["cpu-numba"]


def test_a_tiny_models_checkpoint_is_refused_by_name(tmp_path, capsys):
    assert main(["train", "--steps", "1", "--backend", "cpu-numba", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["generate", "--checkpoint", str(tmp_path / "checkpoint.npz"),
                 "--prompt", "a"]) == 2
    assert "mojolike generate: --checkpoint is a checkpoint of model 'tiny'" in \
        capsys.readouterr().out


def test_a_checkpoint_and_a_safetensors_file_together_are_refused(weights, gpt_checkpoint):
    with pytest.raises(SystemExit) as e:
        main(["generate", "--safetensors", weights, "--checkpoint", str(gpt_checkpoint),
              "--prompt", "a"])
    assert e.value.code == 2
