"""The ``--task`` choices: each a task of `nnx_ppo.envs.cognitive` and its settings.

Examples:
    >>> env = TASKS["pdm"].make(dt=100.0)
    >>> type(env).__name__, env.observation_size, env.action_size, env.n_conditions
    ('PerceptualDecisionMaking', 3, 3, 10)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["TASKS", "TaskSpec"]


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One ``--task``: how to build it and what to train it for.

    Attributes:
        name: The ``--task`` value.
        title: What the task is, for ``--help`` and the figure.
        build: ``build(dt=...)`` -> the unbatched task (`nnx_ppo.envs.cognitive`).
        steps: The default ``--steps`` (env steps per seed).
        measured: Whether training the GRU for ``steps`` was measured (the README gives
            the result); else ``steps`` is an unmeasured budget: check the results.
    """

    name: str
    title: str
    build: Callable[..., Any]
    steps: int
    measured: bool = False

    def make(self, *, dt: float) -> Any:
        """The task at ``dt`` ms per step.

        Raises:
            ValueError: From the task, if ``dt`` is out of its range.
        """
        return self.build(dt=dt)


def _task(class_name: str, **fixed: Any) -> Callable[..., Any]:
    def build(*, dt: float) -> Any:
        from nnx_ppo.envs import cognitive

        return getattr(cognitive, class_name)(dt=dt, **fixed)

    return build


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "pdm",
            "perceptual decision making (random dots, fixed duration)",
            _task("PerceptualDecisionMaking", reaction_time=False),
            steps=400_000,
            measured=True,  # GRU-100, dt = 20 ms: 3 of 4 seeds at 76-78 % correct (README)
        ),
        TaskSpec(
            "pdm-rt",
            "perceptual decision making, reaction-time version",
            _task("PerceptualDecisionMaking", reaction_time=True),
            steps=400_000,
        ),
        TaskSpec(
            "context",
            "context-dependent integration (Mante et al. 2013)",
            _task("ContextDependentIntegration"),
            steps=2_000_000,
        ),
        TaskSpec(
            "romo",
            "parametric working memory (Romo et al. 1999)",
            _task("ParametricWorkingMemory"),
            steps=2_000_000,
        ),
        TaskSpec(
            "multisensory",
            "multisensory integration (Raposo et al. 2014)",
            _task("MultisensoryIntegration"),
            steps=1_000_000,
        ),
        TaskSpec(
            "economic",
            "economic choice (Padoa-Schioppa & Assad 2006)",
            _task("EconomicChoice"),
            steps=1_000_000,
        ),
        TaskSpec(
            "gonogo",
            "go / no-go after a delay",
            _task("GoNoGo"),
            steps=400_000,
        ),
        TaskSpec(
            "dms",
            "delayed match-to-sample",
            _task("DelayedMatchToSample"),
            steps=1_000_000,
        ),
    )
}
"""``--task`` name -> `TaskSpec`."""
