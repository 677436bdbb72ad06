"""Validation and derived quantities of the run configuration."""

import dataclasses

import optax
import pytest

from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig, VideoConfig


def test_defaults_are_valid_and_frozen():
    config = TrainConfig()
    assert config.ppo.n_envs == 256
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.ppo.n_envs = 3  # type: ignore[misc]


def test_indivisible_minibatches_name_both_numbers_and_a_fix():
    with pytest.raises(ValueError) as info:
        PPOConfig(n_envs=100, n_minibatches=8)
    message = str(info.value)
    assert "n_envs=100" in message
    assert "n_minibatches=8" in message
    # The suggested fixes are real fixes: 104 = 13 * 8 and 100 = 20 * 5 (the
    # largest divisor of 100 below 8).
    assert "n_envs=104" in message
    assert "n_minibatches=5" in message
    PPOConfig(n_envs=104, n_minibatches=8)
    PPOConfig(n_envs=100, n_minibatches=5)


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("n_envs", 0, ValueError),
        ("n_envs", 8.0, TypeError),
        ("n_envs", True, TypeError),
        ("rollout_length", 0, ValueError),
        ("total_steps", -1, ValueError),
        ("n_epochs", 0, ValueError),
        ("learning_rate", 0.0, ValueError),
        ("learning_rate", "fast", TypeError),
        ("gae_lambda", 1.5, ValueError),
        ("discounting_factor", -0.1, ValueError),
        ("discounting_factor", float("nan"), ValueError),
        ("clip_range", 0.0, ValueError),
        ("critic_loss_weight", -1.0, ValueError),
        ("value_clip_range", 0.0, ValueError),
        ("max_grad_norm", -1.0, ValueError),
        ("weight_decay", -1e-4, ValueError),
        ("adam_eps", 0.0, ValueError),
        ("advantage_mode", "sum", ValueError),
        ("advantage_estimation", "per_step", ValueError),
        ("reset_mode", "always", ValueError),
        ("normalize_advantages", 1, TypeError),
        ("log_level", 3, TypeError),
        ("iterations_per_call", 0, ValueError),
    ],
)
def test_invalid_fields_raise_with_the_field_and_value(field, value, error):
    with pytest.raises(error) as info:
        PPOConfig(**{field: value})
    assert field in str(info.value)


def test_minibatch_advantages_exclude_value_clipping():
    with pytest.raises(ValueError) as info:
        PPOConfig(advantage_estimation="minibatch", value_clip_range=0.2)
    message = str(info.value)
    assert "value_clip_range=0.2" in message and "advantage_estimation='rollout'" in message
    assert PPOConfig(advantage_estimation="minibatch").value_clip_range is None


def test_schedule_learning_rate_is_accepted():
    schedule = optax.linear_schedule(1e-3, 0.0, 100)
    assert PPOConfig(learning_rate=schedule).learning_rate is schedule


def test_step_accounting_rounds_up_to_whole_device_calls():
    config = PPOConfig(n_envs=4, rollout_length=5, n_minibatches=2, total_steps=41)
    # 20 steps per iteration; 41 steps need ceil(41 / 20) = 3 iterations.
    assert config.steps_per_iteration == 20
    assert config.n_iterations == 3
    assert config.minibatch_envs == 2
    assert config.updates_per_iteration == 4 * 2
    # With 2 iterations per call, 3 iterations round up to 2 calls = 4 iterations.
    config = dataclasses.replace(config, iterations_per_call=2)
    assert config.n_iterations == 4
    # Exactly divisible: no rounding; zero steps: zero iterations.
    assert dataclasses.replace(config, total_steps=80).n_iterations == 4
    assert dataclasses.replace(config, total_steps=0).n_iterations == 0


def test_step_accounting_is_exact_beyond_float32():
    # 2**24 + 1 is not representable in float32; the counters are Python ints.
    config = PPOConfig(n_envs=1, rollout_length=1, n_minibatches=1, total_steps=2**24 + 1)
    assert config.n_iterations * config.steps_per_iteration == 2**24 + 1


def test_log_levels_combine_as_flags():
    level = LogLevel.LOSSES | LogLevel.GRAD_NORM
    assert LogLevel.LOSSES in level
    assert LogLevel.ACTOR not in level
    assert LogLevel.ROLLOUT in LogLevel.DEFAULT
    # ALL is every group but DIAGNOSTICS, which changes what the rollout does with a
    # non-finite observation and is opted into explicitly.
    assert all(member in LogLevel.ALL for member in LogLevel if member != LogLevel.DIAGNOSTICS)
    assert LogLevel.DIAGNOSTICS not in LogLevel.ALL


def test_eval_and_video_validation():
    with pytest.raises(ValueError, match="every_steps=0"):
        EvalConfig(every_steps=0)
    with pytest.raises(TypeError, match="deterministic"):
        EvalConfig(deterministic="yes")
    with pytest.raises(ValueError, match="directory"):
        VideoConfig(enabled=True)
    assert VideoConfig(enabled=True, directory="/tmp/videos").fps is None


def test_train_config_checks_its_parts():
    with pytest.raises(TypeError, match="ppo="):
        TrainConfig(ppo={"n_envs": 8})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed=-1"):
        TrainConfig(seed=-1)


def test_docstring_examples_run(docstring_examples):
    from nnx_ppo.algorithms import config

    docstring_examples(config)


# --------------------------------------------------------------------------- JSON


def test_configs_round_trip_through_json_tagged_by_kind():
    import json

    from nnx_ppo.algorithms.config import (
        DistillationConfig,
        config_from_dict,
        config_to_dict,
    )

    distill = DistillationConfig(
        n_envs=8,
        n_minibatches=2,
        value_loss_weight=0.5,
        log_level=LogLevel.LOSSES | LogLevel.GRAD_NORM,
        eval=EvalConfig(every_steps=100, n_envs=4),
    )
    train = TrainConfig(ppo=PPOConfig(n_envs=8, n_minibatches=2), seed=4)
    for config in (distill, train, PPOConfig(n_epochs=2), EvalConfig(at_start=False)):
        data = json.loads(json.dumps(config_to_dict(config)))
        assert data["kind"] == type(config).__name__
        assert config_from_dict(data) == config
    # Data stored before kinds were (a TrainConfig's fields alone) still loads.
    legacy = config_to_dict(train)
    assert legacy is not None
    del legacy["kind"]
    assert config_from_dict(legacy) == train
    with pytest.raises(ValueError, match="'SweepConfig', which is not one of"):
        config_from_dict({"kind": "SweepConfig"})


def test_distillation_config_validates_its_fields():
    from nnx_ppo.algorithms.config import DistillationConfig

    with pytest.raises(ValueError, match=r"n_envs=10 is not divisible by n_minibatches=4"):
        DistillationConfig(n_envs=10, n_minibatches=4)
    with pytest.raises(ValueError, match=r"value_loss_weight=-1.0 must be >= 0"):
        DistillationConfig(value_loss_weight=-1.0)
    with pytest.raises(ValueError, match=r"learning_rate=0.0 must be > 0"):
        DistillationConfig(learning_rate=0.0)
    with pytest.raises(TypeError, match=r"n_epochs=2.0 must be an int"):
        DistillationConfig(n_epochs=2.0)
    with pytest.raises(TypeError, match=r"eval=.* must be an EvalConfig"):
        DistillationConfig(eval={"enabled": False})
    with pytest.raises(ValueError, match="reset_mode='never' is not one of"):
        DistillationConfig(reset_mode="never")
    config = DistillationConfig(
        n_envs=4, n_minibatches=2, rollout_length=5, total_steps=41, iterations_per_call=2
    )
    # 41 steps at 20 per iteration need 3 iterations, rounded up to whole calls of 2.
    assert (config.steps_per_iteration, config.n_iterations) == (20, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.n_envs = 8  # type: ignore[misc]
