"""The artefact's generated ``README.md`` and its ``obs.npz`` reference rollout.

The README's Python loop is executed as written, in the artefact folder, over an
``obs.npz`` recorded with the JAX policy (`DeterministicPolicy.flat_step`, resetting
carries where episodes ended): it must print a largest difference below 1e-5.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.export import DeterministicPolicy, export_policy, read_manifest
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic

T, B = 12, 3


def _reference(network: Any) -> dict[str, np.ndarray]:
    """A rollout of the JAX policy on random observations, episodes ending at t=4 and 9
    in environment 1 (so its carry is reset twice mid-sequence)."""
    policy = DeterministicPolicy(network, 4)
    obs = np.random.default_rng(0).normal(size=(T, B, 4)).astype(np.float32)
    done = np.zeros((T, B), bool)
    done[[4, 9], 1] = True
    carry = [policy.initial_carry(B)[n] for n in policy.carry_names]
    n_act = len(policy.action_names)
    actions = []
    for t in range(T):
        outs = policy.flat_step(obs[t], *carry)
        actions.append(np.asarray(outs[0]))
        carry = list(outs[n_act:])
        if carry:
            carry = list(policy.flat_reset(*carry, done[t]))
    return {"obs": obs, "done": done, "expected/action": np.stack(actions)}


def _python_block(readme: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert len(blocks) == 1, readme
    return blocks[0]


def _run_readme_loop(folder: Path) -> float:
    """Execute the README's loop in ``folder``; the difference it prints."""
    code = _python_block((folder / "README.md").read_text())
    printed, cwd = io.StringIO(), os.getcwd()
    try:
        os.chdir(folder)
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    match = re.search(r"max \|action - recorded JAX action\| = (\S+)", printed.getvalue())
    assert match is not None, printed.getvalue()
    return float(match.group(1))


@pytest.mark.parametrize("kind", ["lstm", "mlp"])
def test_readme_describes_tensors_and_its_loop_checks_parity(kind: str, tmp_path: Path) -> None:
    pytest.importorskip("flatbuffers")
    if kind == "lstm":
        network = make_lstm_actor_critic(4, 2, 8, (8,), (8,), rngs=nnx.Rngs(1))
    else:
        network = make_mlp_actor_critic(4, 2, (8,), (8,), rngs=nnx.Rngs(0))
    reference = _reference(network)
    source = {"env": "my_env", "run": "runs/a", "step": 1200, "git_commit": "abc123"}
    notes = {"obs": "the last 2 observations (2 values each), oldest first"}
    out = export_policy(
        network, 4, tmp_path / kind, format="stablehlo", source=source, reference=reference,
        observation_notes=notes,
    )  # fmt: skip
    manifest = read_manifest(out)
    readme = (out / "README.md").read_text()
    # What each input holds, in policy.json and below the step's table.
    assert manifest["observation_notes"] == notes
    assert "- `obs`: the last 2 observations (2 values each), oldest first" in readme
    # Every tensor of every function, with its shape and dtype, in a table row.
    for fn in ("step", "reset"):
        for side in ("inputs", "outputs"):
            for t in (manifest[fn] or {}).get(side, []):
                shape = "[" + ", ".join(str(d) for d in t["shape"]) + "]"
                assert f"| `{t['name']}` | `{shape}` | {t['dtype']} |" in readme, t
    assert "`my_env`" in readme and "`1200`" in readme and "`abc123`" in readme
    assert "onnxruntime" in readme and "TODO" not in readme
    assert ("reset(zeros, done=true)" in readme) == (kind == "lstm")
    assert len(_python_block(readme).strip().splitlines()) <= 40
    with np.load(out / "obs.npz") as data:
        assert sorted(data.files) == ["done", "expected/action", "obs"]
        np.testing.assert_array_equal(data["done"], reference["done"])
    assert _run_readme_loop(out) <= 1e-5


def test_reference_is_checked_before_conversion(tmp_path: Path) -> None:
    network = make_mlp_actor_critic(4, 2, (8,), (8,), rngs=nnx.Rngs(0))
    bad = {"obs": np.zeros((5, 2, 4)), "done": np.zeros((5, 2), bool)}
    with pytest.raises(ValueError, match=r"reference lacks \['expected/action'\]"):
        export_policy(network, 4, tmp_path / "a", reference=bad)
    bad["expected/action"] = np.zeros((4, 2, 2))
    with pytest.raises(ValueError, match=r"leading axes must be \[T, B\] = \[5, 2\]"):
        export_policy(network, 4, tmp_path / "a", reference=bad)
    with pytest.raises(TypeError, match="reference must be a mapping"):
        export_policy(network, 4, tmp_path / "a", reference=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"observation_notes names \['obs/state'\]"):
        export_policy(network, 4, tmp_path / "a", observation_notes={"obs/state": "x"})
    with pytest.raises(TypeError, match=r"observation_notes=.* must map observation tensor"):
        export_policy(network, 4, tmp_path / "a", observation_notes={"obs": 3})  # type: ignore[dict-item]
    assert not (tmp_path / "a").exists()
