"""Saving and loading runs: `Checkpointer` (orbax, atomic, rotated, resumed exactly),
`load_network` and `load_metadata`.

The import path ``nnx_ppo.algorithms.checkpointing`` is nnx-ppo 0.3.0's: every name its
module had is still here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnx_ppo.algorithms import lazy_exports

_NAMES = {
    "CheckpointMismatchError": "checkpointing._io",
    "CorruptedCheckpointError": "checkpointing._io",
    "CorruptedCheckpointWarning": "checkpointing._io",
    "ENV_FIELDS": "checkpointing._io",
    "Checkpointer": "checkpointing.checkpointer",
    "UnsavableStateError": "checkpointing.checkpointer",
    "latest_checkpoint": "checkpointing.loading",
    "load_metadata": "checkpointing.loading",
    "load_network": "checkpointing.loading",
    "config_from_dict": "config",
    "config_to_dict": "config",
}
__all__ = [
    "ENV_FIELDS",
    "CheckpointMismatchError",
    "Checkpointer",
    "CorruptedCheckpointError",
    "CorruptedCheckpointWarning",
    "UnsavableStateError",
    "config_from_dict",
    "config_to_dict",
    "latest_checkpoint",
    "load_metadata",
    "load_network",
]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms.checkpointing._io import (
        ENV_FIELDS,
        CheckpointMismatchError,
        CorruptedCheckpointError,
        CorruptedCheckpointWarning,
    )
    from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer, UnsavableStateError
    from nnx_ppo.algorithms.checkpointing.loading import (
        latest_checkpoint,
        load_metadata,
        load_network,
    )
    from nnx_ppo.algorithms.config import config_from_dict, config_to_dict

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
