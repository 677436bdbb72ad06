"""``results.md`` and the learning-curve PNGs of the suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.common import area_under_curve, band, median_ci
from nnx_ppo_benchmarks.learning.families import FAMILIES
from nnx_ppo_benchmarks.learning.tasks import TASKS, lr_schedule, staggered

__all__ = ["summarize", "write_report"]


def summarize(cell: dict[str, Any]) -> dict[str, Any] | None:
    """Median and 95% bootstrap interval of a cell's final return and curve area, and
    the interquartile mean of the final returns with its interval (rliable's, `_iqm`;
    ``None`` for a cell without finished seeds)."""
    runs = cell.get("runs") or []
    if not runs:
        return None
    finals = [r["final"] for r in runs]
    areas = [area_under_curve(r["curve"]) for r in runs]
    others = TASKS[cell["task"]].cross_eval if cell["task"] in TASKS else ()
    on = {o: [r["final_on"][o] for r in runs if o in r.get("final_on", {})] for o in others}
    return {
        "seeds": [r["seed"] for r in runs],
        "final": median_ci(finals),
        "iqm": _iqm(finals),
        "final_on": {o: median_ci(v) for o, v in on.items() if len(v) == len(runs)},
        "auc": median_ci(areas),
        "finals": finals,
        "areas": areas,
        "train_s": sum(r["train_s"] for r in runs) / len(runs),
    }


def _iqm(values: list[float]) -> tuple[float, float, float]:
    """``(low, IQM, high)``: the interquartile mean over seeds and its 95% stratified
    bootstrap interval (`nnx_ppo.algorithms.analysis.statistics`; one task, so the seeds)."""
    from nnx_ppo.algorithms.analysis.statistics import iqm, stratified_bootstrap

    low, high = stratified_bootstrap(iqm, values, n_resamples=2000)
    return low, iqm(values), high


def _improvement(x: list[float], y: list[float]) -> float:
    """``P(X > Y)`` over the seeds' final returns (ties count one half)."""
    from nnx_ppo.algorithms.analysis.statistics import probability_of_improvement

    return probability_of_improvement(x, y)


def _fmt(ci: tuple[float, float, float]) -> str:
    low, mid, high = ci
    return f"{mid:.1f} [{low:.1f}, {high:.1f}]"


def _table(task: str, cells: list[dict[str, Any]]) -> list[str]:
    t = TASKS[task]
    budget = cells[0]["total_steps"]
    cross = "".join(f" final return on `{o}`, median [95% CI] |" for o in t.cross_eval)
    lines = [
        f"### `{task}`: {t.description}",
        "",
        f"{budget:,} env steps per run, episodes of {t.episode_length} steps; evaluation "
        f"every {budget // t.n_evals:,} steps on {cells[0]['eval_envs']} episodes, final "
        f"return on {cells[0]['final_eval_envs']} episodes.",
        "",
        "| family | implementation | training episodes start | seeds | "
        f"final return, median [95% CI] |{cross} area under curve, median [95% CI] | "
        "per-seed final | final return, IQM [95% CI] | P(final > first row's) |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(t.cross_eval),
    ]
    first: list[float] | None = None  # the first finished row's finals: the reference
    for cell in cells:
        s = summarize(cell)
        starts = "staggered" if staggered(cell) else "at step 0"
        if lr_schedule(cell) == "linear":
            starts += "; learning rate decayed to 0"
        head = f"| {cell['family']} | {cell['implementation']} | {starts} |"
        if s is None:
            error = cell.get("error", "no seed finished")
            lines.append(f"{head} 0 | failed: {error} | | | | |" + " |" * len(t.cross_eval))
            continue
        improvement = "reference" if first is None else f"{_improvement(s['finals'], first):.2f}"
        first = s["finals"] if first is None else first
        per_seed = ", ".join(f"{v:.0f}" for v in s["finals"])
        on = "".join(
            f" {_fmt(s['final_on'][o])} |" if o in s["final_on"] else " |" for o in t.cross_eval
        )
        lines.append(
            f"{head} {len(s['seeds'])} | {_fmt(s['final'])} |{on} {_fmt(s['auc'])} | {per_seed} "
            f"| {_fmt(s['iqm'])} | {improvement} |"
        )
    return [*lines, ""]


def _across_tasks(by_task: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Per family, ``P(ours > other)`` over the tasks both implementations ran (with the
    same episode starts and learning-rate schedule): per task over the seeds' final
    returns, averaged over the tasks (rliable's probability of improvement), with its
    95% stratified-bootstrap interval when every task has the same number of seeds."""
    from nnx_ppo.algorithms.analysis.statistics import (
        probability_of_improvement,
        stratified_bootstrap,
    )

    finals: dict[tuple[str, str, bool, str], dict[str, list[float]]] = {}
    for task, cells in by_task.items():
        for cell in cells:
            runs = cell.get("runs") or []
            if runs:
                key = (cell["family"], cell["implementation"], staggered(cell), lr_schedule(cell))
                finals.setdefault(key, {})[task] = [r["final"] for r in runs]
    rows = []
    for (family, implementation, stagger, schedule), theirs in finals.items():
        ours = finals.get((family, "ours", stagger, schedule))
        if implementation == "ours" or ours is None:
            continue
        tasks = [task for task in theirs if task in ours]
        if not tasks:
            continue
        per_task = [probability_of_improvement(ours[t], theirs[t]) for t in tasks]
        estimate = f"{sum(per_task) / len(per_task):.2f}"
        if len({len(ours[t]) for t in tasks}) == 1 and len({len(theirs[t]) for t in tasks}) == 1:
            x = [list(col) for col in zip(*(ours[t] for t in tasks), strict=True)]
            y = [list(col) for col in zip(*(theirs[t] for t in tasks), strict=True)]
            low, high = stratified_bootstrap(probability_of_improvement, x, y, n_resamples=2000)
            estimate += f" [{low:.2f}, {high:.2f}]"
        each = ", ".join(f"`{t}` {p:.2f}" for t, p in zip(tasks, per_task, strict=True))
        starts = "staggered" if stagger else "at step 0"
        rows.append(f"| {family} | {implementation} | {starts} | {estimate} | {each} |")
    if not rows:
        return []
    return [
        "### Probability of improvement across tasks",
        "",
        "P(ours > the other implementation): for each task the probability that a seed of "
        "ours ends with a higher final return than a seed of the other (ties count one "
        "half), averaged over the tasks both ran; 0.5 is a tie. Interval: 95% stratified "
        "bootstrap (seeds resampled within each task).",
        "",
        "| family | other implementation | training episodes start | "
        "P(ours > other) [95% CI] | per task |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


def _family_colours(plt: Any) -> dict[str, Any]:
    """One distinct colour per family: the default cycle's ten for the first families
    (the colours of the figures already published), the odd shades of ``tab20`` (the
    light ones the cycle lacks) for the rest."""
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    extra = [plt.get_cmap("tab20")(i) for i in range(1, 20, 2)]
    palette = [*cycle, *extra]
    return {f: palette[i % len(palette)] for i, f in enumerate(FAMILIES)}


def _plot(task: str, cells: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colours = _family_colours(plt)
    for cell in cells:
        runs = cell.get("runs") or []
        if not runs:
            continue
        b = band([r["curve"] for r in runs])
        ours = cell["implementation"] == "ours"
        label = f"{cell['family']} ({cell['implementation']}, {len(runs)} seeds)"
        colour = colours.get(cell["family"])
        style = "-" if ours else "--"
        ax.plot(b["steps"], b["median"], style, color=colour, label=label)
        ax.fill_between(b["steps"], b["low"], b["high"], color=colour, alpha=0.15 if ours else 0.07)
    ax.set_title(f"{task}: {TASKS[task].description}", fontsize=9)
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluation return (median, 95% bootstrap band)")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results: dict[str, Any], output_dir: Path) -> Path:
    """Write ``results.md``, ``tables.md`` (the tables only) and ``curves_<task>.png``
    into ``output_dir``; returns the path of ``results.md``."""
    meta = results["meta"]
    by_task: dict[str, list[dict[str, Any]]] = {}
    for cell in results["cells"]:
        by_task.setdefault(cell["task"], []).append(cell)
    lines = [
        "# Learning quality: network families on partially observable tasks",
        "",
        f"Command: `{meta.get('command')}`. Load average before/after: "
        f"{meta.get('load_before')} / {meta.get('load_after')} on {meta.get('cpu_count')} "
        f"cores; workspace commit {meta.get('git')}; JAX {meta.get('jax_version')}.",
        "",
        "Every cell trains the same seeds with the speed benchmark's hyperparameters "
        "(Playground's CartpoleBalance settings, not tuned to any task); the interval is a "
        "95% percentile bootstrap of the median over seeds. The area under the curve is "
        "the average evaluation return over training. The interquartile mean (IQM, the mean "
        "of the middle half of the seeds) and the probability of improvement are "
        "rliable's statistics (Agarwal et al. 2021). Staggered training episodes start "
        "from a fresh reset state at a random step in the first half of the episode "
        "(nnx-ppo 0.3.0 always trains so; ours with `EpisodeWrapper(stagger=...)` and "
        '`reset_mode="fresh"`); evaluations play whole episodes.',
        "",
    ]
    tables: list[str] = []
    for task, cells in by_task.items():
        table = _table(task, cells)
        tables += table
        png = output_dir / f"curves_{task}.png"
        _plot(task, cells, png)
        lines += [*table, f"![{task} learning curves]({png.name})", ""]
    across = _across_tasks(by_task)
    tables += across
    lines += across
    # The tables alone, for pages that place the images themselves (the docs site).
    (output_dir / "tables.md").write_text("\n".join(tables))
    path = output_dir / "results.md"
    path.write_text("\n".join(lines))
    return path
