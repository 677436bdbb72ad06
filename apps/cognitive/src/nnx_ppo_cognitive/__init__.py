"""``nnx-ppo-cognitive``: cognitive tasks trained with PPO, scored trial by trial.

`networks` builds the published network size (a GRU of 100 units, Song, Yang & Wang
2017) and a Dale's-law excitatory/inhibitory population graph of the same size;
`tasks` names the tasks of `nnx_ppo.envs.cognitive` with their training settings
(and resolves a user's own task given as ``module:Class``); `cli` trains seeds in one
`train_many` program and writes the trial statistics (`summary`), the learning curves
and progress lines (`curves`), the psychometric and chronometric plots (`plotting`) and
every seed's network into a folder of its own; `outputs` names that folder, refuses to
overwrite one, and loads a trained network back (`outputs.load_trained`).
"""

from importlib.metadata import version as _version

__version__: str = _version("nnx-ppo-cognitive")

__all__ = ["__version__"]
