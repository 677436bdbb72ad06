"""Supervised training on cognitive tasks: `trial_dataset` (inputs, targets, loss mask)
and `train_supervised` (BPTT on the PPO networks, seeds vmapped)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.algorithms.supervised import SupervisedConfig, train_supervised
from nnx_ppo.envs.cognitive import (
    CognitiveTask,
    Duration,
    GoNoGo,
    PerceptualDecisionMaking,
    trial_dataset,
)
from nnx_ppo.envs.point_mass import PointMass
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.recurrent import GRU
from nnx_ppo.networks.sampling_layers import CategoricalSampler


class Tiny(CognitiveTask):
    """dt = 100 ms: fixation 2 steps, a cue of 1-3 steps (drawn), decision 2 steps."""

    inputs = ("fixation", "cue")
    epochs = ("fixation", "cue", "decision")

    def epoch_durations(self):
        return {"fixation": Duration.fixed(200), "cue": Duration.uniform(100, 399),
                "decision": Duration.fixed(200)}  # fmt: skip

    def condition_table(self):
        return {"side": np.array([-1.0, 1.0])}

    def answer(self, condition):
        return jnp.where(condition["side"] < 0, 1, 2)

    def epoch_input(self, condition, epoch):
        cue = epoch == 1
        mean = jnp.stack([(epoch < 2).astype(jnp.float32), cue * condition["side"]])
        return mean, jnp.stack([False, True])


def gru_network(obs_size: int, n_actions: int, hidden: int = 16):
    """The cognitive app's GRU actor-critic, small: GRU -> Dense -> CategoricalSampler."""

    def make(rngs: nnx.Rngs) -> Sequential:
        actor = Sequential([GRU(obs_size, hidden, rngs=rngs), Dense(hidden, n_actions, rngs=rngs),
                            CategoricalSampler(rngs, 0.01)])  # fmt: skip
        critic = Sequential([GRU(obs_size, hidden, rngs=rngs), Dense(hidden, 1, rngs=rngs)])
        return Sequential([PPOAdapter(action=actor, value=critic)])

    return make


def test_a_dataset_by_hand_and_as_the_task_shows_it():
    task = Tiny(dt=100.0, sigma=0.5)
    data = trial_dataset(task, jax.random.key(3), 6, grace_ms=100.0)
    assert data.inputs.shape == (7, 6, 2) and task.max_trial_steps == 7  # 2 + 3 + 2 steps
    for j in range(6):
        length = int(data.valid[:, j].sum())
        cue = length - 4  # fixation 2 and decision 2 steps around the drawn cue
        assert 1 <= cue <= 3
        answer = int(data.answer[j])
        # epochs 0 0 1..1 2 2, then padding (-1); targets: fixate, then the answer.
        assert data.epoch[:, j].tolist() == [0, 0] + [1] * cue + [2, 2] + [-1] * (7 - length)
        assert data.targets[:, j].tolist() == [0] * (2 + cue) + [answer] * 2 + [0] * (7 - length)
        # mask: the trial's steps, less the first decision step (grace of 100 ms = 1 step).
        assert data.mask[:, j].tolist() == [1] * (2 + cue) + [0, 1] + [0] * (7 - length)
        assert np.all(np.asarray(data.inputs[length:, j]) == 0)  # padding shows nothing
        assert answer == (1 if int(data.condition_index[j]) == 0 else 2)

    # Trial j's inputs are what task.reset(key_j) and steps of action 0 show.
    @jax.jit
    def play(keys):
        def fixate(state, _):
            return jax.vmap(task.step)(state, jnp.zeros(6, jnp.int32)), state.obs

        return jax.lax.scan(fixate, jax.vmap(task.reset)(keys), length=7)[1]

    shown = play(jax.random.split(jax.random.key(3), 6))
    valid = np.asarray(data.valid)[..., None]
    np.testing.assert_allclose(np.where(valid, shown, 0), data.inputs, rtol=1e-6, atol=1e-6)

    # The task's rules, in `correct`: the targets win every trial; choosing during the
    # cue aborts; the wrong side loses; never choosing is wrong unless the answer is 0.
    actions = np.asarray(data.targets).copy()
    assert data.correct(jnp.asarray(actions)).tolist() == [True] * 6
    early = actions.copy()
    early[2, 0] = 1
    wrong = np.where(actions > 0, 3 - actions, 0)
    assert not bool(data.correct(jnp.asarray(early))[0])
    assert not np.any(np.asarray(data.correct(jnp.asarray(wrong))))
    assert not np.any(np.asarray(data.correct(jnp.zeros_like(data.targets))))
    nogo = trial_dataset(GoNoGo(dt=100.0), jax.random.key(0), 8)
    withheld = np.asarray(nogo.correct(jnp.zeros_like(nogo.targets)))
    assert withheld.tolist() == (np.asarray(nogo.answer) == 0).tolist()
    assert np.all(np.asarray(nogo.targets)[:, np.asarray(nogo.answer) == 0] == 0)


def test_training_learns_and_k_seeds_equal_each_alone():
    # Easy perceptual decisions (coherence 51.2 %, 100 ms steps): chance among choices
    # is 1/2, and an untrained network fixates or guesses (accuracy ~0).
    task = PerceptualDecisionMaking(dt=100.0, coherences=(51.2,))
    config = SupervisedConfig(n_updates=120, batch_size=16, learning_rate=1e-2,
                              updates_per_call=60)  # fmt: skip
    logged = []
    both = train_supervised(task, gru_network(3, 3), config, seeds=[0, 1],
                            log_fn=lambda m, update, run: logged.append((update, run)))  # fmt: skip
    loss, accuracy = both.curves["loss"], both.curves["accuracy"]
    assert loss.shape == accuracy.shape == (2, 120)
    assert np.all(loss[:, -10:].mean(axis=1) < 0.3 * loss[:, :5].mean(axis=1))
    assert np.all(accuracy[:, -10:].mean(axis=1) > 0.85)
    assert logged[:3] == [(1, 0), (1, 1), (2, 0)] and len(logged) == 240

    alone = train_supervised(task, gru_network(3, 3), config, seeds=[1])
    for name in ("loss", "step_accuracy"):
        np.testing.assert_allclose(both.curves[name][1], alone.curves[name][0], atol=2e-4)
    net_both, net_alone = both.network(1), alone.network(0)
    for a, b in zip(jax.tree.leaves(nnx.state(net_both, nnx.Param)),
                    jax.tree.leaves(nnx.state(net_alone, nnx.Param)), strict=True):  # fmt: skip
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-4)
    # The factory for train_many gives each seed's trained network back.
    made = both.make_network(nnx.Rngs(1))
    assert type(made) is type(net_both)
    np.testing.assert_array_equal(
        np.asarray(jax.tree.leaves(nnx.state(made, nnx.Param))[0]),
        np.asarray(jax.tree.leaves(nnx.state(net_both, nnx.Param))[0]),
    )
    with pytest.raises(ValueError, match=r"seed of the runs \[0, 1\]"):
        both.make_network(nnx.Rngs(7))


def test_what_cannot_be_trained_is_refused_before_compiling():
    task = PerceptualDecisionMaking(dt=100.0)
    with pytest.raises(TypeError, match="continuous-action environment has no correct action"):
        train_supervised(PointMass(), gru_network(4, 2))
    continuous = lambda rngs: make_mlp_actor_critic(3, 3, (4,), (4,), rngs=rngs)
    with pytest.raises(ValueError, match=r"NormalTanhSampler.*exactly one CategoricalSampler"):
        train_supervised(task, continuous)
    with pytest.raises(ValueError, match="CategoricalSampler with 3 logits"):
        train_supervised(task, gru_network(3, 2))
    with pytest.raises(ValueError, match="does not take the task's observations"):
        train_supervised(task, gru_network(5, 3))
    with pytest.raises(ValueError, match="repeats a seed"):
        train_supervised(task, gru_network(3, 3), seeds=[1, 1])
    with pytest.raises(TypeError, match="must be a SupervisedConfig"):
        train_supervised(task, gru_network(3, 3), config=object())
    with pytest.raises(ValueError, match="another structure"):
        sizes = iter([8, 16])
        train_supervised(task, lambda rngs: gru_network(3, 3, next(sizes))(rngs), seeds=[0, 1])
    with pytest.raises(ValueError, match=r"batch_size=0 must be >= 1"):
        SupervisedConfig(batch_size=0)
    with pytest.raises(TypeError, match=r"max_grad_norm='1' must be a real number or None"):
        SupervisedConfig(max_grad_norm="1")
    with pytest.raises(ValueError, match="n_steps=3 must be an int >= the task's longest"):
        trial_dataset(task, jax.random.key(0), 2, n_steps=3)
    assert dataclasses.asdict(SupervisedConfig()) == SupervisedConfig().to_json()


@pytest.mark.slow
def test_a_supervised_network_fine_tuned_with_ppo_keeps_its_accuracy():
    # Supervised to ~95 % on easy trials, then PPO from that network: the scores of the
    # same 100 trials before and after (deterministic policy) may not drop.
    from nnx_ppo.algorithms import EvalConfig, PPOConfig, TrainConfig, evaluate_trials, train_ppo

    task = PerceptualDecisionMaking(dt=100.0, coherences=(51.2,))
    config = SupervisedConfig(n_updates=200, batch_size=32, learning_rate=1e-2)
    network = train_supervised(task, gru_network(3, 3), config).network(0)
    score = lambda net: evaluate_trials(task, net, trials_per_condition=50,
                                        key=jax.random.key(5))  # fmt: skip
    before = score(network)
    assert before.decision_rate > 0.95 and before.accuracy > 0.9
    ppo = PPOConfig(n_envs=32, rollout_length=28, n_minibatches=2, total_steps=32 * 28 * 10,
                    learning_rate=3e-4, reset_mode="fresh")  # fmt: skip
    train_ppo(task, network, TrainConfig(ppo=ppo, eval=EvalConfig(enabled=False)))
    after = score(network)  # train_ppo trains the network it is given, in place
    assert after.decision_rate >= before.decision_rate - 0.02
    assert after.accuracy >= before.accuracy - 0.02
