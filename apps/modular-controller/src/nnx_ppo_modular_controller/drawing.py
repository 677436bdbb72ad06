"""Matplotlib drawing of the controller's topology.

`draw_topology` draws any `PopulationGraph`:
input populations green, body-part populations blue, action outputs orange, the critic
grey; solid
arrows for ``delay=0`` connections, dashed curved arrows for delayed ones (so the two
directions of a reciprocal pair stay apart). `body_positions` places the ant
controller's populations like the robot seen from above (forward is right).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo_modular_controller.body import ANT, LEGS, BodyLayout

__all__ = ["body_positions", "draw_topology"]

Position = tuple[float, float]


def body_positions(layout: BodyLayout = ANT) -> dict[str, Position]:
    """Where each population of `make_graph`
    goes: ``root`` at the centre, each leg's hip and ankle along the leg's direction,
    observations on one side of the leg and actions on the other.

    Args:
        layout: The body layout whose ``leg_directions`` orient the legs.

    Returns:
        ``{population: (x, y)}``.
    """
    pos: dict[str, Position] = {
        "root": (0.0, 0.0),
        "torso_obs": (0.0, 1.5),
        "critic_1": (0.0, -1.5),
        "critic_2": (0.0, -2.7),
        "value": (0.0, -3.9),
    }
    for leg in LEGS:
        dx, dy = layout.leg_directions[leg]
        norm = math.hypot(dx, dy)
        ux, uy = dx / norm, dy / norm
        # Observations on the side facing the x axis, actions on the side facing y = 0.
        side = (uy, -ux) if ux * uy > 0 else (-uy, ux)
        for joint, radius in ((f"hip_{leg}", 2.3), (f"ankle_{leg}", 4.2)):
            cx, cy = radius * ux, radius * uy
            pos[joint] = (cx, cy)
            pos[f"{joint}_obs"] = (cx - 0.9 * side[0], cy - 0.9 * side[1])
            pos[f"{joint}_act"] = (cx + 0.9 * side[0], cy + 0.9 * side[1])
    return pos


def _circle(names: Sequence[str]) -> dict[str, Position]:
    n = max(len(names), 1)
    return {
        name: (3 * math.cos(2 * math.pi * i / n), 3 * math.sin(2 * math.pi * i / n))
        for i, name in enumerate(names)
    }


def draw_topology(
    graph: PopulationGraph,
    path: Path,
    *,
    positions: Mapping[str, Position] | None = None,
    title: str | None = None,
) -> None:
    """Draw ``graph`` to a PNG.

    Args:
        graph: The graph to draw (finalized or not).
        path: Where the PNG goes.
        positions: ``{population: (x, y)}``; populations without a position are put on
            a circle.
        title: Figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    pops = graph.populations
    pos = dict(_circle([p.name for p in pops]))
    pos.update(positions or {})
    fig, ax = plt.subplots(figsize=(9, 9), dpi=110)
    for c in graph.connections:
        delayed = c.delay > 0
        to_value = c.dst.startswith("critic") or c.dst == "value"
        ax.annotate(
            "",
            xy=pos[c.dst],
            xytext=pos[c.src],
            arrowprops={
                "arrowstyle": "-|>",
                "color": "0.65" if to_value else ("tab:blue" if delayed else "0.2"),
                "linestyle": "--" if delayed else "-",
                "linewidth": 0.8 if to_value else 1.3,
                "connectionstyle": f"arc3,rad={0.25 if delayed else (0.12 if to_value else 0)}",
                "shrinkA": 17,
                "shrinkB": 17,
                "mutation_scale": 11,
            },
            zorder=1,
        )
    for p in pops:
        if p.input_from is not None:
            color = "#c7e9c0"
        elif p.name.startswith("critic") or p.output_to == "value":
            color = "#d9d9d9"
        elif p.output_to is None:
            color = "#c6dbef"
        else:
            color = "#fdd0a2"
        x, y = pos[p.name]
        ax.text(
            x,
            y,
            f"{p.name}\n{p.size}",
            ha="center",
            va="center",
            fontsize=7,
            zorder=2,
            bbox={"boxstyle": "round,pad=0.35", "facecolor": color, "edgecolor": "0.3"},
        )
    handles = [
        Line2D([], [], color="0.2", label="delay 0 (same step)"),
        Line2D([], [], color="tab:blue", linestyle="--", label="delay 1 (reciprocal pairs)"),
        Line2D([], [], color="0.65", linewidth=0.8, label="critic connections"),
    ]
    for label, color in (
        ("observation input", "#c7e9c0"),
        ("body-part population", "#c6dbef"),
        ("action output", "#fdd0a2"),
        ("critic", "#d9d9d9"),
    ):
        handles.append(
            Line2D(
                [],
                [],
                marker="s",
                linestyle="",
                markersize=9,
                markerfacecolor=color,
                markeredgecolor="0.3",
                label=label,
            )
        )
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.01),
        ncol=4,
        fontsize=7,
        frameon=False,
    )
    if positions is not None:
        ax.annotate(
            "forward (+x)",
            xy=(0.98, 0.98),
            xytext=(0.80, 0.98),
            xycoords="axes fraction",
            va="center",
            fontsize=8,
            arrowprops={"arrowstyle": "-|>", "color": "0.3"},
        )
    xs = [x for x, _ in pos.values()]
    ys = [y for _, y in pos.values()]
    ax.set_xlim(min(xs) - 0.9, max(xs) + 0.9)
    ax.set_ylim(min(ys) - 0.7, max(ys) + 0.7)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
