"""The ``--task`` choices: each a task of `nnx_ppo.envs.cognitive` and its settings,
or a user's own task class named ``module:Class`` (`resolve_task`).

Examples:
    >>> env = TASKS["pdm"].make(dt=100.0)
    >>> type(env).__name__, env.observation_size, env.action_size, env.n_conditions
    ('PerceptualDecisionMaking', 3, 3, 10)
    >>> spec = resolve_task("nnx_ppo.envs.cognitive:GoNoGo")  # any importable task class
    >>> spec.steps, type(spec.make(dt=100.0)).__name__
    (400000, 'GoNoGo')
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CUSTOM_STEPS", "TASKS", "TaskSpec", "resolve_task"]

CUSTOM_STEPS = 400_000
"""The default ``--steps`` of a task given as ``module:Class``."""


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
        TaskSpec(
            "wager",
            "post-decision wager (Kiani & Shadlen 2009)",
            _task("PostDecisionWager"),
            steps=2_000_000,
        ),
        TaskSpec(
            "rsg",
            "interval timing, ready-set-go (Jazayeri & Shadlen 2010)",
            _task("ReadySetGo"),
            steps=1_000_000,
        ),
    )
}
"""``--task`` name -> `TaskSpec`."""


def _task_classes(module: Any) -> list[str]:
    from nnx_ppo.envs.cognitive import CognitiveTask

    return sorted(
        name
        for name, value in vars(module).items()
        if inspect.isclass(value) and issubclass(value, CognitiveTask)
        and value is not CognitiveTask and not inspect.isabstract(value)
    )  # fmt: skip


def resolve_task(value: str) -> TaskSpec:
    """The `TaskSpec` of a ``--task`` value: a name of `TASKS`, or ``module:Class``, a
    subclass of `nnx_ppo.envs.cognitive.CognitiveTask` in an importable module (the
    current folder is searched first, as ``python -m`` does), built as
    ``Class(dt=...)`` and trained for `CUSTOM_STEPS` by default.

    Raises:
        ValueError: For an unknown name, a module that cannot be imported, a missing
            class, or a class that is not a task; the message names the value and the
            fix.
    """
    if value in TASKS:
        return TASKS[value]
    if ":" not in value:
        raise ValueError(
            f"invalid choice: {value!r} (choose from {', '.join(TASKS)}, or give your own "
            "task class as module:Class, e.g. my_tasks:AntiSaccade)"
        )
    module_name, _, class_name = value.partition(":")
    if not module_name or not class_name.isidentifier():
        raise ValueError(
            f"{value!r} is not module:Class; write e.g. my_tasks:AntiSaccade (the module "
            "as you would import it, then a colon and the class name)"
        )
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)  # a task module in the current folder, as python -m finds it
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and module_name.startswith(error.name):
            raise ValueError(
                f"{value!r}: no module named {module_name!r} in the current folder "
                f"({here}) or the environment; run from the folder that holds "
                f"{module_name.replace('.', '/')}.py, or install the package that has it"
            ) from None
        raise ValueError(f"{value!r}: importing {module_name!r} failed: {error}") from None
    except Exception as error:  # the user's module raised while importing
        raise ValueError(
            f"{value!r}: importing {module_name!r} failed: {type(error).__name__}: {error}"
        ) from None
    from nnx_ppo.envs.cognitive import CognitiveTask

    cls = getattr(module, class_name, None)
    if cls is None:
        found = _task_classes(module)
        raise ValueError(
            f"{value!r}: module {module_name!r} has no {class_name!r}; its task classes: "
            f"{', '.join(found) or 'none'}"
        )
    if not (inspect.isclass(cls) and issubclass(cls, CognitiveTask)):
        kind = "a class" if inspect.isclass(cls) else f"a {type(cls).__name__}"
        raise ValueError(
            f"{value!r}: {module_name}.{class_name} is {kind}, not a subclass "
            "of nnx_ppo.envs.cognitive.CognitiveTask; see the how-to 'Write your own "
            "cognitive task'"
        )
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise ValueError(
            f"{value!r}: {module_name}.{class_name} does not implement {missing}; a task "
            "implements epoch_durations, condition_table, answer and epoch_input"
        )
    doc = (inspect.getdoc(cls) or class_name).splitlines()[0].rstrip(".")
    return TaskSpec(value, doc, lambda *, dt: cls(dt=dt), steps=CUSTOM_STEPS)
