"""``nnx-ppo-cognitive``: cognitive tasks trained with PPO, scored trial by trial.

`networks` builds the published network size (a GRU of 100 units, Song, Yang & Wang
2017) and a Dale's-law excitatory/inhibitory population graph of the same size;
`tasks` names the tasks of `nnx_ppo.envs.cognitive` with their training settings;
`cli` trains seeds in one `train_many` program and writes the trial statistics
(`summary`) and the psychometric plot (`plotting`).
"""

from importlib.metadata import version as _version

__version__: str = _version("nnx-ppo-cognitive")

__all__ = ["__version__"]
