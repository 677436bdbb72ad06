"""Cognitive tasks: trial rules, noise scaling, ideal observers and memoryless floors.

Every task is checked against two policies written here from the task's definition:
its ideal observer (integrates all the evidence the observations carry) and its
memoryless floor (sees only the current observation). The accuracies are Monte Carlo
estimates from the task's own observations, compared with the closed form where there
is one, so a task that leaks its answer (memoryless above chance) or that cannot be
solved (ideal observer at chance) fails.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _cognitive_helpers import accuracy, integrator, run_trials

from nnx_ppo.envs.cognitive import Outcome, PerceptualDecisionMaking

# -- the trial rules ---------------------------------------------------------------------


def test_breaking_fixation_aborts_and_ends_the_trial():
    env = PerceptualDecisionMaking(dt=20)
    state = env.reset(jax.random.key(1))
    state = env.step(state, jnp.int32(0))  # fixating during fixation: the trial goes on
    assert float(state.done) == 0 and float(state.reward) == 0
    assert int(state.info["time"]) == 1
    state = env.step(state, jnp.int32(2))
    assert float(state.done) == 1 and float(state.reward) == -1
    assert int(state.info["outcome"]) == Outcome.ABORTED and int(state.info["choice"]) == 0
    assert float(state.metrics["abort"]) == 1 and float(state.metrics["trial_end"]) == 1


def test_epochs_follow_the_durations_and_the_go_cue_switches_fixation_off():
    env = PerceptualDecisionMaking(dt=10, sigma=0.0)
    state = env.reset_condition(jax.random.key(3), 9)  # 51.2 % rightward
    bounds = np.asarray(state.pipeline_state.bounds)
    assert bounds[1] == 75 and 8 <= bounds[2] - bounds[1] < 150 and bounds[3] - bounds[2] == 50
    epochs, obs = [], []
    for _ in range(int(bounds[-1])):
        epochs.append(int(state.info["epoch"]))
        obs.append(np.asarray(state.obs))
        state = env.step(state, jnp.int32(0))
    assert float(state.done) == 1 and int(state.info["outcome"]) == Outcome.NO_DECISION
    assert float(state.reward) == 0
    epochs, obs = np.asarray(epochs), np.asarray(obs)
    np.testing.assert_array_equal(np.bincount(epochs), np.diff(bounds))
    np.testing.assert_array_equal(obs[:, 0], epochs < 2)  # fixation cue until the go cue
    stim = obs[epochs == 1]  # noiseless: (1 -+ 0.512) / 2
    np.testing.assert_allclose(stim[:, 1:], np.tile([0.244, 0.756], (len(stim), 1)), atol=1e-6)
    assert np.all(obs[epochs != 1, 1:] == 0)


def test_a_decision_in_the_response_epoch_is_scored_and_timed():
    env = PerceptualDecisionMaking(dt=10, sigma=0.0)
    state = env.reset_condition(jax.random.key(0), 0)  # 0 % leftward: answer 1
    go = int(state.pipeline_state.bounds[2])
    for _ in range(go + 4):
        state = env.step(state, jnp.int32(0))
    state = env.step(state, jnp.int32(1))
    assert float(state.reward) == 1 and int(state.info["outcome"]) == Outcome.CORRECT
    assert int(state.info["choice"]) == 1
    assert float(state.info["decision_time"]) == (go + 5) * 10
    assert float(state.info["reaction_time"]) == 50.0


def test_reaction_time_version_decides_during_the_stimulus():
    env = PerceptualDecisionMaking(reaction_time=True, dt=10)
    state = env.reset_condition(jax.random.key(0), 11)  # 51.2 % rightward
    for _ in range(75):
        state = env.step(state, jnp.int32(0))
    assert int(state.info["epoch"]) == 1 and float(state.obs[0]) == 0  # no fixation cue
    state = env.step(state, jnp.int32(2))
    assert int(state.info["outcome"]) == Outcome.CORRECT
    assert float(state.info["reaction_time"]) == 10.0


def test_conditions_are_balanced_and_drawn_uniformly():
    env = PerceptualDecisionMaking()
    assert env.n_conditions == 10
    np.testing.assert_allclose(
        sorted(env.conditions["signed_coherence"]),
        [-51.2, -25.6, -12.8, -6.4, 0, 0, 6.4, 12.8, 25.6, 51.2],
        rtol=1e-6,
    )
    index = jax.vmap(lambda k: env.reset(k).info["condition_index"])(
        jax.random.split(jax.random.key(0), 5000)
    )
    counts = np.bincount(np.asarray(index), minlength=10)
    assert counts.min() > 400 and counts.max() < 600  # 500 +- 4.5 sd


def test_discrete_actions_only_with_a_named_fix():
    env = PerceptualDecisionMaking()
    state = env.reset(jax.random.key(0))
    with pytest.raises(ValueError, match="CategoricalSampler"):
        env.step(state, jnp.zeros(3))
    with pytest.raises(ValueError, match="categorical"):
        env.step(state, jnp.float32(1))
    with pytest.raises(ValueError, match="dt=0"):
        PerceptualDecisionMaking(dt=0)
    with pytest.raises(ValueError, match="coherences"):
        PerceptualDecisionMaking(coherences=[120])


def test_dict_observations_split_the_channels():
    env = PerceptualDecisionMaking(dict_obs=True)
    assert env.observation_size == {"fixation": (1,), "stimulus": (2,)}
    obs = env.reset(jax.random.key(0)).obs
    assert obs["fixation"].shape == (1,) and obs["stimulus"].shape == (2,)


def test_noise_is_scaled_so_the_evidence_does_not_depend_on_dt():
    # Summed evidence sum_t (right - left) * dt over a stimulus of D ms has standard
    # deviation sqrt(2) * sigma * sqrt(D) whatever dt: per step each channel has
    # std sigma / sqrt(dt), the difference sqrt(2) times that, and D / dt steps of it
    # times dt give sqrt(2) sigma sqrt(D / dt) sqrt(dt) ... = sqrt(2) sigma sqrt(D).
    sums = {}
    for dt in (5.0, 20.0):
        env = PerceptualDecisionMaking(dt=dt, coherences=[0])
        state = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 4000))

        def body(carry, _, env=env, dt=dt):
            state, total, ms = carry
            stim = state.info["epoch"] == 1
            total = total + jnp.where(stim, (state.obs[:, 2] - state.obs[:, 1]) * dt, 0.0)
            state = jax.vmap(env.step)(state, jnp.zeros(4000, jnp.int32))
            return (state, total, ms + stim * dt), None

        zeros = jnp.zeros(4000)
        (_, total, ms), _ = jax.jit(
            lambda c, body=body, n=env.max_trial_steps: jax.lax.scan(body, c, None, length=n)
        )((state, zeros, zeros))
        sums[dt] = np.asarray(total / jnp.sqrt(ms))
    for z in sums.values():
        assert abs(z.std() - math.sqrt(2) * math.sqrt(2)) < 0.1
    assert abs(sums[5.0].std() - sums[20.0].std()) < 0.12


# -- ideal observers and memoryless floors ------------------------------------------------


def _phi(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def test_perceptual_decision_ideal_observer_and_memoryless_floor():
    env = PerceptualDecisionMaking(dt=20)
    stimulus, decision = env.epoch_index("stimulus"), env.epoch_index("decision")
    ideal = integrator(
        env,
        evidence=lambda obs: obs[2] - obs[1],
        in_stimulus=lambda info: info["epoch"] == stimulus,
        respond=lambda info: info["epoch"] == decision,
    )
    final, _ = run_trials(env, ideal, 4000)
    assert np.all(final["outcome"] != Outcome.ABORTED)
    by_coherence = accuracy(final, "coherence")
    # Closed form: Phi(c / 100 sqrt(D) / (sqrt(2) sigma)), averaged over the stimulus
    # duration's law (sampled here from the task's own Duration).
    durations = np.asarray(
        jax.vmap(env.durations["stimulus"].sample)(jax.random.split(jax.random.key(9), 20000))
    )
    durations = np.floor(durations / env.dt + 1e-4) * env.dt
    for coherence, measured in by_coherence.items():
        expected = np.mean(
            [_phi(coherence / 100 * math.sqrt(d) / (math.sqrt(2) * env.sigma)) for d in durations]
        )
        assert abs(measured - expected) < 0.04, (coherence, measured, expected)
    assert by_coherence[max(by_coherence)] > 0.99 and abs(by_coherence[0.0] - 0.5) < 0.05

    # Memoryless: at the go cue the stimulus is off, so any choice is at chance.
    floor = integrator(
        env,
        evidence=lambda obs: obs[2] - obs[1],
        in_stimulus=lambda info: info["epoch"] == decision,  # only what is shown now
        respond=lambda info: info["epoch"] == decision,
    )
    final, _ = run_trials(env, floor, 4000, seed=1)
    correct = (final["outcome"] == Outcome.CORRECT).mean()
    assert abs(correct - 0.5) < 0.03


# -- training ------------------------------------------------------------------------------


@pytest.mark.parametrize("trainer", ["train_ppo", "train_distillation", "train_many"])
def test_every_trainer_refuses_a_cached_reset_before_compiling(trainer):
    # A cached reset would restart every environment in the trial it drew first, so the
    # network would see one trial per environment for the whole run.
    from flax import nnx

    from nnx_ppo.algorithms import DistillationConfig, PPOConfig, train_many, train_ppo
    from nnx_ppo.algorithms.distillation.train import train_distillation
    from nnx_ppo.networks.factories import make_mlp_actor_critic

    env = PerceptualDecisionMaking(dt=100)

    def make(rngs):
        return make_mlp_actor_critic(3, 3, (4,), (4,), rngs=rngs, action_distribution="categorical")

    sizes = {"n_envs": 4, "rollout_length": 4, "n_minibatches": 2, "total_steps": 16}
    calls = {
        "train_ppo": lambda: train_ppo(env, make(nnx.Rngs(0)), PPOConfig(**sizes)),
        "train_distillation": lambda: train_distillation(
            env, make(nnx.Rngs(0)), make(nnx.Rngs(1)), DistillationConfig(**sizes)
        ),
        "train_many": lambda: train_many(env, make, PPOConfig(**sizes), seeds=[0, 1]),
    }
    with pytest.raises(ValueError, match=r"reset_mode='cached'.*reset_mode='fresh'"):
        calls[trainer]()
