"""The run-time half of `PopulationGraph` (package-internal).

`GraphRuntime` holds the `StatefulModule` methods of a finalized graph: its carry
(start, reset, canonical form), one step, the staged sequence replay, the statistics
routed to the transforms, and the time constants of leaky populations. The arithmetic
is in ``_step``, ``_replay`` and ``_leak``; what is declared, and how, is in
`PopulationGraph` (``population_graph``), which subclasses it and sets every attribute
it reads.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks import recurrent_noise
from nnx_ppo.networks.graph import _leak, _replay, _step
from nnx_ppo.networks.graph.topology import Connection, ExecutionPlan, Population
from nnx_ppo.networks.types import Metrics, ModuleState, StatefulModule, StatefulModuleOutput

__all__ = ["BUFFER_DTYPE", "GraphRuntime"]

BUFFER_DTYPE = _step.ACTIVITY_DTYPE


class GraphRuntime(StatefulModule):
    """The `StatefulModule` methods of a finalized `PopulationGraph`.

    Not used on its own: `PopulationGraph` subclasses it, declares the graph and sets
    the attributes below in its constructor and ``finalize()``. The methods are
    documented on `PopulationGraph`.
    """

    # Set by PopulationGraph (its constructor, and the plan at finalize()).
    dt: float
    record_populations: bool
    raw_tau: nnx.Dict[nnx.Param]
    transforms: nnx.Dict[StatefulModule]
    noise_key: recurrent_noise.RecurrentNoiseKey | None
    deterministic: bool
    _populations: list[Population] | tuple[Population, ...]
    _connections: list[Connection] | tuple[Connection, ...]
    _plan: ExecutionPlan | None

    def initialize_state(self, batch_size: int) -> ModuleState:
        """Zero buffers and positions plus every transform's initial carry.

        Args:
            batch_size: Number of environments ``B``.

        Returns:
            The carry described in the class docstring.
        """
        plan = self._require_plan("initialize_state")
        state: dict[str, Any] = {
            "buffers": {
                name: jnp.zeros((batch_size, length, size), BUFFER_DTYPE)
                for name, length, size in plan.buffers
            },
            "positions": {name: jnp.zeros((batch_size,), jnp.int32) for name, _, _ in plan.buffers},
        }
        if plan.leaky:
            state["activity"] = {
                name: jnp.zeros((batch_size, size), BUFFER_DTYPE) for name, size in plan.leaky
            }
        state["transforms"] = {
            c.name: self.transforms[c.name].initialize_state(batch_size) for c in self._connections
        }
        if self.noise_key is not None:
            state[_leak.NOISE_KEY] = recurrent_noise.initial_keys(self.noise_key, batch_size)
        return state

    def reset_state(self, prev_state: ModuleState) -> ModuleState:
        """Zero the history (buffers and leaky activity), reset every transform's
        carry and fold a constant into each environment's noise key, a fresh stream for
        the next episode (batched ``prev_state``)."""
        plan = self._require_plan("reset_state")
        state: dict[str, Any] = {
            "buffers": jax.tree.map(jnp.zeros_like, prev_state["buffers"]),
            "positions": jax.tree.map(jnp.zeros_like, prev_state["positions"]),
        }
        if plan.leaky:
            state["activity"] = jax.tree.map(jnp.zeros_like, prev_state["activity"])
        state["transforms"] = {
            c.name: self.transforms[c.name].reset_state(prev_state["transforms"][c.name])
            for c in self._connections
        }
        if _leak.NOISE_KEY in prev_state:
            state[_leak.NOISE_KEY] = recurrent_noise.reset_keys(prev_state[_leak.NOISE_KEY])
        return state

    def canonical_state(self, state: ModuleState) -> ModuleState:
        """The carry with every delay buffer rolled to write position 0.

        A buffer ``[B, L, size]`` whose next write goes to slot ``p`` holds the entry of
        ``k`` steps ago in slot ``(p - k) % L``; rolled by ``p``, slot 0 holds the oldest
        entry (``L`` steps ago), slot ``L - 1`` the newest, and the position is 0. The
        graph reads the same values from both forms, so its outputs and (canonical)
        next carry are the same; the leaky activity is kept and each transform's carry
        is canonicalised by that transform (batched ``state``).
        """
        plan = self._require_plan("canonical_state")
        buffers, positions = state["buffers"], state["positions"]
        rolled = {}
        for name, length, _ in plan.buffers:
            slots = (jnp.arange(length)[None, :] + positions[name][:, None]) % length  # [B, L]
            rolled[name] = jnp.take_along_axis(buffers[name], slots[:, :, None], axis=1)
        canonical: dict[str, Any] = {
            "buffers": rolled,
            "positions": jax.tree.map(jnp.zeros_like, positions),
        }
        if plan.leaky:
            canonical["activity"] = state["activity"]
        canonical["transforms"] = {
            c.name: self.transforms[c.name].canonical_state(state["transforms"][c.name])
            for c in self._connections
        }
        if _leak.NOISE_KEY in state:
            canonical[_leak.NOISE_KEY] = state[_leak.NOISE_KEY]
        return canonical

    def update_statistics(self, rollout_extras: Any) -> None:
        """Route each connection's ``[T, B, ...]`` extras to its transform."""
        self._require_plan("update_statistics")
        for c in self._connections:
            self.transforms[c.name].update_statistics(rollout_extras["transforms"][c.name])

    def __call__(
        self, state: ModuleState, x: Any, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """Run one step of the graph.

        Args:
            state: The carry (see the class docstring).
            x: The observation dict; each ``obs[input_from]`` must be ``[B, size]``.
                Entries no population reads are ignored.
            rollout_extras: ``None`` in rollouts, else ``{"transforms": {...}}`` as
                emitted by the rollout for this step.

        Returns:
            A `StatefulModuleOutput` whose ``output`` is
            ``{output_to: [B, size]}`` and whose ``regularization_loss`` is ``[B]``.
        """
        plan = self._require_plan("__call__")
        batch = _step.batch_size(state, x)
        names = {p.name for p in plan.order}
        leaks = _leak.leak_factors(plan, self.dt, self.raw_tau)
        noise, noise_keys = _leak.draw_noise(plan, state, self.deterministic)
        step = _step.integrate(
            plan, self.transforms, names, state, x, rollout_extras, batch, leaks=leaks, noise=noise
        )
        return StatefulModuleOutput(
            next_state=_step.next_carry(plan, state, step.outputs, step.transforms, noise_keys),
            output={key: step.outputs[name] for key, name in plan.outputs},
            regularization_loss=jnp.broadcast_to(step.regularization, (batch,)),
            metrics=self._metrics(step.metrics, step.outputs),
            rollout_extras={"transforms": step.extras},
        )

    def replay_sequence(
        self, state: ModuleState, xs: Any, rollout_extras: Any, done: jax.Array
    ) -> tuple[ModuleState, StatefulModuleOutput]:
        """Replay a stored sequence, scanning over time only what needs the history.

        The result is that of the step-by-step replay (see
        `StatefulModule.replay_sequence`). Populations split
        into three stages, each computed with the same arithmetic as a step:

        - *before*: populations without delayed inputs whose inputs all come from the
          observation or other *before* populations through connections without a
          carry: computed once for all ``T * B`` samples, as are their carry-free
          ``delay=0`` connections into later populations;
        - *core*: the rest, scanned over time with the buffers and carries (the leaky
          populations always);
        - *after*: populations nobody reads with a delay and only *after* populations
          read at all (typically the read-outs), again without delayed inputs,
          carries or leak: computed for all samples from the scanned outputs.
        """
        plan = self._require_plan("replay_sequence")
        if not jax.tree.leaves(state):  # no buffers and no carries: one batched call
            return super().replay_sequence(state, xs, rollout_extras, done)
        replay = _replay.replay_staged(
            self, plan, self._connections, state, xs, rollout_extras, done
        )
        return replay.final_state, StatefulModuleOutput(
            next_state=(),
            output={key: replay.outputs[name] for key, name in plan.outputs},
            regularization_loss=replay.regularization,
            metrics=self._metrics(replay.metrics, replay.outputs),
            rollout_extras=(),
        )

    def time_constant(self, name: str) -> jax.Array:
        """The current time constant of a leaky population, one per unit.

        Args:
            name: A population declared with ``tau=``.

        Returns:
            ``tau``, shape ``[size]``, in the units of the graph's ``dt``: the declared
            value, or ``dt + softplus(raw_tau[name])`` if it is learned.

        Raises:
            ValueError: If ``name`` is not a leaky population.
        """
        pop = next((p for p in self._populations if p.name == name), None)
        if pop is None or pop.tau is None:
            leaky = [p.name for p in self._populations if p.tau is not None]
            raise ValueError(
                f"PopulationGraph.time_constant({name!r}): not a leaky population (leaky "
                f"ones: {leaky or 'none'}); declare it with tau=... to give it a time "
                "constant."
            )
        tau = _leak.time_constant(pop, self.dt, self.raw_tau)
        return jnp.broadcast_to(jnp.asarray(tau, BUFFER_DTYPE), (pop.size,))

    @property
    def record_activations(self) -> bool:
        """nnx-ppo 0.3.0's name for ``record_populations`` (read and write)."""
        return self.record_populations

    @record_activations.setter
    def record_activations(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"PopulationGraph: record_activations must be a bool, got {value!r}.")
        self.record_populations = value

    def _metrics(self, transforms: Metrics, outputs: dict[str, jax.Array]) -> Metrics:
        """The graph's metrics: the transforms' (if any) and, when recording, every
        population's output."""
        metrics: Metrics = {"transforms": transforms} if transforms else {}
        if self.record_populations:
            metrics["populations"] = dict(outputs)
        return metrics

    def _require_plan(self, call: str) -> ExecutionPlan:
        if self._plan is None:
            raise RuntimeError(
                f"PopulationGraph.{call}: the graph is not finalized yet. Call "
                "g.finalize() after declaring populations and connections, before using "
                "the graph."
            )
        return self._plan
