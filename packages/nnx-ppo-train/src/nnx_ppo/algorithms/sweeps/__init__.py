"""Many runs: `train_many` (seeds and settings of one config in one program), `grid`,
a sweep split into shards (`train_shard`) and merged back (`merge_shards`), and
`run_search` (Optuna studies filled round by round).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnx_ppo.algorithms import lazy_exports

_NAMES = {
    "TRACEABLE_FIELDS": "ppo.iteration",
    "SweepResult": "sweeps.many",
    "grid": "sweeps.many",
    "plan_runs": "sweeps.many",
    "run_config": "sweeps.many",
    "sweep_shardings": "sweeps.many",
    "train_many": "sweeps.many",
    "MergedSweep": "sweeps.merge",
    "ShardRun": "sweeps.merge",
    "merge_shards": "sweeps.merge",
    "Objective": "sweeps.search",
    "SearchResult": "sweeps.search",
    "final_return": "sweeps.search",
    "run_search": "sweeps.search",
    "Shard": "sweeps.shards",
    "SweepIdentity": "sweeps.shards",
    "SweepMismatchError": "sweeps.shards",
    "shard_runs": "sweeps.shards",
    "sweep_identity": "sweeps.shards",
    "train_shard": "sweeps.shards",
}
__all__ = [
    "TRACEABLE_FIELDS",
    "MergedSweep",
    "Objective",
    "SearchResult",
    "Shard",
    "ShardRun",
    "SweepIdentity",
    "SweepMismatchError",
    "SweepResult",
    "final_return",
    "grid",
    "merge_shards",
    "plan_runs",
    "run_config",
    "run_search",
    "shard_runs",
    "sweep_identity",
    "sweep_shardings",
    "train_many",
    "train_shard",
]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms.ppo.iteration import TRACEABLE_FIELDS
    from nnx_ppo.algorithms.sweeps.many import (
        SweepResult,
        grid,
        plan_runs,
        run_config,
        sweep_shardings,
        train_many,
    )
    from nnx_ppo.algorithms.sweeps.merge import MergedSweep, ShardRun, merge_shards
    from nnx_ppo.algorithms.sweeps.search import (
        Objective,
        SearchResult,
        final_return,
        run_search,
    )
    from nnx_ppo.algorithms.sweeps.shards import (
        Shard,
        SweepIdentity,
        SweepMismatchError,
        shard_runs,
        sweep_identity,
        train_shard,
    )

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
