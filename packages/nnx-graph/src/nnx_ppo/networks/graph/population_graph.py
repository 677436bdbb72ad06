"""The `PopulationGraph` module: named populations joined by delayed connections.

A graph is declared once (``add_input`` / ``add_population`` / ``add_output`` /
``connect``), checked and planned by `PopulationGraph.finalize`, and then stepped
like any other `StatefulModule`. All per-step bookkeeping
(execution order, incoming connections, buffer lengths) is computed at ``finalize()``, so
a traced step is straight-line array code.

This module holds the declaration; the run-time methods (carry, step, replay) come
from the package-internal ``_runtime``, the checks of each call from ``_checks``, the
initialisation of the default connections at ``finalize()`` from ``_fan_in``.
"""

from __future__ import annotations

from typing import Any

from flax import nnx

from nnx_ppo.networks import recurrent_noise
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import _checks, _fan_in, _leak, topology
from nnx_ppo.networks.graph._runtime import GraphRuntime
from nnx_ppo.networks.graph.signed_dense import SignedDense, check_sign
from nnx_ppo.networks.graph.topology import Connection, ExecutionPlan, Population
from nnx_ppo.networks.types import StatefulModule

__all__ = ["PopulationGraph"]

_INIT_FAN_IN = ("recurrent", "population", "connection")


class PopulationGraph(GraphRuntime):
    """Named populations joined by (optionally delayed) connections, as one module.

    Each step, every population, in topological order over the ``delay=0``
    connections (ties broken by declaration order):

    1. sums the outputs of its incoming connections, plus ``obs[input_from]`` if it was
       declared with `add_input`;
    2. applies its activation ``f`` once to that sum (connections are linear by default,
       activations live on populations);
    3. if it is leaky (declared with ``tau=``), moves its previous output towards that
       value: ``a_t = a_{t-1} + (dt / tau) * (f(input_t) - a_{t-1})``; otherwise
       ``a_t = f(input_t)``;
    4. writes ``a_t`` into its delay buffer, if a delayed connection reads it.

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
         "activity":   {population: float32 [B, size]},  # leaky ones: a_{t-1}
         "transforms": {connection: <the transform's carry>},
         "noise_key":  uint32 [B, *key_shape]}    # graphs with a noisy population

    ``"activity"`` is present only in graphs with a leaky population. Like the buffers
    it starts at zero and `reset_state` zeroes it, so ``a_{-1} = 0`` at every episode
    start. ``"noise_key"`` is present only in graphs with a population declared with
    ``sigma_rec > 0`` (recurrent noise, see `add_population`): one PRNG key per
    environment, split every step, so that loss replay draws the rollout's noise; a
    reset folds a constant into it (a fresh stream per episode). In ``eval()`` mode
    (``deterministic``) no noise is drawn and the key does not move, so export and the
    carry map (`nnx_ppo.networks.analysis`) see the noise-free graph and the exported
    policy leaves the key out.

    ``rollout_extras`` is ``{"transforms": {connection: <extras>}}``; metrics are
    ``{"transforms": {connection: <metrics>}}`` for the transforms that emit any, plus
    ``{"populations": {population: [B, size]}}`` when ``record_populations`` is true.

    **Initialisation.** A population sums its incoming connections, so with every
    default ``Dense`` initialised on its own (LeCun normal, kernel variance
    ``1 / src.size``) the variance of the sum grows with the number of connections: a
    read-out summing eight populations starts eight times too large, saturating a tanh
    sampler's mean and collapsing or exploding its std before training begins. By
    default (``init_fan_in="recurrent"``) `finalize` therefore initialises the default
    connections into each population as the two kernels of a recurrent cell such as
    ``SimpleRNN``:

    - the *drive*, its ``delay=0`` connections: each default ``Dense`` kernel is scaled
      by ``sqrt(src.size / drive_fan_in)``, where ``drive_fan_in`` is the summed size
      of the ``delay=0`` sources (custom transforms included), so together they start
      like one LeCun-normal ``Dense`` over the concatenation of their sources;
    - the *recurrence*, its delayed connections: one orthogonal matrix
      ``[recurrent_fan_in, dst.size]`` is drawn over the concatenation of the delayed
      sources, and each default ``Dense`` kernel is its block of rows (a custom
      transform keeps its rows unused). A self-loop alone is an orthogonal kernel, as
      ``SimpleRNN``'s ``W_rec``. Out of a signed population (Dale's law) the weights
      must keep their sign, so those kernels are scaled by
      ``sqrt(src.size / recurrent_fan_in)`` instead; and where a population receives
      delayed connections from both excitatory and inhibitory populations, the
      inhibitory kernels are then scaled, per receiving unit, so that its inhibitory
      weights sum to its excitatory ones (E/I balance, as Song, Yang & Wang 2016
      initialise their E/I networks). Without it a population of 80 excitatory and 20
      inhibitory units starts with a net recurrent gain of about 5 from the weights'
      non-zero mean, and its rates grow without bound (a ReLU population reached
      ``1e12`` in 50 steps); balanced, uniform activity drives it by zero.

    A graph without delayed connections gets exactly the same parameters with
    ``"recurrent"`` and ``"population"``. ``init_fan_in="population"`` scales every
    default kernel by ``sqrt(src.size / fan_in)`` over all sources, delayed ones
    included: a population with a self-loop of 64 units and an observation of 5 then
    starts with its input drive at ``sqrt(5 / 69) = 0.27`` of a ``SimpleRNN``'s and a
    Gaussian recurrent kernel, and learns ``CartpoleBalance`` far worse than the
    ``SimpleRNN`` it spells out (see the learning-quality results).
    ``init_fan_in="connection"`` keeps each default ``Dense`` as initialised
    (nnx-graph 0.1.0 and nnx-ppo 0.3.0). Custom transforms are never changed.

    **Leaky populations.** ``add_population(..., tau=...)`` (and `add_input`,
    `add_output`) makes a population a leaky integrator with time constant ``tau``, in
    the units of the graph's ``dt``: its leak factor ``dt / tau`` must lie in ``(0, 1]``,
    and ``tau == dt`` is exactly the non-leaky update. ``learn_tau=True`` makes the time
    constant a parameter per unit, ``tau = dt + softplus(raw)`` with ``raw`` an
    ``nnx.Param`` ``[size]`` in `raw_tau` (initialised so that every unit starts at the
    given ``tau``): ``tau`` stays above ``dt``, so the leak factor stays in ``(0, 1)``
    whatever the gradient does; the gradient reaching ``raw`` is ``sigmoid(raw)`` times
    that of ``tau``, close to it for slow units and vanishing only as ``tau``
    approaches ``dt``. `time_constant` returns the current ``tau`` of a population.

    **Dale's law.** ``sign="excitatory"`` (or ``"inhibitory"``) on a population makes
    every weight of its outgoing connections ``>= 0`` (``<= 0``) throughout training:
    their default transform is a `SignedDense` (weights ``sign * |kernel|``; its module
    explains the choice), and a custom transform must be a `SignedDense` of that sign.

    Args:
        rngs: Random streams for the default ``Dense`` connections. The graph keeps a
            reference while it is being built and drops it at `finalize`.
        record_populations: If true, every population's output is added to the metrics
            under ``"populations"`` (for analysis; off by default).
        init_fan_in: ``"recurrent"`` (default), ``"population"`` or ``"connection"``:
            how the default ``Dense`` connections are initialised (see above).
        dt: The duration of one step, in the units of the leaky populations' ``tau``
            (default 1: ``tau`` counts steps). Only leaky populations use it.

    Raises:
        TypeError: If ``rngs`` is not an ``nnx.Rngs``, ``record_populations`` not a
            bool or ``dt`` not a number.
        ValueError: If ``init_fan_in`` is not one of ``"recurrent"``, ``"population"``
            and ``"connection"``, or
            ``dt`` is not positive and finite.

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

        A leaky excitatory population (``dt / tau = 0.25``) and an inhibitory one:

        >>> g = PopulationGraph(nnx.Rngs(0), dt=0.01)
        >>> g.add_input("in_x", size=3, input_from="x")
        >>> g.add_population("e", size=8, activation=nnx.relu, tau=0.04, sign="excitatory")
        >>> g.add_population("i", size=4, activation=nnx.relu, sign="inhibitory")
        >>> g.connect("in_x", "e")
        >>> g.connect("e", "i")
        >>> g.connect("i", "e", delay=1)
        >>> g.add_output("y", size=2)
        >>> g.connect("e", "y")
        >>> g.finalize()
        >>> type(g.transforms["e->i"]).__name__, bool(jnp.all(g.transforms["i->e@1"].weight <= 0))
        ('SignedDense', True)
        >>> g.initialize_state(4)["activity"]["e"].shape
        (4, 8)
    """

    def __init__(
        self,
        rngs: nnx.Rngs,
        *,
        record_populations: bool = False,
        init_fan_in: str = "recurrent",
        dt: float = 1.0,
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
                f"{init_fan_in!r}; use 'recurrent' (the default) unless you need an "
                "earlier initialisation ('population', or 'connection' for nnx-graph 0.1.0)."
            )
        self.dt = _leak.check_dt(dt)
        self._rngs: nnx.Rngs | None = rngs
        self.record_populations = record_populations
        self.init_fan_in = init_fan_in
        # The learned time constants' parameters, by population (empty, and then absent
        # from the graph's state, unless a population has learn_tau=True).
        self.raw_tau: nnx.Dict[nnx.Param] = nnx.Dict()
        # Connections whose transform the graph created (a default Dense): only these
        # are rescaled at finalize().
        self._default_transforms: list[str] | frozenset[str] = []
        self.transforms: nnx.Dict[StatefulModule] = nnx.Dict()
        # Lists while building (appended in place: re-assigning a growing tuple would make
        # NNX re-check every element on each call), frozen into tuples at finalize().
        self._populations: list[Population] | tuple[Population, ...] = []
        self._connections: list[Connection] | tuple[Connection, ...] = []
        self._plan: ExecutionPlan | None = None
        # The base of the per-environment noise keys, drawn at finalize() if a
        # population has recurrent noise; eval() sets deterministic (no noise).
        self.noise_key: recurrent_noise.RecurrentNoiseKey | None = None
        self.deterministic = False

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

        Lists populations (size, activation, time constant and sign if any,
        observation input, output key, and after finalize their execution order and
        buffer lengths) and connections (name, endpoints, delay, transform).

        Returns:
            The multi-line summary.
        """
        names = {}
        for c in self._connections:
            module = self.transforms[c.name]
            if isinstance(module, Dense):
                names[c.name] = f"Dense({module.in_features}, {module.out_features})"
            elif isinstance(module, SignedDense):
                names[c.name] = (
                    f"SignedDense({module.in_features}, {module.out_features}, {module.sign})"
                )
            else:
                names[c.name] = type(module).__name__
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

    def add_population(
        self,
        name: str,
        size: int,
        *,
        activation: Any = None,
        tau: float | None = None,
        learn_tau: bool = False,
        sign: str | None = None,
        sigma_rec: float = 0.0,
    ) -> None:
        """Declare a hidden population.

        Args:
            name: Unique name (no whitespace, ``"->"``, ``"@"`` or quotes).
            size: Width of the population's output ``[B, size]``.
            activation: Applied once to the summed input, e.g. ``nnx.swish``; ``None``
                keeps the population linear.
            tau: Makes the population leaky with this time constant, in the units of
                the graph's ``dt``: its output ``a_t`` (``[B, size]``) follows
                ``a_{t-1} + (dt / tau) * (f(input_t) - a_{t-1})`` from ``a_{-1} = 0``
                at each episode start. ``dt / tau`` must lie in ``(0, 1]``; ``None``
                (default) gives ``a_t = f(input_t)``.
            learn_tau: Learn the time constant, one per unit (``tau = dt +
                softplus(raw)``, starting at ``tau``; needs ``tau > dt``).
            sign: ``"excitatory"`` or ``"inhibitory"``: every weight of the
                population's outgoing connections stays ``>= 0`` or ``<= 0`` (Dale's
                law; their default transform is a `SignedDense`). ``None`` (default)
                leaves them unconstrained.
            sigma_rec: Recurrent noise of a leaky population (pyrl's ``var_rec =
                sigma_rec ** 2``): after the leak each unit gets ``sqrt(2 dt / tau) *
                sigma_rec * N(0, 1)`` per step (Song, Yang & Wang 2016's scaling, see
                `nnx_ppo.networks.recurrent_noise`), drawn from a per-environment key in
                the carry (``"noise_key"``), so loss replay reproduces it; ``eval()``
                turns it off. Default 0.0: no noise, no key, nothing changes.

        Raises:
            TypeError: On a wrongly typed argument.
            ValueError: On a duplicate or invalid name, a non-positive size, a ``tau``
                outside ``[dt, inf)`` (or not above ``dt`` with ``learn_tau``), an
                unknown ``sign``, or a negative ``sigma_rec`` (or a positive one
                without ``tau``).
            RuntimeError: After `finalize`.
        """
        self._add(
            "add_population", name, size, activation, None, None, tau, learn_tau, sign, sigma_rec
        )

    def add_input(
        self,
        name: str,
        size: int,
        *,
        input_from: str,
        activation: Any = None,
        tau: float | None = None,
        learn_tau: bool = False,
        sign: str | None = None,
    ) -> None:
        """Declare a population that reads ``obs[input_from]`` (``[B, size]``) each step.

        The observation is added to whatever incoming connections deliver, then the
        activation (and the leak, if any) is applied.

        Args:
            name: Unique name.
            size: Width of the population; ``obs[input_from]`` must be ``[B, size]``.
            input_from: Key of the observation dict to read.
            activation: Optional activation, as in `add_population`.
            tau: Optional time constant, as in `add_population`.
            learn_tau: Learn the time constant, as in `add_population`.
            sign: Optional sign of the outgoing weights, as in `add_population`.

        Raises:
            TypeError: On a wrongly typed argument.
            ValueError: As in `add_population`.
            RuntimeError: After `finalize`.
        """
        input_from = _checks.check_key("add_input", "input_from", input_from)
        self._add("add_input", name, size, activation, input_from, None, tau, learn_tau, sign)

    def add_output(
        self,
        name: str,
        size: int,
        *,
        output_to: str | None = None,
        activation: Any = None,
        tau: float | None = None,
        learn_tau: bool = False,
        sign: str | None = None,
    ) -> None:
        """Declare a population whose output appears in the graph's forward output.

        Args:
            name: Unique name.
            size: Width of the population; the output entry is ``[B, size]``.
            output_to: Key in the output dict; defaults to ``name``.
            activation: Optional activation, as in `add_population`.
            tau: Optional time constant, as in `add_population` (a leaky output
                smooths what the graph emits).
            learn_tau: Learn the time constant, as in `add_population`.
            sign: Optional sign of the outgoing weights, as in `add_population`.

        Raises:
            TypeError: On a wrongly typed argument.
            ValueError: As in `add_population`, or on a duplicate output key.
            RuntimeError: After `finalize`.
        """
        if output_to is not None:
            output_to = _checks.check_key("add_output", "output_to", output_to)
        self._add(
            "add_output", name, size, activation, None, output_to or name, tau, learn_tau, sign
        )

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

        Out of a population declared with ``sign=``, the default transform is a
        ``SignedDense(src.size, dst.size, sign=...)`` instead of a ``Dense``, and a
        custom transform must be a `SignedDense` of that sign.

        Raises:
            TypeError: On a wrongly typed argument (e.g. a transform that is not a
                ``StatefulModule``).
            ValueError: On an unknown population, a negative delay, a ``delay=0``
                self-loop, a duplicate connection, ``reciprocal=True`` together with
                a custom transform, a self-loop or ``delay=0``, or a custom transform
                out of a signed population that is not a `SignedDense` of its sign.
            RuntimeError: After `finalize`.
        """
        self._check_building("connect")
        delay, pairs = _checks.check_connection(
            self._populations, self._connections, src, dst, transform, delay, reciprocal
        )
        sizes = {p.name: p.size for p in self._populations}
        signs = {p.name: p.sign for p in self._populations}
        for a, b in pairs:
            name = topology.connection_name(a, b, delay)
            module = transform
            if module is None:
                assert self._rngs is not None  # dropped only at finalize
                sign = signs[a]
                module = (
                    Dense(sizes[a], sizes[b], rngs=self._rngs)
                    if sign is None
                    else SignedDense(sizes[a], sizes[b], sign=sign, rngs=self._rngs)
                )
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
            _checks.check_transform(c, self.transforms[c.name], sizes[c.src], sizes[c.dst])
        self._default_transforms = frozenset(self._default_transforms)
        if self.init_fan_in != "connection":
            assert self._rngs is not None  # dropped only at finalize
            _fan_in.scale_default_kernels(
                self.transforms,
                self._connections,
                self._default_transforms,
                sizes,
                recurrent=self.init_fan_in == "recurrent",
                rngs=self._rngs,
            )
        if _leak.noisy_populations(plan):
            assert self._rngs is not None  # dropped only at finalize
            # Drawn after every parameter, so that the noise does not change them.
            self.noise_key = nnx.data(recurrent_noise.draw_base_key(self._rngs))
        self._populations = tuple(self._populations)
        self._connections = tuple(self._connections)
        self._plan = plan
        self._rngs = None

    # ---------------------------------------------------------------------- helpers

    def _check_building(self, call: str) -> None:
        if self._plan is not None:
            raise RuntimeError(
                f"{call}(): the graph is already finalized, so its topology is frozen. "
                "Declare every population and connection before finalize(), or build a "
                "new PopulationGraph."
            )

    def _add(
        self,
        call: str,
        name: Any,
        size: Any,
        activation: Any,
        input_from: str | None,
        output_to: str | None,
        tau: Any,
        learn_tau: Any,
        sign: Any,
        sigma_rec: Any = 0.0,
    ) -> None:
        self._check_building(call)
        name = _checks.check_name(call, name)
        where = f"{call}({name!r})"
        size = _checks.check_size(where, size)
        activation = _checks.check_activation(where, activation)
        tau, learn_tau = _leak.check_time_constant(where, tau, learn_tau, self.dt)
        sign = check_sign(where, sign)
        sigma_rec = _leak.check_noise(where, sigma_rec, tau)
        _checks.check_new_population(call, self._populations, name, output_to)
        if learn_tau:
            self.raw_tau[name] = nnx.Param(_leak.initial_raw_tau(tau, self.dt, size))
        population = Population(
            name,
            size,
            activation,
            input_from,
            output_to,
            index=len(self._populations),
            tau=tau,
            learn_tau=learn_tau,
            sign=sign,
            sigma_rec=sigma_rec,
        )
        self._populations.append(population)  # type: ignore[union-attr]
