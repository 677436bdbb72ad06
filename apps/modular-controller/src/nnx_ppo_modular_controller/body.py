"""The body of brax's ``ant``: which observation entries and actuators belong to which part.

brax's ``ant`` observation is ``concatenate([q[2:], qd])`` (27 floats, the torso's
``x, y`` position excluded), and its action is one torque per ``<motor>`` of
``ant.xml`` (8 floats). Read off the model (``sys.mj_model``: ``jnt_qposadr``,
``jnt_dofadr``, ``actuator_trnid``), the entries are:

=========  ==============================================  ===============================
part       observation indices                             content
=========  ==============================================  ===============================
torso      0, 1-4, 13-15, 16-18                            height z, orientation
                                                           quaternion (w, x, y, z), linear
                                                           velocity, angular velocity
hip_1      5, 19                                           hip angle, hip angular velocity
ankle_1    6, 20                                           ankle angle, angular velocity
hip_2      7, 21                                           ...
ankle_2    8, 22
hip_3      9, 23
ankle_3    10, 24
hip_4      11, 25
ankle_4    12, 26
=========  ==============================================  ===============================

The action order is **not** the joint order: ``ant.xml`` declares its motors as
``hip_4, ankle_4, hip_1, ankle_1, hip_2, ankle_2, hip_3, ankle_3`` (brax's docstring
table lists them in joint order, which is wrong for the action vector).

The legs sit at the torso's corners (``x`` is forward, the direction the reward pays
for): leg 1 at ``(+x, +y)`` (``ant.xml``'s ``front_left_leg``), leg 2 at ``(-x, +y)``
(``front_right_leg``), leg 3 at ``(-x, -y)`` (``back_leg``) and leg 4 at ``(+x, -y)``
(``right_back_leg``).

`layout_from_model` derives the same tables from any MuJoCo model with one free
joint and hinge joints, so the constants below are checked against the model in the
tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["ANT", "LEGS", "BodyLayout", "layout_from_model"]

LEGS = ("1", "2", "3", "4")
"""The ant's legs, named by the suffix of their joints (``hip_1``, ``ankle_1``, ...)."""


@dataclasses.dataclass(frozen=True)
class BodyLayout:
    """Which observation entries and actuators belong to which body part.

    Attributes:
        observation: ``{part: indices into the flat observation}``, in the order the
            part's entries are read (for a joint: angle, then angular velocity).
        actuators: The actuated joints in the order of the flat action vector.
        leg_directions: ``{leg: (x, y)}``, where each leg attaches to the torso (used
            to draw the controller like the robot).
    """

    observation: Mapping[str, tuple[int, ...]]
    actuators: tuple[str, ...]
    leg_directions: Mapping[str, tuple[float, float]]

    @property
    def observation_size(self) -> int:
        """Size of the flat observation covered by `observation`."""
        return sum(len(v) for v in self.observation.values())


ANT = BodyLayout(
    observation={
        "torso": (0, 1, 2, 3, 4, 13, 14, 15, 16, 17, 18),
        "hip_1": (5, 19),
        "ankle_1": (6, 20),
        "hip_2": (7, 21),
        "ankle_2": (8, 22),
        "hip_3": (9, 23),
        "ankle_3": (10, 24),
        "hip_4": (11, 25),
        "ankle_4": (12, 26),
    },
    actuators=("hip_4", "ankle_4", "hip_1", "ankle_1", "hip_2", "ankle_2", "hip_3", "ankle_3"),
    leg_directions={"1": (1.0, 1.0), "2": (-1.0, 1.0), "3": (-1.0, -1.0), "4": (1.0, -1.0)},
)
"""The layout of brax's ``ant`` (``exclude_current_positions_from_observation=True``)."""


def layout_from_model(mj_model: Any, *, excluded_positions: int = 2) -> BodyLayout:
    """Derive the body layout from a MuJoCo model, e.g. ``brax_env.sys.mj_model``.

    Assumes the observation ``concatenate([q[excluded_positions:], qd])`` and a model
    with one free joint (the torso) followed by hinge joints named ``hip_<leg>`` and
    ``ankle_<leg>``.

    Args:
        mj_model: A ``mujoco.MjModel``.
        excluded_positions: Leading entries of ``q`` left out of the observation.

    Returns:
        The layout; ``leg_directions`` are the hips' body offsets from the torso.

    Raises:
        ValueError: If the model does not start with a free joint.
    """
    free, hinge = 0, 3  # mujoco.mjtJoint.mjJNT_FREE / mjJNT_HINGE
    if mj_model.njnt == 0 or int(mj_model.jnt_type[0]) != free:
        raise ValueError(
            "layout_from_model: expected the first joint to be the torso's free joint; "
            f"this model has joint types {list(map(int, mj_model.jnt_type))}."
        )
    n_q = int(mj_model.nq) - excluded_positions
    observation: dict[str, tuple[int, ...]] = {
        "torso": (*range(0, 7 - excluded_positions), *range(n_q, n_q + 6)),
    }
    directions: dict[str, tuple[float, float]] = {}
    for j in range(1, mj_model.njnt):
        if int(mj_model.jnt_type[j]) != hinge:
            raise ValueError(f"layout_from_model: joint {j} is not a hinge.")
        name = mj_model.joint(j).name
        observation[name] = (
            int(mj_model.jnt_qposadr[j]) - excluded_positions,
            n_q + int(mj_model.jnt_dofadr[j]),
        )
        if name.startswith("hip_"):
            x, y = (float(v) for v in mj_model.body_pos[mj_model.jnt_bodyid[j]][:2])
            scale = max(abs(x), abs(y))
            directions[name.removeprefix("hip_")] = (x / scale, y / scale)
    actuators = tuple(
        mj_model.joint(int(mj_model.actuator_trnid[a, 0])).name for a in range(mj_model.nu)
    )
    return BodyLayout(observation, actuators, directions)
