"""The `PopulationGraph` module: named populations joined by delayed connections.

A graph is declared once (``add_input`` / ``add_population`` / ``add_output`` /
``connect``), checked and planned by `PopulationGraph.finalize`, and then stepped
like any other `StatefulModule`. All per-step bookkeeping
(execution order, incoming connections, buffer lengths) is computed at ``finalize()``, so
a traced step is straight-line array code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import topology
from nnx_ppo.networks.graph.topology import Connection, ExecutionPlan, Population
from nnx_ppo.networks.types import (
    ModuleState,
    StatefulModule,
    StatefulModuleOutput,
    replay_scanned,
)

__all__ = ["PopulationGraph"]

_BUFFER_DTYPE = jnp.float32
_INIT_FAN_IN = ("population", "connection")


class PopulationGraph(StatefulModule):
    """Named populations joined by (optionally delayed) connections, as one module.

    Each step, every population, in topological order over the ``delay=0``
    connections (ties broken by declaration order):

    1. sums the outputs of its incoming connections, plus ``obs[input_from]`` if it was
       declared with `add_input`;
    2. applies its activation once to that sum (connections are linear by default,
       activations live on populations);
    3. writes the result into its delay buffer, if a delayed connection reads it.

    A ``delay=0`` connection reads its source's output from the same step; a
    ``delay=k`` connection reads the output from ``k`` steps ago, and zeros before the
    episode is ``k`` steps old. Each population read through delayed connections owns a
    single circular buffer sized to its longest outgoing delay, shared by all of them.

    Populations declared with `add_output` make up the forward output, a dict
    ``{output_to: [B, size]}``.

    Connections carry any `StatefulModule` as
    ``transform`` (default ``Dense(src.size, dst.size)``), kept in the ``nnx.Dict``
    `transforms` under the connection's name: ``"src->dst"`` for ``delay=0`` and
    ``"src->dst@k"`` for ``delay=k``. Their carry, ``rollout_extras``,
    ``update_statistics``, regularization (summed, per sample ``[B]``) and metrics are
    routed under the same names.

    Carry (all leaves batched)::

        {"buffers":    {population: float32 [B, length, size]},
         "positions":  {population: int32 [B]},   # next slot to write
         "transforms": {connection: <the transform's carry>}}

    ``rollout_extras`` is ``{"transforms": {connection: <extras>}}``; metrics are
    ``{"transforms": {connection: <metrics>}}`` for the transforms that emit any, plus
    ``{"populations": {population: [B, size]}}`` when ``record_populations`` is true.

    **Initialisation.** A population sums its incoming connections, so with every
    default ``Dense`` initialised on its own (LeCun normal, kernel variance
    ``1 / src.size``) the variance of the sum grows with the number of connections: a
    read-out summing eight populations starts eight times too large, saturating a tanh
    sampler's mean and collapsing or exploding its std before training begins. By
    default (``init_fan_in="population"``) `finalize` therefore scales the kernel of
    every default ``Dense`` into a population by ``sqrt(src.size / fan_in)``, where
    ``fan_in`` is the summed size of all sources connected into that population (custom
    transforms included, obs input excluded): the connections together start like one
    LeCun-normal ``Dense`` over the concatenation of their sources, whatever the
    topology. Custom transforms are never changed. ``init_fan_in="connection"`` keeps
    each default ``Dense`` as initialised (nnx-graph 0.1.0 and nnx-ppo 0.3.0).

    Args:
        rngs: Random streams for the default ``Dense`` connections. The graph keeps a
            reference while it is being built and drops it at `finalize`.
        record_populations: If true, every population's output is added to the metrics
            under ``"populations"`` (for analysis; off by default).
        init_fan_in: ``"population"`` (default) or ``"connection"``: the fan-in the
            default ``Dense`` connections are initialised for (see above).

    Raises:
        TypeError: If ``rngs`` is not an ``nnx.Rngs`` or ``record_populations`` not a
            bool.
        ValueError: If ``init_fan_in`` is not ``"population"`` or ``"connection"``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> g = PopulationGraph(nnx.Rngs(0))
        >>> g.add_input("in_x", size=3, input_from="x")
        >>> g.add_population("hidden", size=8, activation=nnx.tanh)
        >>> g.connect("in_x", "hidden")
        >>> g.connect("hidden", "hidden", delay=1)
        >>> g.add_output("y", size=2)
        >>> g.connect("hidden", "y")
        >>> g.finalize()
        >>> state = g.initialize_state(4)
        >>> out = g(state, {"x": jnp.ones((4, 3))})
        >>> out.output["y"].shape
        (4, 2)
        >>> out.next_state["buffers"]["hidden"].shape
        (4, 1, 8)
    """

    def __init__(
        self,
        rngs: nnx.Rngs,
        *,
        record_populations: bool = False,
        init_fan_in: str = "population",
    ) -> None:
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(
                f"PopulationGraph: rngs must be an nnx.Rngs, got {rngs!r} of type "
                f"{type(rngs).__name__}; e.g. PopulationGraph(nnx.Rngs(0))."
            )
        if not isinstance(record_populations, bool):
            raise TypeError(
                f"PopulationGraph: record_populations must be a bool, got {record_populations!r}."
            )
        if init_fan_in not in _INIT_FAN_IN:
            raise ValueError(
                f"PopulationGraph: init_fan_in must be one of {_INIT_FAN_IN}, got "
                f"{init_fan_in!r}; use 'population' (the default) unless you need the "
                "per-connection initialisation of nnx-graph 0.1.0."
            )
        self._rngs: nnx.Rngs | None = rngs
        self.record_populations = record_populations
        self.init_fan_in = init_fan_in
        # Connections whose transform the graph created (a default Dense): only these
        # are rescaled at finalize().
        self._default_transforms: list[str] | frozenset[str] = []
        self.transforms: nnx.Dict[StatefulModule] = nnx.Dict()
        # Lists while building (appended in place: re-assigning a growing tuple would make
        # NNX re-check every element on each call), frozen into tuples at finalize().
        self._populations: list[Population] | tuple[Population, ...] = []
        self._connections: list[Connection] | tuple[Connection, ...] = []
        self._plan: ExecutionPlan | None = None

    # ---------------------------------------------------------------- introspection

    @property
    def populations(self) -> tuple[Population, ...]:
        """The declared populations, in declaration order."""
        return tuple(self._populations)

    @property
    def connections(self) -> tuple[Connection, ...]:
        """The declared connections, in declaration order."""
        return tuple(self._connections)

    @property
    def is_finalized(self) -> bool:
        """Whether `finalize` has been called."""
        return self._plan is not None

    @property
    def execution_order(self) -> tuple[str, ...]:
        """Population names in the order a step runs them (after `finalize`)."""
        return tuple(p.name for p in self._require_plan("execution_order").order)

    def describe(self) -> str:
        """A plain-text summary of the topology; works before `finalize` too.

        Lists populations (size, activation, observation input, output key, and after
        finalize their execution order and buffer lengths) and connections (name,
        endpoints, delay, transform).

        Returns:
            The multi-line summary.
        """
        names = {}
        for c in self._connections:
            module = self.transforms[c.name]
            names[c.name] = (
                f"Dense({module.in_features}, {module.out_features})"
                if isinstance(module, Dense)
                else type(module).__name__
            )
        return topology.describe(self._populations, self._connections, self._plan, names)

    def to_mermaid(self, direction: str = "LR") -> str:
        """The topology as a mermaid ``flowchart`` (for docs and notebooks).

        Populations are boxes labelled with their name, size and activation; ``delay=0``
        connections are solid arrows and delayed ones dotted, each labelled with its
        delay; observation keys and output keys are rounded nodes.

        Args:
            direction: Mermaid flow direction: ``"LR"`` (default), ``"RL"``, ``"TB"``,
                ``"TD"`` or ``"BT"``.

        Returns:
            The diagram source, e.g. for a ``mermaid`` fenced block.
        """
        return topology.to_mermaid(self._populations, self._connections, direction=direction)

    # ------------------------------------------------------------------------ build

    def add_population(self, name: str, size: int, *, activation: Any = None) -> None:
        """Declare a hidden population.

        Args:
            name: Unique name (no whitespace, ``"->"``, ``"@"`` or quotes).
            size: Width of the population's output ``[B, size]``.
            activation: Applied once to the summed input, e.g. ``nnx.swish``; ``None``
                keeps the population linear.

        Raises:
            TypeError: On a wrongly typed argument.
            ValueError: On a duplicate or invalid name or a non-positive size.
            RuntimeError: After `finalize`.
        """
        self._add("add_population", name, size, activation, None, None)

    def add_input(self, name: str, size: int, *, input_from: str, activation: Any = None) -> None:
        """Declare a population that reads ``obs[input_from]`` (``[B, size]``) each step.

        The observation is added to whatever incoming connections deliver, then the
        activation is applied.

        Args:
            name: Unique name.
            size: Width of the population; ``obs[input_from]`` must be ``[B, size]``.
            input_from: Key of the observation dict to read.
            activation: Optional activation, as in `add_population`.

        Raises:
            TypeError: On a wrongly typed argument.
            ValueError: On a duplicate or invalid name or a non-positive size.
            RuntimeError: After `finalize`.
        """
        input_from = topology.check_key("add_input", "input_from", input_from)
        self._add("add_input", name, size, activation, input_from, None)

    def add_output(
        self, name: str, size: int, *, output_to: str | None = None, activation: Any = None
    ) -> None:
        """Declare a population whose output appears in the graph's forward output.

        Args:
            name: Unique name.
            size: Width of the population; the output entry is ``[B, size]``.
            output_to: Key in the output dict; defaults to ``name``.
            activation: Optional activation, as in `add_population`.

        Raises:
            TypeError: On a wrongly typed argument.
            ValueError: On a duplicate or invalid name, a duplicate output key or a
                non-positive size.
            RuntimeError: After `finalize`.
        """
        if output_to is not None:
            output_to = topology.check_key("add_output", "output_to", output_to)
        self._add("add_output", name, size, activation, None, output_to or name)

    def connect(
        self,
        src: str,
        dst: str,
        *,
        transform: StatefulModule | None = None,
        delay: int = 0,
        reciprocal: bool = False,
    ) -> None:
        """Connect two declared populations.

        The connection is named ``"src->dst"`` (``delay=0``) or ``"src->dst@k"``
        (``delay=k``); that name keys its transform in `transforms` and its carry,
        extras and metrics.

        Args:
            src: Source population.
            dst: Destination population.
            transform: Any `StatefulModule` mapping
                ``[B, src.size]`` to ``[B, dst.size]``; defaults to a fresh
                ``Dense(src.size, dst.size)``. The same module may be passed to several
                connections to share weights (each connection keeps its own carry).
            delay: ``0`` reads the source's output of this step; ``k > 0`` reads the
                output of ``k`` steps ago (zeros before the episode is ``k`` steps old).
                The transform is applied to the delayed signal, every step.
            reciprocal: Also connect ``dst -> src`` with the same delay and its own
                default ``Dense``. Needs ``transform=None`` and ``delay >= 1``.

        Raises:
            TypeError: On a wrongly typed argument (e.g. a transform that is not a
                ``StatefulModule``).
            ValueError: On an unknown population, a negative delay, a ``delay=0``
                self-loop, a duplicate connection, or ``reciprocal=True`` together with
                a custom transform, a self-loop or ``delay=0``.
            RuntimeError: After `finalize`.
        """
        self._check_building("connect")
        known = {p.name: p for p in self._populations}
        for argument, value in (("src", src), ("dst", dst)):
            if value not in known:
                declared = ", ".join(repr(n) for n in known) or "none yet"
                raise ValueError(
                    f"connect({src!r}, {dst!r}): unknown {argument} population {value!r} "
                    f"(declared: {declared}). Declare it first with add_input(), "
                    "add_population() or add_output()."
                )
        delay = topology.check_delay(f"connect({src!r}, {dst!r})", delay)
        call = f"connect({src!r}, {dst!r}, delay={delay})"
        if not isinstance(reciprocal, bool):
            raise TypeError(f"{call}: reciprocal must be a bool, got {reciprocal!r}.")
        if transform is not None and not isinstance(transform, StatefulModule):
            raise TypeError(
                f"{call}: transform must be a StatefulModule (e.g. "
                f"nnx_ppo.networks.feedforward.Dense), got {type(transform).__name__}. "
                "Wrap plain NNX layers such as nnx.Linear in a StatefulModule."
            )
        if src == dst and delay == 0:
            raise ValueError(
                f"{call}: a delay=0 self-loop would make {src!r} read its own output of "
                f"the same step. Use delay=1 for a recurrent self-connection: "
                f"connect({src!r}, {src!r}, delay=1)."
            )
        if reciprocal:
            if transform is not None:
                raise ValueError(
                    f"{call}: transform= cannot be combined with reciprocal=True (one "
                    "module cannot map both directions). Call connect() twice, once per "
                    "direction, each with its own transform."
                )
            if src == dst:
                raise ValueError(f"{call}: a self-loop is its own reverse; drop reciprocal=True.")
            if delay == 0:
                raise ValueError(
                    f"{call}: reciprocal=True with delay=0 makes the delay=0 cycle "
                    f"{src!r} -> {dst!r} -> {src!r}. Use delay=1 (or more), or connect "
                    "the two directions separately with different delays."
                )
        pairs = [(src, dst), (dst, src)] if reciprocal else [(src, dst)]
        existing = {c.name for c in self._connections}
        for a, b in pairs:
            name = topology.connection_name(a, b, delay)
            if name in existing:
                raise ValueError(
                    f"{call}: connection {name!r} ({a!r} -> {b!r} with delay {delay}) "
                    "already exists. Parallel connections with the same delay would just "
                    "add up; use one connection (with a custom transform if needed) or a "
                    "different delay."
                )
        for a, b in pairs:
            name = topology.connection_name(a, b, delay)
            module = transform
            if module is None:
                assert self._rngs is not None  # dropped only at finalize
                module = Dense(known[a].size, known[b].size, rngs=self._rngs)
                self._default_transforms.append(name)  # type: ignore[union-attr]
            self.transforms[name] = module
            self._connections.append(Connection(name, a, b, delay))  # type: ignore[union-attr]

    def finalize(self) -> None:
        """Check the declared graph and plan its steps; required before use.

        Raises:
            ValueError: If the graph has no population or no output, a population has
                no input at all, the ``delay=0`` connections contain a cycle (the message
                lists the cycle and the connection to delay), or a transform does not map
                ``[B, src.size]`` to ``[B, dst.size]``.
            RuntimeError: If the graph is already finalized.
        """
        self._check_building("finalize")
        plan = topology.build_plan(self._populations, self._connections)
        sizes = {p.name: p.size for p in self._populations}
        for c in self._connections:
            self._check_transform(c, sizes[c.src], sizes[c.dst])
        self._default_transforms = frozenset(self._default_transforms)
        if self.init_fan_in == "population":
            self._scale_default_kernels(sizes)
        self._populations = tuple(self._populations)
        self._connections = tuple(self._connections)
        self._plan = plan
        self._rngs = None

    def _scale_default_kernels(self, sizes: dict[str, int]) -> None:
        """Scale each default ``Dense`` kernel into a population by
        ``sqrt(src.size / fan_in)`` (see the class docstring, "Initialisation")."""
        fan_in: dict[str, int] = {}
        for c in self._connections:
            fan_in[c.dst] = fan_in.get(c.dst, 0) + sizes[c.src]
        for c in self._connections:
            if c.name not in self._default_transforms or fan_in[c.dst] == sizes[c.src]:
                continue
            kernel = self.transforms[c.name].linear.kernel
            kernel[...] = kernel[...] * math.sqrt(sizes[c.src] / fan_in[c.dst])

    # ------------------------------------------------------------ StatefulModule API

    def initialize_state(self, batch_size: int) -> ModuleState:
        """Zero buffers and positions plus every transform's initial carry.

        Args:
            batch_size: Number of environments ``B``.

        Returns:
            The carry described in the class docstring.
        """
        plan = self._require_plan("initialize_state")
        return {
            "buffers": {
                name: jnp.zeros((batch_size, length, size), _BUFFER_DTYPE)
                for name, length, size in plan.buffers
            },
            "positions": {name: jnp.zeros((batch_size,), jnp.int32) for name, _, _ in plan.buffers},
            "transforms": {
                c.name: self.transforms[c.name].initialize_state(batch_size)
                for c in self._connections
            },
        }

    def reset_state(self, prev_state: ModuleState) -> ModuleState:
        """Zero the history and reset every transform's carry (batched ``prev_state``)."""
        self._require_plan("reset_state")
        return {
            "buffers": jax.tree.map(jnp.zeros_like, prev_state["buffers"]),
            "positions": jax.tree.map(jnp.zeros_like, prev_state["positions"]),
            "transforms": {
                c.name: self.transforms[c.name].reset_state(prev_state["transforms"][c.name])
                for c in self._connections
            },
        }

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
        batch = _batch_size(state, x)
        names = {p.name for p in plan.order}
        outputs, transforms, extras, regularization, metrics = self._integrate(
            names, state, x, rollout_extras, batch
        )
        return StatefulModuleOutput(
            next_state={**self._write_buffers(state, outputs), "transforms": transforms},
            output={key: outputs[name] for key, name in plan.outputs},
            regularization_loss=jnp.broadcast_to(regularization, (batch,)),
            metrics=self._metrics(metrics, outputs),
            rollout_extras={"transforms": extras},
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
        - *core*: the rest, scanned over time with the buffers and carries;
        - *after*: populations nobody reads with a delay and only *after* populations
          read at all (typically the read-outs), again without delayed inputs or
          carries: computed for all samples from the scanned outputs.
        """
        plan = self._require_plan("replay_sequence")
        if not jax.tree.leaves(state):  # no buffers and no carries: one batched call
            return super().replay_sequence(state, xs, rollout_extras, done)
        t, b = jnp.shape(done)[:2]
        carry_less = {
            c.name for c in self._connections if not jax.tree.leaves(state["transforms"][c.name])
        }
        before, after = _stages(plan, self._connections, carry_less)
        core = {p.name for p in plan.order} - before - after

        def flat(tree: Any) -> Any:  # [T, B, ...] -> [T * B, ...]
            return jax.tree.map(lambda v: jnp.reshape(v, (t * b, *jnp.shape(v)[2:])), tree)

        def unflat(tree: Any) -> Any:  # [T * B, ...] -> [T, B, ...]
            return jax.tree.map(lambda v: jnp.reshape(v, (t, b, *jnp.shape(v)[1:])), tree)

        def per_step(metrics: Any) -> Any:  # a batched call's metrics, repeated T times
            return jax.tree.map(lambda m: jnp.broadcast_to(m, (t, *jnp.shape(m))), metrics)

        carries = {"transforms": state["transforms"]}
        flat_xs, flat_extras = flat(xs), flat(rollout_extras)
        # 1. Before the scan: the "before" populations and their carry-free delay=0
        #    connections into the core, for all T * B samples at once.
        first, _, _, reg_first, metrics_first = self._integrate(
            before, carries, flat_xs, flat_extras, t * b
        )
        into_core = [
            (c, pop.size)
            for pop, incoming in zip(plan.order, plan.incoming, strict=True)
            if pop.name in core
            for c in incoming
            if c.delay == 0 and c.src in before and c.name in carry_less
        ]
        projected = {}
        for c, size in into_core:
            out = self._transform(c, size, carries, first[c.src], flat_extras, t * b)
            projected[c.name] = out.output
            reg_first = reg_first + out.regularization_loss
            if out.metrics:
                metrics_first[c.name] = out.metrics

        # 2. The core, scanned over time (resets as in the step-by-step replay).
        def step(graph: PopulationGraph, carry: Any, inputs: Any, extras: Any) -> Any:
            x, given, given_inputs = inputs
            outputs, transforms, _, regularization, metrics = graph._integrate(
                core, carry, x, extras, b, outputs=given, inputs=given_inputs
            )
            next_state = {
                **graph._write_buffers(carry, outputs),
                "transforms": {**carry["transforms"], **transforms},
            }
            return StatefulModuleOutput(
                next_state=next_state,
                output={name: outputs[name] for name in core},
                regularization_loss=regularization,
                metrics=metrics,
                rollout_extras=(),
            )

        final, scanned = replay_scanned(
            self, state, (xs, unflat(first), unflat(projected)), rollout_extras, done, step=step
        )

        # 3. After the scan: the "after" populations, for all samples at once.
        outputs, _, _, reg_after, metrics_after = self._integrate(
            after, carries, flat_xs, flat_extras, t * b, outputs={**first, **flat(scanned.output)}
        )
        outputs = unflat(outputs)
        regularization = (
            unflat(jnp.broadcast_to(reg_first + reg_after, (t * b,))) + scanned.regularization_loss
        )
        metrics = {**per_step(metrics_first), **scanned.metrics, **per_step(metrics_after)}
        return final, StatefulModuleOutput(
            next_state=(),
            output={key: outputs[name] for key, name in plan.outputs},
            regularization_loss=regularization,
            metrics=self._metrics(metrics, outputs),
            rollout_extras=(),
        )

    def _integrate(
        self,
        names: set[str],
        state: ModuleState,
        x: Any,
        rollout_extras: Any,
        batch: int,
        *,
        outputs: dict[str, jax.Array] | None = None,
        inputs: dict[str, jax.Array] | None = None,
    ) -> tuple[dict[str, jax.Array], dict[str, Any], dict[str, Any], jax.Array, dict[str, Any]]:
        """One step of the populations in ``names`` (in execution order).

        ``outputs`` are already known population outputs and ``inputs`` already
        computed connection outputs (used instead of calling the transform). Returns
        ``(outputs, next transform carries, extras, regularization, transform
        metrics)``, the last four for the transforms called here.
        """
        plan = self._require_plan("__call__")
        outputs = dict(outputs or {})
        inputs = inputs or {}
        transforms: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        metrics: dict[str, Any] = {}
        regularization = jnp.zeros((batch,))
        for pop, incoming in zip(plan.order, plan.incoming, strict=True):
            if pop.name not in names:
                continue
            total = None if pop.input_from is None else _read_obs(x, pop, batch)
            for c in incoming:
                if c.name in inputs:
                    value = inputs[c.name]
                else:
                    if c.delay == 0:
                        source = outputs[c.src]
                    else:
                        source = _read_buffer(
                            state["buffers"][c.src], state["positions"][c.src], c.delay
                        )
                    out = self._transform(c, pop.size, state, source, rollout_extras, batch)
                    value = out.output
                    transforms[c.name] = out.next_state
                    extras[c.name] = out.rollout_extras
                    regularization = regularization + out.regularization_loss
                    if out.metrics:
                        metrics[c.name] = out.metrics
                total = value if total is None else total + value
            assert total is not None  # finalize() rejects populations without input
            outputs[pop.name] = total if pop.activation is None else pop.activation(total)
        return outputs, transforms, extras, regularization, metrics

    def _transform(
        self,
        c: Connection,
        size: int,
        state: ModuleState,
        source: jax.Array,
        rollout_extras: Any,
        batch: int,
    ) -> StatefulModuleOutput:
        """Call connection ``c``'s transform on ``source`` and check that it returns
        ``[batch, size]`` (the size of ``c.dst``)."""
        extras = None if rollout_extras is None else rollout_extras["transforms"][c.name]
        out = self.transforms[c.name](state["transforms"][c.name], source, extras)
        _check_call_output(c, out.output, batch, size)
        return out

    def _write_buffers(self, state: ModuleState, outputs: dict[str, jax.Array]) -> dict[str, Any]:
        """``{"buffers": ..., "positions": ...}`` after writing this step's outputs."""
        buffers: dict[str, jax.Array] = {}
        positions: dict[str, jax.Array] = {}
        for name, length, _ in self._require_plan("__call__").buffers:
            buffers[name], positions[name] = _write_buffer(
                state["buffers"][name], state["positions"][name], outputs[name], length
            )
        return {"buffers": buffers, "positions": positions}

    def _metrics(self, transforms: dict[str, Any], outputs: dict[str, jax.Array]) -> dict[str, Any]:
        metrics: dict[str, Any] = {"transforms": transforms} if transforms else {}
        if self.record_populations:
            metrics["populations"] = dict(outputs)
        return metrics

    # ---------------------------------------------------------------------- helpers

    def _check_building(self, call: str) -> None:
        if self._plan is not None:
            raise RuntimeError(
                f"{call}(): the graph is already finalized, so its topology is frozen. "
                "Declare every population and connection before finalize(), or build a "
                "new PopulationGraph."
            )

    def _require_plan(self, call: str) -> ExecutionPlan:
        if self._plan is None:
            raise RuntimeError(
                f"PopulationGraph.{call}: the graph is not finalized yet. Call "
                "g.finalize() after declaring populations and connections, before using "
                "the graph."
            )
        return self._plan

    def _add(
        self,
        call: str,
        name: Any,
        size: Any,
        activation: Any,
        input_from: str | None,
        output_to: str | None,
    ) -> None:
        self._check_building(call)
        name = topology.check_name(call, name)
        size = topology.check_size(f"{call}({name!r})", size)
        activation = topology.check_activation(f"{call}({name!r})", activation)
        for p in self._populations:
            if p.name == name:
                raise ValueError(
                    f"{call}({name!r}): a population named {name!r} already exists "
                    f"(size {p.size}); population names must be unique, pick another one."
                )
            if output_to is not None and p.output_to == output_to:
                raise ValueError(
                    f"{call}({name!r}): output key {output_to!r} is already used by "
                    f"population {p.name!r}; pass a different output_to=."
                )
        population = Population(
            name, size, activation, input_from, output_to, index=len(self._populations)
        )
        self._populations.append(population)  # type: ignore[union-attr]

    def _check_transform(self, c: Connection, src_size: int, dst_size: int) -> None:
        """Check, without side effects, that the transform maps [B, src] to [B, dst]."""
        module = self.transforms[c.name]
        if type(module) is Dense:
            if (module.in_features, module.out_features) == (src_size, dst_size):
                return
            got = f"a Dense({module.in_features}, {module.out_features})"
        else:
            graphdef, module_state = nnx.split(module)

            def probe(module_state: Any) -> Any:
                copy = nnx.merge(graphdef, module_state)
                return copy(copy.initialize_state(2), jnp.zeros((2, src_size))).output

            try:
                shape = jax.eval_shape(probe, module_state)
            except Exception as error:
                raise ValueError(
                    f"finalize(): the transform of connection {c.name!r} "
                    f"({type(module).__name__}) failed on a [B, {src_size}] input (the "
                    f"output of {c.src!r}): {error}"
                ) from error
            if isinstance(shape, jax.ShapeDtypeStruct) and shape.shape == (2, dst_size):
                return
            got = f"{type(module).__name__} with output {_describe_shape(shape)}"
        raise ValueError(
            f"finalize(): connection {c.name!r} must map [B, {src_size}] ({c.src!r}) to "
            f"[B, {dst_size}] ({c.dst!r}), but its transform is {got}. Pass a transform "
            f"with that output size, e.g. Dense({src_size}, {dst_size}, rngs=rngs), or "
            "omit transform= for the default."
        )


def _describe_shape(tree: Any) -> str:
    if isinstance(tree, jax.ShapeDtypeStruct):
        return "[" + ", ".join(["B", *map(str, tree.shape[1:])]) + "]"
    return f"of structure {jax.tree.structure(tree)}"


def _batch_size(state: ModuleState, x: Any) -> int:
    leaves = jax.tree.leaves((state, x))
    if not leaves:
        raise ValueError(
            "PopulationGraph.__call__: cannot infer the batch size; the carry is empty "
            "and the observation has no arrays. Pass the carry from initialize_state(B)."
        )
    return leaves[0].shape[0]  # an int, or a symbolic dimension under jax.export


def _read_obs(x: Any, pop: Population, batch: int) -> jax.Array:
    key = pop.input_from
    if not isinstance(x, Mapping):
        raise TypeError(
            f"PopulationGraph: input population {pop.name!r} reads obs[{key!r}], so the "
            f"observation must be a dict, got {type(x).__name__}. Pass e.g. {{{key!r}: "
            f"array of shape [B, {pop.size}]}}."
        )
    if key not in x:
        raise ValueError(
            f"PopulationGraph: input population {pop.name!r} reads obs[{key!r}], but the "
            f"observation has keys {sorted(map(str, x))}. Provide {key!r} or change "
            f"add_input(..., input_from=...)."
        )
    value = jnp.asarray(x[key])
    if value.shape != (batch, pop.size):
        raise ValueError(
            f"PopulationGraph: obs[{key!r}] has shape {tuple(value.shape)}, but input "
            f"population {pop.name!r} has size {pop.size}, so it must be [B, {pop.size}] "
            f"with B={batch}. Declare add_input({pop.name!r}, size={value.shape[-1]}, ...) "
            "or fix the observation."
            if value.ndim
            else f"PopulationGraph: obs[{key!r}] is a scalar; it must be [B, {pop.size}]."
        )
    return value


def _check_call_output(c: Connection, output: Any, batch: int, size: int) -> None:
    shape = getattr(output, "shape", None)
    if shape != (batch, size):
        raise ValueError(
            f"PopulationGraph: the transform of connection {c.name!r} returned "
            f"{f'shape {tuple(shape)}' if shape is not None else type(output).__name__}, "
            f"but population {c.dst!r} needs [B, {size}] with B={batch}."
        )


def _read_buffer(buffer: jax.Array, position: jax.Array, delay: int) -> jax.Array:
    """The entry written ``delay`` steps ago; ``buffer`` is ``[B, L, size]``, ``delay <= L``.

    ``position`` (``[B]``) is the slot this step will write; the previous step wrote
    ``position - 1`` and ``delay`` steps ago wrote ``position - delay`` (mod ``L``).
    """
    length = buffer.shape[1]
    slot = (position - delay) % length
    return jnp.take_along_axis(buffer, slot[:, None, None], axis=1)[:, 0]


def _write_buffer(
    buffer: jax.Array, position: jax.Array, value: jax.Array, length: int
) -> tuple[jax.Array, jax.Array]:
    """Write ``value`` (``[B, size]``) at ``position`` and advance it (mod ``length``)."""
    hit = jnp.arange(length)[None, :] == position[:, None]  # [B, L]
    buffer = jnp.where(hit[:, :, None], value[:, None, :].astype(buffer.dtype), buffer)
    return buffer, (position + 1) % length


def _stages(
    plan: ExecutionPlan, connections: Sequence[Connection], carry_less: set[str]
) -> tuple[set[str], set[str]]:
    """The populations a sequence replay computes before and after its scan.

    *Before*: no delayed input, and every input from a *before* population through a
    connection without carry. *After*: not *before*, no delayed input, not read
    through a delayed connection, every input through a connection without carry, and
    read (at ``delay=0``) only by *after* populations.
    """
    delayed_in = {c.dst for c in connections if c.delay > 0}
    delayed_out = {c.src for c in connections if c.delay > 0}
    before: set[str] = set()
    for pop, incoming in zip(plan.order, plan.incoming, strict=True):
        if pop.name not in delayed_in and all(
            c.src in before and c.name in carry_less for c in incoming
        ):
            before.add(pop.name)
    after: set[str] = set()
    for pop, incoming in reversed(list(zip(plan.order, plan.incoming, strict=True))):
        if (
            pop.name not in before
            and pop.name not in delayed_in
            and pop.name not in delayed_out
            and all(c.name in carry_less for c in incoming)
            and all(c.dst in after for c in connections if c.src == pop.name)
        ):
            after.add(pop.name)
    return before, after
