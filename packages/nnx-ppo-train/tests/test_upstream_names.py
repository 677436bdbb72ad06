"""nnx-ppo's newest trainer names, accepted as aliases of ours: ``stop_fn=`` (``stop=``),
``initial_eval=`` (``EvalConfig.at_start``) and ``Checkpointer(include_env_state=)``
(``env_state=``). `LoggingLevel.DIAGNOSTICS` is `test_diagnostics.py`'s, ``target_fn``
`test_distillation_target_fn.py`'s."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from nnx_ppo.algorithms.checkpointing import Checkpointer, latest_checkpoint
from nnx_ppo.algorithms.checkpointing.loading import load_metadata
from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.algorithms.trainer.options import resolve_options
from nnx_ppo.algorithms.trainer.skeleton import with_initial_eval
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

ENV = EpisodeWrapper(PointMass(), episode_length=4)
# 4 envs x 6 steps = 24 steps per call, 2 calls; evaluation only at the end by default
# (at_start=False), on 2 envs x 4 steps.
CONFIG = TrainConfig(
    ppo=PPOConfig(n_envs=4, rollout_length=6, n_minibatches=2, n_epochs=1, total_steps=48),
    eval=EvalConfig(n_envs=2, max_episode_length=4, at_start=False),
)


def _mlp() -> nnx.Module:
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))


def _never() -> bool:
    return False


def test_stop_fn_is_an_alias_of_stop_and_both_at_once_is_an_error():
    run = resolve_options("train_ppo", {"stop_fn": _never}, env="env")
    assert run.stop is _never
    with pytest.raises(TypeError, match=r"train_ppo\(\) got both stop=.* and stop_fn=.*only one"):
        resolve_options("train_ppo", {"stop": _never, "stop_fn": _never}, env="env")
    with pytest.raises(TypeError, match=r"stop_fn=1 is not callable; .* StopOnSignal\(\)"):
        resolve_options("train_ppo", {"stop_fn": 1}, env="env")


def test_initial_eval_overrides_at_start_for_the_call():
    config = EvalConfig(at_start=True)
    assert resolve_options("f", {}, env=None).initial_eval is None
    assert with_initial_eval(config, None) is config
    assert with_initial_eval(config, False) == EvalConfig(at_start=False)
    assert with_initial_eval(EvalConfig(at_start=False), True).at_start is True
    with pytest.raises(ValueError, match=r"initial_eval=True .*EvalConfig\(enabled=False\)"):
        with_initial_eval(EvalConfig(enabled=False), True)
    assert with_initial_eval(EvalConfig(enabled=False), False).enabled is False
    with pytest.raises(TypeError, match=r"initial_eval='yes' must be True, False or None"):
        resolve_options("train_ppo", {"initial_eval": "yes"}, env=None)


def test_include_env_state_is_an_alias_of_env_state(tmp_path):
    assert Checkpointer(tmp_path / "a").env_state is True
    assert Checkpointer(tmp_path / "b", include_env_state=False).env_state is False
    assert Checkpointer(tmp_path / "c", env_state=False).env_state is False
    with pytest.raises(TypeError, match=r"both env_state=True and include_env_state=False"):
        Checkpointer(tmp_path / "d", env_state=True, include_env_state=False)
    with pytest.raises(TypeError, match=r"env_state='no' must be a bool"):
        Checkpointer(tmp_path / "e", include_env_state="no")


def test_upstream_names_in_one_run_initial_eval_stop_fn_and_a_light_checkpoint(tmp_path):
    # at_start=False in the config, initial_eval=True for the call: an evaluation at
    # step 0; stop_fn asks to stop after the first call (24 steps), which writes a
    # light checkpoint there.
    with Checkpointer(tmp_path, config=CONFIG, include_env_state=False) as checkpointer:
        result = train_ppo(
            ENV, _mlp(), CONFIG, progress=False, initial_eval=True,
            stop_fn=lambda: True, checkpoint=checkpointer,
        )  # fmt: skip
        assert result.stopped and result.total_steps == 24
        assert result.eval_history[0][0] == 0
        assert checkpointer.steps == [24]
    assert load_metadata(tmp_path)["env_state"] is False
    # checkpointing.latest_checkpoint, nnx-ppo's name: the newest step, None where none.
    assert latest_checkpoint(tmp_path) == 24 and latest_checkpoint(tmp_path / "none") is None


@pytest.mark.extended
def test_a_resumed_run_does_not_evaluate_at_step_0_again(tmp_path):
    with Checkpointer(tmp_path, config=CONFIG) as checkpointer:
        first = train_ppo(
            ENV, _mlp(), CONFIG, progress=False, initial_eval=True,
            stop_fn=lambda: True, checkpoint=checkpointer,
        )  # fmt: skip
    assert first.stopped and first.eval_history[0][0] == 0
    with Checkpointer(tmp_path, config=CONFIG) as checkpointer:
        rest = train_ppo(
            ENV, _mlp(), CONFIG, progress=False, initial_eval=True, checkpoint=checkpointer
        )
    assert not rest.stopped and rest.total_steps == 48
    assert [step for step, _ in rest.eval_history] == [48]
    # Without the override the config's at_start=False holds: no step-0 evaluation.
    plain = train_ppo(ENV, _mlp(), CONFIG, progress=False)
    assert [step for step, _ in plain.eval_history] == [48]


def test_nnx_ppo_log_level_names_are_ours_and_rollout_obs_is_a_group():
    from nnx_ppo.algorithms.config import LoggingLevel, LogLevel
    from nnx_ppo.algorithms.core.logging import in_log_level, observation_statistics

    assert LoggingLevel.ACTOR_EXTRA is LogLevel.ACTOR
    assert LoggingLevel.CRITIC_EXTRA is LogLevel.CRITIC
    assert LoggingLevel.ROLLOUT_STATS is LogLevel.ROLLOUT
    assert LoggingLevel.ROLLOUT_OBS in LogLevel.ALL and LoggingLevel.ROLLOUT_OBS not in (
        LogLevel.DEFAULT
    )
    assert in_log_level("rollout_obs/mean", LogLevel.ROLLOUT_OBS)
    assert not in_log_level("rollout_obs/mean", LogLevel.ROLLOUT)
    stats = observation_statistics(np.array([[[0.0, 4.0]], [[2.0, 2.0]]], np.float32))
    assert {k: float(v) for k, v in stats.items()} == {
        "rollout_obs/mean": 2.0,
        "rollout_obs/std": pytest.approx(2.0**0.5),
    }
    # Integer leaves (e.g. a step counter in a dict observation) are left out.
    assert set(observation_statistics({"t": np.zeros((2, 1), np.int32)})) == set()


def test_non_finite_error_counts_the_runs_per_quantity():
    from nnx_ppo.algorithms.core.faults import NonFiniteError, raise_if_non_finite
    from nnx_ppo.algorithms.types import NonFinite

    # Four runs of a sweep: run 1 diverged in the loss at iteration 3, run 3 in the
    # parameters at iteration 2; runs 0 and 2 are healthy.
    record = NonFinite(
        iteration=np.array([0, 3, 0, 2], np.int32),
        quantity=np.array([-1, 0, -1, 1], np.int32),
        value=np.array([0.0, np.nan, 0.0, np.inf], np.float32),
    )
    with pytest.raises(NonFiniteError) as caught:
        raise_if_non_finite(record, step=96)
    error = caught.value
    assert (error.run, error.quantity, error.iteration) == (1, "loss/total", 3)
    assert error.counts == {"loss/total": 1, "params": 1, "network_state": 0}
    assert NonFiniteError(1, "params", float("inf")).counts == {
        "loss/total": 0, "params": 1, "network_state": 0,
    }  # fmt: skip
