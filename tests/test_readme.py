"""Every Python example of the README runs on its own (its imports included) in a fresh
namespace, and the values its comments state are the values it computes."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


# (a line that identifies the block, what its comments state, checked on its namespace)
STATED = [
    ("mojolike.backend_used(), mojolike.numeric_mode_used()",
     lambda ns: (ns["mojolike"].backend_used(), ns["mojolike"].numeric_mode_used()) == ("oracle", "identical")
     and ns["mojolike"].sumsq(ns["x"]).dtype == np.float32
     and ns["mojolike"].fold(ns["x"], backend="cpu-cffi") == ns["mojolike"].fold(ns["x"], backend="oracle")),
    ("total = opt.step(g, max_norm=1.0)",
     lambda ns: ns["opt"].param_groups[0]["weight_decay"] == 0.01 and Path("opt.npz").exists()
     and abs(float(ns["total"]) - (64 * 64 + 64) ** 0.5) < 1e-4  # the norm before the clip
     and float(sum(ns["mojolike"].sumsq(a) for a in ns["g"])) ** 0.5 <= 1.0 + 1e-6),
    ("b = mojolike.cast(x, ml_dtypes.bfloat16)",
     lambda ns: ns["mojolike"].cast(ns["b"], "float32").tolist()[:3] == [1.0, 1.0, 65536.0]
     and ns["h"].view(np.uint16).tolist() == [15360, 15364, 31744, 32256, 2]
     and ns["mojolike"].cast(ns["h"], "float32").tolist()[:3] == [1.0, 1.00390625, float("inf")]
     and ns["mojolike"].linear(ns["b"][:2].reshape(1, 2).copy(), ns["w"]).tolist() == [[0.75]]),
    ("(dweight,) = tape.backward(loss)",
     lambda ns: ns["h"].shape == (2, 4) and ns["dweight"].dtype == np.float32
     and ns["dweight"].shape == (4, 8)),
    ("for step in range(20):",
     lambda ns: ns["step"] == 19 and ns["norm"] is not None),
    ("mojolike.math.expf(x)",
     lambda ns: np.ndim(ns["loss"]) == 0 and ns["dz"].shape == (8, 100)
     and ns["mojolike"].cross_entropy(ns["z"], ns["t"], reduction="none").shape == (8,)),
    ("sched.lr_at(1), sched.lr_values(5)",
     lambda ns: ns["sched"].lr_at(1) == np.float32(3e-07) and ns["sched"].lr_values(5).dtype == np.float32),
    ("g = mojolike.Generator(seed=1234)",
     lambda ns: ns["w0"].shape == (256, 128) and ns["noise"].shape == (4, 1000)
     and ns["dx"].shape == ns["x"].shape),
    ("block_grads = tape.backward((out * out).mean())",
     lambda ns: len(ns["block_grads"]) == 12),
    ("alone = mojolike.scaled_dot_product_attention(*part)",
     lambda ns: ns["dq"].shape == ns["q"].shape and (ns["alone"] == ns["o"][1:, :, 5:6]).all()),
    ("gpt.save_safetensors(\"gpt.safetensors\")",
     lambda ns: Path("gpt.safetensors").exists() and Path("config.json").exists()
     and [len(t) for t in ns["new"]] == [12, 14]),
    ("opt = mojolike.torch.optim.AdamW(model.parameters(), lr=1e-2)",
     lambda ns: sorted(ns["opt"].state_dict()["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
     and ns["opt"].param_groups[0]["lr"] == 1e-2 and int(ns["opt"].state_dict()["state"][0]["step"]) == 3),
    ("with mojolike.torch.certified(backend=\"cpu-numba\", numeric_mode=\"identical\") as mode:",
     lambda ns: ns["mode"].calls["aten.addmm.default"] == 1
     and ns["said"] == "mojolike.torch.certified: aten.cumsum.default is not certified"),
    ("scaler = mojolike.GradScaler(init_scale=4.0, check_interval=2)",
     lambda ns: ns["scaler"].get_scale() == 2.0 and ns["w"].tolist() == [0.5, 1.5]),
    ("model = with_master_weights(TinyLM(d_model=16), \"bfloat16\")",
     lambda ns: round(ns["loss"].item(), 4) == 4.6617 and ns["step"] == 7
     and all(t.view(np.uint16).tolist() == ns["mojolike"].cast(p, "bfloat16").view(np.uint16).tolist()
             for p, t in zip(ns["model"].parameters(), ns["model"].twins()))),
    ("assert alone == ([new[1]], [logprobs[1]])",
     lambda ns: len(ns["logprobs"][1]) == 8),
]


def test_the_readme_has_python_examples_and_a_statement_checked_for_each():
    blocks = python_blocks()
    assert len(blocks) >= 5
    for block in blocks:
        assert sum(marker in block for marker, _ in STATED) == 1, block[:200]


@pytest.mark.parametrize("i", range(len(python_blocks())))
def test_each_python_example_of_the_readme_runs_on_its_own_and_computes_what_it_states(i, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write files (opt.npz, gpt.safetensors)
    block = python_blocks()[i]
    namespace: dict = {}
    exec(compile(block, f"README.md python block {i}", "exec"), namespace)  # noqa: S102 - the examples
    (check,) = [c for marker, c in STATED if marker in block]
    assert check(namespace)
