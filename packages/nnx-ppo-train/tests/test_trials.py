"""Trial-level evaluation: balanced conditions, determinism, scoring against hand counts
and a reference rollout, recordings, sweeps, errors, fits and plots.

The networks are tiny. Most are *linear policies*: categorical logits ``obs @ kernel +
bias`` with no hidden layer and no normalizer, set by hand so that the behaviour (and so
every score) follows from the task's definition. Networks of one structure share a
graph definition, so the tests reuse a few compiled trial programs.
"""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _cognitive_helpers import run_trials
from flax import nnx

from nnx_ppo.algorithms.analysis.psychometrics import PsychometricFit, fit_psychometric
from nnx_ppo.algorithms.observe import trials as trials_module
from nnx_ppo.algorithms.observe.trials import TrialResults, evaluate_trials, evaluate_trials_many
from nnx_ppo.envs.cognitive import Outcome, PerceptualDecisionMaking
from nnx_ppo.envs.point_mass import PointMass
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.recording import flatten_activations
from nnx_ppo.wrappers import Wrapper

# Fixed duration at dt = 100 ms: fixation 8 steps (750 ms rounds to 8), stimulus 0..14
# steps, decision 5 steps; 28 steps at most; 10 conditions (5 coherences x 2 directions).
FIXED = PerceptualDecisionMaking(dt=100)
# Reaction time: fixation 8 steps, then up to 20 stimulus steps during which a choice
# ends the trial; 12 conditions.
REACTION = PerceptualDecisionMaking(reaction_time=True, dt=100)
PER_CONDITION = 20  # N = 200 trials of FIXED
KEY = jax.random.key(0)

# Logits of the linear policies (rows: the fixation, left and right channels).
FIXATE = np.zeros((3, 3)), [10.0, 0.0, 0.0]  # always action 0
LEFT_NOW = np.zeros((3, 3)), [0.0, 10.0, 0.0]  # always action 1
# (10 fix, 0, 5): fixate while the fixation channel is 1, choose "right" at the go cue.
RIGHT_AT_GO = np.array([[10.0, 0, 0], [0, 0, 0], [0, 0, 0]]), [0.0, 0.0, 5.0]
# Fixate while the fixation channel is 1, then choose the brighter channel of the first
# stimulus step: logits (0, 10 (left - right), 10 (right - left)).
BRIGHTER = np.array([[10.0, 0, 0], [0, 10, -10], [0, -10, 10]]), [0.0, 0.0, 0.0]


def linear_policy(weights, seed=0):
    kernel, bias = weights
    net = make_mlp_actor_critic(
        3, 3, (), (4,), rngs=nnx.Rngs(seed), normalize_obs=False,
        action_distribution="categorical",
    )  # fmt: skip
    linear = net.layers[0].action.layers[0].layers[0].linear
    linear.kernel[...] = jnp.asarray(kernel, jnp.float32)
    linear.bias[...] = jnp.asarray(bias, jnp.float32)
    return net


def snapshot(network):
    """Every variable of ``network`` as numpy (PRNG keys as their key data)."""

    def leaf(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.array(x)

    return jax.tree.map(leaf, nnx.state(network))


def modes(network):
    return [m.deterministic for _, m in nnx.iter_graph(network) if hasattr(m, "deterministic")]


def same_trials(a: TrialResults, b: TrialResults) -> bool:
    fields = ("outcome", "choice", "answer", "decision_time", "reaction_time", "condition_index")
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in fields) and all(
        np.array_equal(a.condition[k], b.condition[k]) for k in a.condition
    )


def test_every_condition_is_played_equally_often():
    results = evaluate_trials(FIXED, linear_policy(FIXATE), trials_per_condition=PER_CONDITION,
                              key=KEY)  # fmt: skip
    assert results.n_trials == 200
    np.testing.assert_array_equal(np.bincount(results.condition_index), [20] * 10)
    np.testing.assert_array_equal(results.condition_index, np.arange(200) % 10)  # trial j: j % C
    for name, table in FIXED.conditions.items():  # each trial shows its row's values
        np.testing.assert_array_equal(results.condition[name], table[results.condition_index])
    assert results.psychometric_variable == "signed_coherence"
    assert results.epoch_names == ("fixation", "stimulus", "decision")
    assert results.action_names == ("fixate", "left", "right")
    assert results.activations is None and results.valid is None  # not recorded


def test_always_fixating_never_decides_and_always_choosing_aborts():
    # Fixating throughout runs every trial out: NO_DECISION, no choice, no times.
    fixate = evaluate_trials(FIXED, linear_policy(FIXATE), trials_per_condition=PER_CONDITION,
                             key=KEY)  # fmt: skip
    assert fixate.outcome_counts == {"ongoing": 0, "correct": 0, "wrong": 0, "aborted": 0,
                                     "no_decision": 200}  # fmt: skip
    assert (fixate.decision_rate, fixate.abort_rate) == (0.0, 0.0)
    assert math.isnan(fixate.accuracy) and not fixate.criteria()
    np.testing.assert_array_equal(fixate.choice, 0)
    np.testing.assert_array_equal(fixate.decision_time, -1.0)
    np.testing.assert_array_equal(fixate.reaction_time, -1.0)
    assert np.isnan(fixate.by_condition()["p_choose_2"]).all()
    with pytest.raises(ValueError, match="none of the 200 trials was decided"):
        fixate.psychometric()
    # Choosing "left" at once breaks fixation on step 0: every trial aborted, no decision.
    left = evaluate_trials(FIXED, linear_policy(LEFT_NOW), trials_per_condition=PER_CONDITION,
                           key=KEY)  # fmt: skip
    np.testing.assert_array_equal(left.outcome, Outcome.ABORTED)
    assert (left.abort_rate, left.decision_rate) == (1.0, 0.0)
    np.testing.assert_array_equal(left.choice, 0)
    np.testing.assert_array_equal(left.decision_time, -1.0)


def test_choosing_right_at_the_go_cue_is_scored_by_hand_and_matches_a_reference_rollout():
    results = evaluate_trials(FIXED, linear_policy(RIGHT_AT_GO),
                              trials_per_condition=PER_CONDITION, key=KEY)  # fmt: skip
    # Every trial is decided (2) on the go cue's step: correct exactly where the dots
    # move right (answer 2), half the balanced conditions; the reaction time is one step
    # (the decision answers the first decision-epoch observation: (t + 1) dt - t dt).
    right = results.condition["direction"] > 0
    np.testing.assert_array_equal(results.answer, np.where(right, 2, 1))
    np.testing.assert_array_equal(results.outcome, np.where(right, Outcome.CORRECT, Outcome.WRONG))
    np.testing.assert_array_equal(results.choice, 2)
    np.testing.assert_array_equal(results.reaction_time, 100.0)
    # The decision time is fixation (800 ms) + the drawn stimulus (0..1400 ms) + 100 ms.
    stimulus = results.decision_time - 900.0
    assert stimulus.min() >= 0 and stimulus.max() <= 1400 and np.all(stimulus % 100 == 0)
    assert len(np.unique(stimulus)) > 3  # the durations are drawn per trial
    assert (results.decision_rate, results.abort_rate, results.accuracy) == (1.0, 0.0, 0.5)
    assert not results.criteria() and results.criteria(decision=1.0, correct=0.5)
    table = results.by_condition("direction")
    np.testing.assert_array_equal(table["direction"], [-1.0, 1.0])
    np.testing.assert_array_equal(table["n"], [100, 100])
    np.testing.assert_array_equal(table["accuracy"], [0.0, 1.0])
    np.testing.assert_array_equal(table["p_choose_2"], [1.0, 1.0])
    np.testing.assert_array_equal(table["reaction_time"], [math.nan, 100.0])  # correct only

    # The same policy as a pure function, played by the tests' own trial runner with the
    # same keys (split(key, N)) and conditions (j % C), ends every trial the same way.
    def policy(memory, obs, info):
        return memory, jnp.where(obs[0] > 0.5, 0, 2).astype(jnp.int32)

    final, _ = run_trials(FIXED, policy, results.n_trials, seed=0)
    for name in ("outcome", "choice", "answer", "decision_time", "reaction_time",
                 "condition_index"):  # fmt: skip
        np.testing.assert_array_equal(getattr(results, name), final[name], err_msg=name)


def test_same_key_gives_the_same_trials_and_another_key_others():
    net = linear_policy(RIGHT_AT_GO)
    first = evaluate_trials(FIXED, net, trials_per_condition=PER_CONDITION, key=KEY)
    again = evaluate_trials(FIXED, net, trials_per_condition=PER_CONDITION, key=KEY)
    other = evaluate_trials(FIXED, net, trials_per_condition=PER_CONDITION,
                            key=jax.random.key(1))  # fmt: skip
    assert same_trials(first, again)
    assert not np.array_equal(first.decision_time, other.decision_time)  # other durations
    # The trials do not depend on the network: another network with the same key plays
    # the same conditions and, deciding at the go cue too, the same durations.
    moved = linear_policy((RIGHT_AT_GO[0], [0.0, 5.0, 0.0]))  # chooses left at the go cue
    left = evaluate_trials(FIXED, moved, trials_per_condition=PER_CONDITION, key=KEY)
    np.testing.assert_array_equal(left.decision_time, first.decision_time)
    np.testing.assert_array_equal(left.choice, 1)


def test_recording_shapes_and_the_valid_mask_follow_the_decision_time():
    net = linear_policy(RIGHT_AT_GO)
    before, mode = snapshot(net), modes(net)
    results = evaluate_trials(FIXED, net, trials_per_condition=PER_CONDITION, key=KEY,
                              record=True)  # fmt: skip
    t, n = FIXED.max_trial_steps, results.n_trials
    assert (t, n) == (28, 200)
    assert results.actions.shape == results.epoch.shape == results.valid.shape == (t, n)
    assert results.observations.shape == (t, n, 3)
    leaves = flatten_activations(results.activations)
    assert leaves and all(v.shape[:2] == (t, n) for v in leaves.values())
    # valid is true up to and including the deciding step: decision_time / dt steps.
    steps = results.valid.sum(axis=0)
    np.testing.assert_array_equal(steps * FIXED.dt, results.decision_time)
    np.testing.assert_array_equal(results.valid, np.arange(t)[:, None] < steps[None])
    last = steps - 1
    np.testing.assert_array_equal(results.actions[last, np.arange(n)], 2)
    np.testing.assert_array_equal(results.epoch[last, np.arange(n)], FIXED.epoch_index("decision"))
    before_go = results.valid & (np.arange(t)[:, None] < last[None])
    assert np.all(results.actions[before_go] == 0)
    assert np.all(results.observations[..., 0][before_go] == 1.0)  # fixation channel on
    # Recording changes neither the scores nor the caller's network.
    assert same_trials(results, evaluate_trials(FIXED, net, trials_per_condition=PER_CONDITION,
                                                key=KEY))  # fmt: skip
    jax.tree.map(np.testing.assert_array_equal, snapshot(net), before)
    assert modes(net) == mode == [False]  # still in train mode (the factory's default)


def test_sampling_is_seeded_by_the_key_and_leaves_the_callers_network_alone():
    # An LSTM policy sampling its actions (deterministic=False), fixating with
    # probability ~ e^3 / (e^3 + 2) = 0.91 per step so that trials last a few steps.
    net = make_lstm_actor_critic(3, 3, 4, (), (4,), rngs=nnx.Rngs(0),
                                 action_distribution="categorical")  # fmt: skip
    net.layers[1].action.layers[1].layers[0].linear.bias[...] = jnp.array([3.0, 0.0, 0.0])
    net.eval()  # the caller's mode must survive a sampling evaluation
    before = snapshot(net)

    def run(key):
        return evaluate_trials(FIXED, net, trials_per_condition=PER_CONDITION, key=key,
                               record=True, deterministic=False)  # fmt: skip

    first, again, other = run(KEY), run(KEY), run(jax.random.key(1))
    assert same_trials(first, again)
    np.testing.assert_array_equal(first.actions, again.actions)
    jax.tree.map(np.testing.assert_array_equal, first.activations, again.activations)
    assert not np.array_equal(first.actions, other.actions)
    assert len(np.unique(first.outcome)) > 1  # sampled: trials end differently
    jax.tree.map(np.testing.assert_array_equal, snapshot(net), before)  # RNG counts included
    assert modes(net) == [True] * 3  # the sampler and both LSTMs (recurrent noise's flag)
    # Every trial starts from the initial carry: on step 0 (the same noise-free fixation
    # observation in every trial) both LSTMs' outputs agree across trials.
    for path in ("1/action/0", "1/value/0"):
        h0 = flatten_activations(first.activations)[path][0]
        np.testing.assert_array_equal(h0, np.broadcast_to(h0[:1], h0.shape))


def test_psychometric_and_chronometric_of_a_one_step_observer():
    # BRIGHTER decides on the first stimulus step: right iff right - left > 0, where
    # right - left = c / 100 + noise of std sqrt(2) sigma / sqrt(dt) = sqrt(6) / 10, so
    # P(right) = Phi(c / (100 sqrt(6) / 10)): a probit curve without lapse, bias 0 and
    # slope 1 / (10 sqrt(6)) = 0.0408 per % coherence; its reaction time is dt = 100 ms.
    results = evaluate_trials(REACTION, linear_policy(BRIGHTER), trials_per_condition=100, key=KEY)
    assert results.decision_rate == 1.0
    np.testing.assert_array_equal(results.reaction_time, 100.0)
    fit = results.psychometric(kind="probit")
    assert isinstance(fit, PsychometricFit) and fit.variable == "signed_coherence"
    assert abs(fit.slope - 1 / (10 * math.sqrt(6))) < 4 * fit.standard_errors["slope"]
    assert abs(fit.bias) < 4 * fit.standard_errors["bias"]
    assert fit.lapse < 0.02
    # The data points are the counts: the fraction choosing 2 per signed coherence (0 %
    # of both directions is one value, 200 trials).
    x = results.condition["signed_coherence"]
    values = np.unique(x)
    np.testing.assert_array_equal(fit.x, values)
    np.testing.assert_array_equal(fit.n, [np.sum(x == v) for v in values])
    np.testing.assert_array_equal(fit.p, [np.mean(results.choice[x == v] == 2) for v in values])
    np.testing.assert_array_equal(results.by_condition("signed_coherence")["p_choose_2"], fit.p)
    # Chronometric: every correct decision took 100 ms, at every |coherence|.
    chrono = results.chronometric()
    np.testing.assert_array_equal(chrono["value"], REACTION.coherences)
    magnitude, correct = np.abs(x), results.outcome == Outcome.CORRECT
    np.testing.assert_array_equal(chrono["n"], [np.sum(correct & (magnitude == v))
                                                for v in chrono["value"]])  # fmt: skip
    np.testing.assert_array_equal(chrono["mean"], 100.0)
    np.testing.assert_array_equal(chrono["sem"], 0.0)
    with pytest.raises(ValueError, match=r"variable='contrast' is not a condition value"):
        results.psychometric("contrast")


def test_hand_built_results_are_scored_by_hand():
    # Six trials at x = +-1: decided = outcome in (correct, wrong) and a choice:
    # trials 0, 1, 4, 5 (4/6); aborted 1/6; correct among decided 3/4. At x = 1 the
    # decided trials 0, 1, 5 chose 2, 1, 2 (2/3 chose 2); at x = -1 trial 4 chose 1.
    # Reaction times of correct decisions: x = 1: 300, 500 (mean 400); x = -1: 100.
    results = TrialResults(
        outcome=[1, 2, 3, 4, 1, 1], choice=[2, 1, 0, 0, 1, 2], answer=[2, 2, 1, 2, 1, 2],
        decision_time=[900, 800, -1, -1, 700, 1100], reaction_time=[300, 200, -1, -1, 100, 500],
        condition_index=[1, 1, 0, 1, 0, 1], condition={"x": [1, 1, -1, 1, -1, 1]},
        psychometric_variable="x",
    )  # fmt: skip
    assert results.decision_rate == 4 / 6 and results.abort_rate == 1 / 6
    assert results.accuracy == 3 / 4 and not results.withholding
    table = results.by_condition("x")
    np.testing.assert_array_equal(table["x"], [-1.0, 1.0])
    np.testing.assert_array_equal(table["n"], [2, 4])
    np.testing.assert_allclose(table["decision_rate"], [1 / 2, 3 / 4])
    np.testing.assert_allclose(table["accuracy"], [1.0, 2 / 3])
    np.testing.assert_allclose(table["p_choose_2"], [0.0, 2 / 3])
    np.testing.assert_allclose(table["reaction_time"], [100.0, 400.0])
    # |x| = 1 only: correct reaction times 300, 100, 500: mean 300, sem 200 / sqrt(3).
    chrono = results.chronometric()
    np.testing.assert_array_equal(chrono["n"], [3])
    np.testing.assert_allclose(chrono["mean"], [300.0])
    np.testing.assert_allclose(chrono["sem"], [200 / math.sqrt(3)])
    fit = results.psychometric(lapse=0.0)
    expected = fit_psychometric([1, 1, -1, 1], [True, False, False, True], lapse=0.0)
    assert (fit.bias, fit.slope) == (expected.bias, expected.slope)
    # Where withholding is an answer (a no-go trial, answer 0), accuracy counts correct
    # trials over all trials: the withheld no-go and the right choice, 2 of 3; every
    # trial got an answer (the withheld no-go counts), so the decision rate is 1 and
    # the published criterion (99 % answered, 80 % correct) fails on accuracy alone.
    go_nogo = TrialResults(outcome=[1, 1, 2], choice=[0, 2, 1], answer=[0, 2, 2],
                           decision_time=[-1, 500, 500], reaction_time=[-1, 100, 100],
                           condition_index=[0, 1, 1], condition={})  # fmt: skip
    assert go_nogo.withholding and go_nogo.accuracy == 2 / 3 and go_nogo.decision_rate == 1.0
    assert go_nogo.responded.tolist() == [True, True, True] and not go_nogo.criteria()
    assert go_nogo.criteria(correct=0.6) and not go_nogo.criteria(decision=1.0, correct=0.7)
    with pytest.raises(ValueError, match=r"outcome must be \[N\], got shape \(1, 3\)"):
        TrialResults(outcome=[[1, 1, 2]], choice=[0], answer=[0], decision_time=[0],
                     reaction_time=[0], condition_index=[0], condition={})  # fmt: skip
    with pytest.raises(ValueError, match=r"choice has shape \(2,\), but outcome has \(3,\)"):
        TrialResults(outcome=[1, 1, 2], choice=[0, 2], answer=[0, 2, 2],
                     decision_time=[0, 0, 0], reaction_time=[0, 0, 0],
                     condition_index=[0, 0, 0], condition={})  # fmt: skip
    with pytest.raises(ValueError, match=r"criteria: decision=1\.5 must be a fraction"):
        results.criteria(decision=1.5)


def test_two_action_task_fits_p_go_against_withholding_and_pairs_are_checked():
    # Go/no-go (actions fixate, go): 8 trials, 4 go (x = 1) and 4 no-go (x = 0).
    # Go trials: go, go, go, withheld (ran out); no-go: go (wrong), withheld x 2, and
    # one aborted (left out). P(go) among go-or-withheld trials: x = 0: 1/3, x = 1: 3/4.
    results = TrialResults(
        outcome=[1, 1, 1, 4, 2, 1, 1, 3], choice=[1, 1, 1, 0, 1, 0, 0, 0],
        answer=[1, 1, 1, 1, 0, 0, 0, 0], decision_time=[1] * 8, reaction_time=[1] * 8,
        condition_index=[1, 1, 1, 1, 0, 0, 0, 0], condition={"go": [1, 1, 1, 1, 0, 0, 0, 0]},
        psychometric_variable="go", action_names=("fixate", "go"),
    )  # fmt: skip
    assert results.default_choices == (0, 1)
    rate = results.choice_rate()
    np.testing.assert_array_equal(rate["go"], [0.0, 1.0])
    np.testing.assert_array_equal(rate["n"], [3, 4])
    np.testing.assert_array_equal(rate["k"], [1, 3])
    np.testing.assert_allclose(rate["p"], [1 / 3, 3 / 4])
    np.testing.assert_allclose(rate["sem"], np.sqrt([1 / 3 * 2 / 3 / 3, 3 / 4 / 4 / 4]))
    fit = results.psychometric()
    assert fit.n_trials == 7 and fit.p.tolist() == pytest.approx([1 / 3, 3 / 4])
    assert "2 values of x for 3 parameters" in fit.problems  # flagged, not reported
    # There is no action 2 on this task: the error names the pair and the actions.
    with pytest.raises(ValueError, match=r"choices=\(1, 2\).*\{0: 'fixate', 1: 'go'\}"):
        results.psychometric(choices=(1, 2))
    # Without a psychometric variable, the rate is per row of the condition table.
    per_row = dataclasses.replace(results, psychometric_variable="").choice_rate()
    assert per_row["condition_index"].tolist() == [0, 1] and per_row["go"].tolist() == [0, 1]
    # A three-action task's default pair is (1, 2): P(right) among left or right.
    rt = evaluate_trials(REACTION, linear_policy(BRIGHTER), trials_per_condition=100, key=KEY)
    assert rt.default_choices == (1, 2) and rt.label("signed_coherence") == "signed_coherence (%)"
    table = rt.choice_rate()
    np.testing.assert_array_equal(table["p"], rt.by_condition("signed_coherence")["p_choose_2"])


def test_to_dict_is_json_serialisable():
    results = evaluate_trials(FIXED, linear_policy(FIXATE), trials_per_condition=PER_CONDITION,
                              key=KEY)  # fmt: skip
    data = json.loads(json.dumps(results.to_dict(), allow_nan=False))
    assert data["n_trials"] == 200 and data["accuracy"] is None  # nan (no decision): None
    assert data["outcomes"]["no_decision"] == 200 and data["decision_rate"] == 0.0
    assert data["by_condition"]["condition_index"] == list(range(10))
    assert data["by_condition"]["p_choose_2"] == [None] * 10
    assert len(data["trials"]["outcome"]) == 200
    assert data["trials"]["condition"]["direction"] == results.condition["direction"].tolist()
    assert data["psychometric_variable"] == "signed_coherence"


def test_evaluate_trials_many_equals_evaluate_trials_per_run():
    from nnx_ppo.algorithms import EvalConfig, PPOConfig, TrainConfig, train_many
    from nnx_ppo.algorithms.sweeps.many import grid

    def make(rngs):
        return make_mlp_actor_critic(3, 3, (4,), (4,), rngs=rngs, action_distribution="categorical")

    # total_steps=0 builds and stacks the runs without compiling a training step (the
    # cost of this test is evaluation); a cognitive task needs reset_mode="fresh".
    ppo = PPOConfig(n_envs=2, rollout_length=2, n_minibatches=1, total_steps=0,
                    reset_mode="fresh")  # fmt: skip
    runs = grid(seeds=[0, 1])
    sweep = train_many(FIXED, make, TrainConfig(ppo=ppo, eval=EvalConfig(enabled=False)),
                       seeds=runs["seeds"], progress=False)  # fmt: skip
    options = {"trials_per_condition": 2, "key": KEY, "record": True, "deterministic": False}
    many = evaluate_trials_many(FIXED, sweep, **options)
    assert len(many) == sweep.n_runs == 2
    for i, results in enumerate(many):
        alone = evaluate_trials(FIXED, sweep.network(i), **options)
        assert same_trials(results, alone), i
        np.testing.assert_array_equal(results.actions, alone.actions)
        jax.tree.map(np.testing.assert_array_equal, results.activations, alone.activations)
    # Each run used its own variables (the seeds built different networks).
    first, second = (flatten_activations(r.activations) for r in many)
    assert not np.array_equal(first["1/value/0"], second["1/value/0"])  # critic hidden units
    with pytest.raises(TypeError, match="sweep must be the SweepResult train_many returns"):
        evaluate_trials_many(FIXED, [sweep.network(0)], trials_per_condition=2, key=KEY)


def test_errors_name_the_argument_before_anything_is_compiled(monkeypatch):
    def compile_nothing(*args):
        raise AssertionError("an invalid call reached compilation")

    monkeypatch.setattr(trials_module, "_trial_program", compile_nothing)
    net = linear_policy(FIXATE)
    ok = {"trials_per_condition": 1, "key": KEY}
    with pytest.raises(
        TypeError,
        match="env=PointMass is not a cognitive task: it has no "
        "reset_condition, n_conditions, max_trial_steps",
    ):
        evaluate_trials(PointMass(), net, **ok)
    with pytest.raises(TypeError, match=r"env is a Wrapper around PerceptualDecisionMaking.*"
                                        r"env\.unwrapped"):  # fmt: skip
        evaluate_trials(Wrapper(FIXED), net, **ok)
    with pytest.raises(ValueError, match=r"trials_per_condition=0 must be >= 1"):
        evaluate_trials(FIXED, net, trials_per_condition=0, key=KEY)
    with pytest.raises(TypeError, match=r"trials_per_condition=2\.0 must be an int"):
        evaluate_trials(FIXED, net, trials_per_condition=2.0, key=KEY)
    with pytest.raises(TypeError, match=r"key=0 must be a JAX PRNG key"):
        evaluate_trials(FIXED, net, trials_per_condition=1, key=0)
    with pytest.raises(TypeError, match=r"record='yes' must be True or False"):
        evaluate_trials(FIXED, net, **ok, record="yes")
    with pytest.raises(TypeError, match="network must be a StatefulModule"):
        evaluate_trials(FIXED, nnx.Linear(3, 3, rngs=nnx.Rngs(0)), **ok)
    five = make_mlp_actor_critic(5, 3, (), (4,), rngs=nnx.Rngs(0),
                                 action_distribution="categorical")  # fmt: skip
    with pytest.raises(ValueError, match=r"failed on the environment's observation.*\(2, 3\)"):
        evaluate_trials(FIXED, five, **ok)  # 5 observation features for a 3-channel task
    with pytest.raises(ValueError, match=r"evaluate_trials_many: trials_per_condition=0"):
        evaluate_trials_many(FIXED, object(), trials_per_condition=0, key=KEY)


def test_plots_draw_the_data_and_the_fits(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from nnx_ppo.algorithms.analysis.plotting import plot_chronometric, plot_psychometric

    net = linear_policy(BRIGHTER)
    runs = [evaluate_trials(REACTION, net, trials_per_condition=100, key=jax.random.key(k))
            for k in (0, 1)]  # fmt: skip
    ax = plot_psychometric(runs[0], kind="probit", path=tmp_path / "p.png")
    fit = runs[0].psychometric(kind="probit")
    (curve,) = [line for line in ax.get_lines() if "probit fit" in line.get_label()]
    np.testing.assert_allclose(curve.get_ydata(), fit(curve.get_xdata()))
    (points,) = [c for c in ax.containers if c.get_label().startswith("data")]
    assert points.get_label() == f"data ({fit.n_trials} decided trials)"
    np.testing.assert_array_equal(points.lines[0].get_xdata(), fit.x)
    np.testing.assert_array_equal(points.lines[0].get_ydata(), fit.p)
    # The error bars span p +- sqrt(p (1 - p) / n), the binomial standard error.
    (bars,) = points.lines[2]
    half = np.sqrt(fit.p * (1 - fit.p) / fit.n)
    np.testing.assert_allclose([s[:, 1] for s in bars.get_segments()],
                               np.stack([fit.p - half, fit.p + half], 1))  # fmt: skip
    assert ax.get_xlabel() == "signed_coherence (%)"
    assert ax.get_ylabel() == "P(right) of left or right"
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    plt.close(ax.figure)

    # A list: one faint fit per run, then the fit of all trials pooled.
    ax = plot_psychometric(runs)
    faint = [line for line in ax.get_lines() if line.get_alpha() is not None]
    assert len(faint) == 4  # each run's points and curve
    (pooled,) = [line for line in ax.get_lines() if "pooled over 2 runs" in line.get_label()]
    both = np.concatenate([r.condition["signed_coherence"] for r in runs])
    chose = np.concatenate([r.choice == 2 for r in runs])
    np.testing.assert_allclose(
        pooled.get_ydata(), fit_psychometric(both, chose)(pooled.get_xdata())
    )
    plt.close(ax.figure)

    ax = plot_chronometric(runs)
    (mean,) = [c.lines[0] for c in ax.containers if "pooled over 2 runs" in c.get_label()]
    np.testing.assert_array_equal(mean.get_xdata(), REACTION.coherences)
    np.testing.assert_array_equal(mean.get_ydata(), 100.0)
    assert len([line for line in ax.get_lines() if line.get_alpha() is not None]) == 2
    assert ax.get_xlabel() == "|signed_coherence| (%)"
    plt.close(ax.figure)

    with pytest.raises(ValueError, match="results is an empty list"):
        plot_psychometric([])
    with pytest.raises(TypeError, match=r"results\[1\] is a str, not a TrialResults"):
        plot_chronometric([runs[0], "run"])
    with pytest.raises(ValueError, match="kind='cubic'"):
        plot_psychometric(runs[0], kind="cubic")
