"""The post-decision wager and ready-set-go tasks and the scores of their criteria.

As for the other cognitive tasks (test_cognitive_tasks.py): rewards and trial structure
derived by hand on scripted policies, the ideal observer against its closed form, the
memoryless floor; plus `wager_criterion` and `timing_scores` on trials whose answer is
known.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_ppo.algorithms.analysis import TrialResults, timing_scores, wager_criterion
from nnx_ppo.envs.cognitive import Outcome, PostDecisionWager, ReadySetGo

DT = 20.0


def _phi(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def _results(env, final):
    keep = {k: final[k] for k in TrialResults.PER_TRIAL}
    return TrialResults(**keep, condition=final["condition"],
                        opt_out_action=getattr(env, "opt_out_action", None))  # fmt: skip


# -- post-decision wager ------------------------------------------------------------------


def _play(env, policy, ids, seed=0):
    """Plays trial ``j`` of condition ``j % C`` with ``policy(memory, obs, info)``, whose
    memory starts as ``{"id": ids[j], "sum": 0, "count": [0, 0]}`` (``id`` picks the
    scripted behaviour): the final infos, the summed rewards and the epochs' bounds."""
    n = len(ids)
    keys = jax.random.split(jax.random.key(seed), n)
    state = jax.jit(jax.vmap(env.reset_condition))(keys, jnp.arange(n) % env.n_conditions)
    memory = {"id": jnp.asarray(ids, jnp.int32), "sum": jnp.zeros(n), "count": jnp.zeros((n, 2))}

    def body(carry, _):
        state, memory, ended, final, total = carry
        memory, action = jax.vmap(policy)(memory, state.obs, state.info)
        nxt = jax.vmap(env.step)(state, action)
        first = (nxt.done > 0) & ~ended
        final = jax.tree.map(lambda f, x: jnp.where(first, x, f), final, nxt.info)
        total = total + jnp.where(ended, 0.0, nxt.reward)
        return (nxt, memory, ended | (nxt.done > 0), final, total), None

    init = (state, memory, jnp.zeros(n, bool), state.info, jnp.zeros(n))
    run = jax.jit(lambda c: jax.lax.scan(body, c, None, length=env.max_trial_steps)[0])
    _, _, ended, final, total = run(init)
    assert bool(jnp.all(ended)), "every trial must end within max_trial_steps"
    bounds = np.asarray(state.pipeline_state.bounds)
    return jax.tree.map(np.asarray, final), np.asarray(total), bounds


def _stimulus_law(env):
    """The exact law of the stimulus's length in ms after flooring to steps: ``100 +
    Exp(180)`` conditioned below 900 ms."""
    d = env.durations["stimulus"]
    cdf = lambda ms: (
        (1 - math.exp(-(min(max(ms, d.low), d.high) - d.low) / d.mean))
        / (1 - math.exp(-(d.high - d.low) / d.mean))
    )
    ks = range(int(d.low // env.dt), int(d.high // env.dt) + 1)
    return [(k * env.dt, cdf((k + 1) * env.dt) - cdf(k * env.dt)) for k in ks]


_SURE_AT_GO, _SURE_IN_DELAY, _LEFT_AT_GO, _MEMORYLESS, _IDEAL = range(5)


def test_post_decision_wager():
    env = PostDecisionWager(dt=DT, correct_reward=2.0)
    C = env.n_conditions
    stimulus, delay = env.epoch_index("stimulus"), env.epoch_index("delay")
    decision = env.epoch_index("decision")

    def policy(memory, obs, info):
        # The ideal observer sums right - left over the stimulus; at the go cue it takes
        # the sure option when offered (the sure channel on) and |sum| < 25, else the sign.
        total = memory["sum"] + jnp.where(info["epoch"] == stimulus, (obs[2] - obs[1]) * DT, 0.0)
        offered = obs[3] > 0.5
        ideal = jnp.where(offered & (jnp.abs(total) < 25.0), 3, jnp.where(total > 0, 2, 1))
        go = info["epoch"] == decision
        action = jnp.select(
            [memory["id"] == k for k in range(5)],
            [go * 3, (info["epoch"] == delay) * 3, go * 1,
             go * jnp.where(offered, 3, 1), go * ideal],
        )  # fmt: skip
        return {**memory, "sum": total}, action.astype(jnp.int32)

    per = 200  # ideal-observer trials per condition
    ids = np.repeat([_SURE_AT_GO, _SURE_IN_DELAY, _LEFT_AT_GO, _MEMORYLESS, _IDEAL],
                    [C, C, C, 2 * C, per * C])  # fmt: skip
    final, total, bounds = _play(env, policy, ids)
    part = lambda k: (ids == k, jax.tree.map(lambda x: x[ids == k], final))
    wager = env.conditions["wager"] > 0

    # The sure option at the go cue: 0.7 * 2 on wager trials; breaking fixation without it.
    mask, trials = part(_SURE_AT_GO)
    np.testing.assert_allclose(total[mask], np.where(wager, 1.4, -1.0), rtol=1e-6)
    expected = np.where(wager, Outcome.WRONG, Outcome.ABORTED)
    np.testing.assert_array_equal(trials["outcome"], expected)
    np.testing.assert_array_equal(trials["choice"], np.where(wager, 3, 0))
    results = _results(env, trials)
    assert results.opted_out.tolist() == wager.tolist() and not results.decided.any()
    assert results.decision_rate == 0.5 and math.isnan(results.accuracy)
    # During the delay every choice, the sure option included, breaks fixation.
    np.testing.assert_array_equal(total[ids == _SURE_IN_DELAY], -1.0)
    # Left at the go cue: right on the leftward half, whatever the wager.
    mask, trials = part(_LEFT_AT_GO)
    np.testing.assert_array_equal(total[mask], np.where(env.conditions["direction"] < 0, 2, 0))
    assert _results(env, trials).accuracy == 0.5

    # Epochs: stimulus in [100, 900) ms, sure onset [500, 750) ms after it, the whole
    # delay [1200, 1800) ms.
    ms = np.diff(bounds, axis=1) * DT
    assert np.all((ms[:, 1] >= 100) & (ms[:, 1] < 900))
    assert np.all((ms[:, 2] >= 500) & (ms[:, 2] < 750))
    assert np.all((ms[:, 2] + ms[:, 3] >= 1200) & (ms[:, 2] + ms[:, 3] < 1800))
    assert int(bounds[:, -1].max()) <= env.max_trial_steps == 38 + 45 + 90 + 25

    # Memoryless floor: at the go cue the observation is the same whatever the direction
    # and coherence (test_task_properties), so the best such policy takes the sure
    # option where offered and guesses elsewhere: (0.7 + 0.5) / 2 of 2 per trial.
    mask, trials = part(_MEMORYLESS)
    np.testing.assert_allclose(total[mask].mean(), 1.2, rtol=1e-6)
    check = wager_criterion(_results(env, trials))
    assert not check.sure_decreases and math.isnan(check.accuracy_gain) and not check.met

    # The ideal observer without the sure target: Phi(c / 100 sqrt(D) / (sqrt(2)
    # sigma)), averaged over the stimulus's law and the coherences (equally many trials).
    mask, trials = part(_IDEAL)
    results = _results(env, trials)
    law = _stimulus_law(env)
    expected = np.mean([
        sum(p * _phi(coh / 100 * math.sqrt(d) / (math.sqrt(2) * env.sigma)) for d, p in law)
        for coh in env.coherences
    ])  # fmt: skip
    without = results.decided & (results.condition["wager"] == 0)
    measured = np.mean(results.outcome[without] == Outcome.CORRECT)
    tol = 4 * math.sqrt(expected * (1 - expected) / without.sum()) + 0.005
    assert without.sum() == per * C // 2 and abs(measured - expected) <= tol, (measured, expected)
    # It meets the published criteria: sure choices fall with the coherence, waived
    # trials are more accurate, and it earns more than the memoryless floor.
    check = wager_criterion(results)
    p = check.scores["p_sure"]
    assert check.met and check.sure_decreases and p[0] > 0.4 and p[-1] < 0.05, p
    assert check.accuracy_gain > 0.05, check.scores
    assert results.decision_rate == 1.0 and total[mask].mean() > 1.2 + 0.1, check.p_sure
    with pytest.raises(ValueError, match="sure_reward=1"):
        PostDecisionWager(sure_reward=1)


def test_wager_criterion_on_synthetic_trials():
    # Two coherences, 10 wager and 10 other trials each. The sure option taken more
    # often at the HIGH coherence, waived trials less accurate: both criteria fail.
    coherence = np.repeat([0.0, 10.0, 0.0, 10.0], 10)
    wager = np.repeat([1, 1, 0, 0], 10)
    choice = np.concatenate([
        [3] * 2 + [1] * 8, [3] * 6 + [1] * 4, [1] * 10, [1] * 10])  # fmt: skip
    correct = np.concatenate([[0] * 10, [0] * 6 + [1, 0, 0, 0], [1] * 5 + [0] * 5, [1] * 10])
    outcome = np.where(correct == 1, Outcome.CORRECT, Outcome.WRONG)
    results = TrialResults(
        outcome=outcome, choice=choice, answer=np.ones(40), decision_time=np.ones(40),
        reaction_time=np.ones(40), condition_index=np.zeros(40), opt_out_action=3,
        condition={"coherence": coherence, "wager": wager},
    )  # fmt: skip
    check = wager_criterion(results)
    np.testing.assert_allclose(check.scores["p_sure"], [0.2, 0.6])
    np.testing.assert_allclose(check.scores["accuracy_waived"], [0.0, 0.25])
    np.testing.assert_allclose(check.scores["accuracy_without"], [0.5, 1.0])
    np.testing.assert_allclose(check.sure_slope, 0.04)
    assert check.accuracy_gain == pytest.approx(-0.75)  # 10 % only: 0 % is left out
    assert not (check.sure_decreases or check.waived_more_accurate or check.met)
    assert check.p_sure == pytest.approx(0.4) and not check.training_met  # 0.4 is excluded
    no_sure = TrialResults(**{k: getattr(results, k) for k in TrialResults.PER_TRIAL},
                           condition=results.condition)  # fmt: skip
    with pytest.raises(ValueError, match="opt_out_action is None"):
        wager_criterion(no_sure)
    with pytest.raises(ValueError, match=r"sure_window=\(0.6, 0.4\)"):
        wager_criterion(results, sure_window=(0.6, 0.4))


# -- ready-set-go -------------------------------------------------------------------------

_FIXED, _EARLY, _NEVER, _TIMER_IDEAL = range(4)


def test_ready_set_go():
    # Gain 1.5: targets 1200 and 1500 ms, windows 240 and 300 ms.
    env = ReadySetGo(dt=DT, gain=1.5, intervals=(800, 1000), correct_reward=2.0)
    ready, set_ = env.epoch_index("ready"), env.epoch_index("set")

    def policy(memory, obs, info):
        # count: the steps from ready to set (t_s / dt), and since set's onset, this
        # one included (a go now has t_p = count[1] * dt).
        measuring = (info["epoch"] >= ready) & (info["epoch"] < set_)
        count = memory["count"] + jnp.stack([measuring, info["epoch"] >= set_])
        since = (count[1] > 0) * count[1] * DT
        action = jnp.select(
            [memory["id"] == k for k in range(4)],
            [since >= 1100, info["epoch"] == env.epoch_index("measure"), False,
             (count[1] > 0) & (since >= 1.5 * count[0] * DT)],
        )  # fmt: skip
        return {**memory, "count": count}, action.astype(jnp.int32)

    ids = np.repeat([_FIXED, _EARLY, _NEVER, _TIMER_IDEAL], 2)
    final, total, bounds = _play(env, policy, ids)
    # t_p = 1100: 100 ms early of 1200 -> 2 * (1 - 100 / 240); 400 ms early of 1500,
    # outside the window of 300 -> 0, wrong.
    np.testing.assert_array_equal(final["reaction_time"][:2], [1100.0, 1100.0])
    np.testing.assert_allclose(total[:2], [2 * (1 - 100 / 240), 0.0], rtol=1e-6)
    np.testing.assert_array_equal(final["outcome"][:2], [Outcome.CORRECT, Outcome.WRONG])
    fixed = timing_scores(_results(env, jax.tree.map(lambda x: x[:2], final)))
    assert fixed.slope == 0.0 and fixed.mean.tolist() == [1100.0, 1100.0]  # no timing
    # Going before set breaks fixation; never going runs out, 500 + t_s + 2 * 1.5 t_s ms.
    np.testing.assert_array_equal(total[2:4], [-1.0, -1.0])
    np.testing.assert_array_equal(final["outcome"][2:6], [Outcome.ABORTED] * 2 + [4] * 2)
    np.testing.assert_array_equal(bounds[4:6, -1] * DT, [3700.0, 4500.0])
    # The ideal observer produces 1.5 t_s exactly: the whole reward, slope 1.5.
    np.testing.assert_array_equal(total[6:], [2.0, 2.0])
    ideal = timing_scores(_results(env, jax.tree.map(lambda x: x[6:], final)))
    np.testing.assert_array_equal(ideal.mean, [1200.0, 1500.0])
    assert ideal.slope == pytest.approx(1.5) and ideal.intercept == pytest.approx(0, abs=1e-6)
    assert ideal.relative_error == 0.0 and ideal.answered == 1.0
    with pytest.raises(ValueError, match=r"flash=10\.0 ms is shorter than dt=20\.0"):
        ReadySetGo(dt=20, flash=10)
    with pytest.raises(ValueError, match=r"gain=0\.01 leaves the shortest interval \(800 ms\)"):
        ReadySetGo(gain=0.01)


# -- properties of both tasks -------------------------------------------------------------


@pytest.mark.parametrize("make", [PostDecisionWager, ReadySetGo], ids=["wager", "rsg"])
def test_task_properties(make):
    # Two trials of every condition under fixation, jitted and vmapped (the scan checks
    # that the state keeps its structure and dtypes from step to step).
    env = make(dt=DT)
    n = 2 * env.n_conditions
    keys = jax.random.split(jax.random.key(7), n)

    def body(state, _):
        out = (state.obs, state.info["epoch"], state.reward)
        return jax.vmap(env.step)(state, jnp.zeros(n, jnp.int32)), out

    @jax.jit
    def play(keys):
        state = jax.vmap(env.reset_condition)(keys, jnp.arange(n) % env.n_conditions)
        return state, jax.lax.scan(body, state, None, length=env.max_trial_steps)

    state, (last, (obs, epoch, reward)) = play(keys)
    obs, epoch, reward = np.asarray(obs), np.asarray(epoch), np.asarray(reward)
    assert obs.shape == (env.max_trial_steps, n, len(env.inputs)) and obs.dtype == np.float32
    assert reward.dtype == np.float32 and np.all(np.asarray(last.done) == 1)  # every trial ends
    # The memoryless floor: every response-epoch observation is one of two (the sure
    # target on or off; the set pulse, then nothing), whatever the trial's answer or
    # interval.
    responding = np.isin(epoch, [env.epoch_index(e) for e in env.response_epochs])
    assert len(np.unique(obs[responding], axis=0)) == 2
    fixating = epoch < env.epoch_index("decision" if make is PostDecisionWager else "set")
    valid = np.arange(env.max_trial_steps)[:, None] < np.asarray(state.pipeline_state.bounds)[:, -1]
    np.testing.assert_array_equal(obs[..., 0][valid], fixating[valid])
    if make is PostDecisionWager:  # the sure target: from its onset, on wager trials only
        wager = np.asarray(state.info["condition"]["wager"])
        on = (epoch >= env.epoch_index("sure")) & (wager > 0)
        np.testing.assert_array_equal(obs[..., 3][valid], on[valid])
    # Dict observations split the channels into the groups.
    dict_env = make(dt=DT, dict_obs=True)
    flat = obs[0, 0]  # trial 0's first observation, of key 0 of keys
    split = jax.jit(dict_env.reset_condition)(keys[0], 0).obs
    for group, channels in env.groups.items():
        index = np.asarray([env.inputs.index(ch) for ch in channels])
        np.testing.assert_array_equal(split[group], flat[index])
