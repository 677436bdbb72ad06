"""The run skeleton every trainer shares: `run` takes an `Algorithm` (a small record of
pure functions) and does set-up, placement, resume, compilation, the host loop with its
periodic tasks (evaluation, video, checkpoints, stop requests) and the result; the run
options and the initial state; the run axis of a sweep.

Stands on `nnx_ppo.algorithms.core` and `nnx_ppo.algorithms.observe`; the algorithms
(`ppo`, `distillation`) stand on it and never on each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnx_ppo.algorithms import lazy_exports

_NAMES = {
    "RunConfig": "_config_base",
    "Periodic": "core.hooks",
    "CallPlan": "trainer.host_loop",
    "Clock": "trainer.host_loop",
    "LoopResult": "trainer.host_loop",
    "fires": "trainer.host_loop",
    "plan_call": "trainer.host_loop",
    "run_calls": "trainer.host_loop",
    "split_runs": "trainer.host_loop",
    "INITIAL_CARRY": "trainer.initial_state",
    "init_state": "trainer.initial_state",
    "reset_on_mesh": "trainer.initial_state",
    "Host": "trainer.options",
    "RunOptions": "trainer.options",
    "RunSettings": "trainer.options",
    "resolve_options": "trainer.options",
    "Runs": "trainer.run_axis",
    "init_runs": "trainer.run_axis",
    "run_keys": "trainer.run_axis",
    "runs_iteration": "trainer.run_axis",
    "Algorithm": "trainer.skeleton",
    "Prepared": "trainer.skeleton",
    "RunResult": "trainer.skeleton",
    "evaluator_of": "trainer.skeleton",
    "make_train_call": "trainer.skeleton",
    "place_run": "trainer.skeleton",
    "resume": "trainer.skeleton",
    "run": "trainer.skeleton",
    "set_up": "trainer.skeleton",
    "with_initial_eval": "trainer.skeleton",
    "write_back": "trainer.skeleton",
    "evaluation_task": "trainer.tasks",
    "video_task": "trainer.tasks",
}
__all__ = [
    "INITIAL_CARRY",
    "Algorithm",
    "CallPlan",
    "Clock",
    "Host",
    "LoopResult",
    "Periodic",
    "Prepared",
    "RunConfig",
    "RunOptions",
    "RunResult",
    "RunSettings",
    "Runs",
    "evaluation_task",
    "evaluator_of",
    "fires",
    "init_runs",
    "init_state",
    "make_train_call",
    "place_run",
    "plan_call",
    "reset_on_mesh",
    "resolve_options",
    "resume",
    "run",
    "run_calls",
    "run_keys",
    "runs_iteration",
    "set_up",
    "split_runs",
    "video_task",
    "with_initial_eval",
    "write_back",
]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms._config_base import RunConfig
    from nnx_ppo.algorithms.core.hooks import Periodic
    from nnx_ppo.algorithms.trainer.host_loop import (
        CallPlan,
        Clock,
        LoopResult,
        fires,
        plan_call,
        run_calls,
        split_runs,
    )
    from nnx_ppo.algorithms.trainer.initial_state import INITIAL_CARRY, init_state, reset_on_mesh
    from nnx_ppo.algorithms.trainer.options import (
        Host,
        RunOptions,
        RunSettings,
        resolve_options,
    )
    from nnx_ppo.algorithms.trainer.run_axis import Runs, init_runs, run_keys, runs_iteration
    from nnx_ppo.algorithms.trainer.skeleton import (
        Algorithm,
        Prepared,
        RunResult,
        evaluator_of,
        make_train_call,
        place_run,
        resume,
        run,
        set_up,
        with_initial_eval,
        write_back,
    )
    from nnx_ppo.algorithms.trainer.tasks import evaluation_task, video_task

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
