"""The run options (`RunOptions`), defined once for every trainer: their keys, their
defaults, a misspelled option named, and the user's periodic tasks. That every trainer
refuses a wrong option before using the environment is `test_trainer_contract.py`'s."""

from __future__ import annotations

import dataclasses

import pytest
from flax import nnx

from nnx_ppo.algorithms.config import PPOConfig
from nnx_ppo.algorithms.core.hooks import Periodic
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.algorithms.sweeps.many import train_many
from nnx_ppo.algorithms.trainer import skeleton as trainer
from nnx_ppo.algorithms.trainer.options import Host, RunOptions, RunSettings, resolve_options
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

ENV = EpisodeWrapper(PointMass(), episode_length=6)
KEYS = (
    "log_fn", "eval_env", "progress", "jsonl_path", "checkpoint", "devices", "mesh",
    "randomization_fn", "redraw_every", "stop", "tasks", "stop_fn", "initial_eval",
)  # fmt: skip
ALIASES = ("stop_fn",)  # resolved into another key: not a field of RunSettings


def _mlp(seed: int = 0) -> nnx.Module:
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(seed))


def test_the_typed_dict_and_the_resolved_settings_have_the_same_keys():
    assert tuple(RunOptions.__annotations__) == KEYS
    assert {f.name for f in dataclasses.fields(RunSettings)} == set(KEYS) - set(ALIASES)
    assert RunOptions.__optional_keys__ == frozenset(KEYS)  # every key may be left out


def test_absent_options_take_their_documented_defaults():
    env = object()
    run = resolve_options("train_ppo", {}, env=env)
    assert run == RunSettings(eval_env=env)
    for key in set(KEYS) - set(ALIASES):
        default = {"eval_env": env, "tasks": ()}.get(key)
        assert getattr(run, key) == default if key == "tasks" else getattr(run, key) is default, key
    # Host-side options are checked as a Host: the trainers' loop reads them from it.
    assert isinstance(run, Host) and isinstance(trainer.Host(), Host)


def test_given_options_are_kept_and_eval_env_defaults_to_the_training_env():
    env, other = object(), object()
    run = resolve_options("f", {"progress": False, "redraw_every": 3, "eval_env": other}, env=env)
    assert (run.progress, run.redraw_every, run.eval_env) == (False, 3, other)
    assert resolve_options("f", {"eval_env": None}, env=env).eval_env is env


def test_a_misspelled_option_names_the_function_the_key_a_match_and_every_valid_key():
    with pytest.raises(TypeError) as error:
        resolve_options("train_ppo", {"progres": True}, env=None)
    message = str(error.value)
    assert message.startswith("train_ppo() got an unknown run option 'progres'")
    assert "(did you mean 'progress'?)" in message
    assert "the run options are " + ", ".join(KEYS) in message
    with pytest.raises(TypeError, match=r"unknown run option 'zzz'; the run options are log_fn"):
        resolve_options("train_ppo", {"zzz": 1}, env=None)


def test_a_host_option_of_the_wrong_kind_is_rejected_when_resolved():
    with pytest.raises(TypeError, match=r"progress='yes' must be True, False or None"):
        resolve_options("train_ppo", {"progress": "yes"}, env=None)
    with pytest.raises(TypeError, match=r"checkpoint='runs/x' is a path"):
        resolve_options("train_ppo", {"checkpoint": "runs/x"}, env=None)


def test_user_tasks_run_when_due_and_their_metrics_are_logged():
    # 4 envs x 5 steps = 20 steps per call, 40 steps: a task every 20 steps runs after
    # both calls, gets the state (the sweep's with its run axis) and logs its metric.
    seen, logged = [], []

    def norm(state, iteration, step):
        seen.append((iteration, step, state.iteration.shape))
        return {"diag/iteration": float(iteration)}

    task = Periodic(norm, every_steps=20)
    config = PPOConfig(n_envs=4, rollout_length=5, n_minibatches=2, total_steps=40)

    def log_fn(metrics, step):
        logged.append((step, metrics.get("diag/iteration")))

    train_ppo(ENV, _mlp(), config, progress=False, tasks=[task], log_fn=log_fn)
    assert seen == [(1, 20, ()), (2, 40, ())]
    assert (20, 1.0) in logged and (40, 2.0) in logged
    seen.clear()
    train_many(ENV, _mlp_of, config, seeds=[0, 1], progress=False, tasks=[task])
    assert seen == [(1, 20, (2,)), (2, 40, (2,))]

    with pytest.raises(TypeError, match=r"tasks=Periodic\(.*must be a list of Periodic"):
        train_ppo(ENV, _mlp(), config, tasks=task)
    with pytest.raises(TypeError, match=r"tasks: <function .*norm at .* is not a Periodic"):
        train_ppo(ENV, _mlp(), config, tasks=[norm])
    with pytest.raises(ValueError, match=r"Periodic\(every_steps=0\) must be a positive int"):
        Periodic(norm, every_steps=0)


def _mlp_of(rngs: nnx.Rngs) -> nnx.Module:
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=rngs)
