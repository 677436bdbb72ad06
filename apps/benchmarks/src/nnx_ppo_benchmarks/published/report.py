"""``report.md`` and ``curves.png`` of the published-number benchmarks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.common import Panel, median_ci, write_cell_report
from nnx_ppo_benchmarks.published.tasks import (
    BENCHMARKS,
    CONV_FAMILIES,
    FAMILIES,
    Benchmark,
    Published,
)

__all__ = ["load_cells", "write_report"]


def load_cells(out: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """``{benchmark: {family: cell}}`` of the cells in ``out/cells`` (in the order of
    `BENCHMARKS`, `FAMILIES` and `CONV_FAMILIES`; unknown names are skipped)."""
    families = (*FAMILIES, *CONV_FAMILIES)
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for path in sorted((out / "cells").glob("*.json")):
        cell = json.loads(path.read_text())
        if cell.get("benchmark") in BENCHMARKS and cell.get("family") in families:
            found.setdefault(cell["benchmark"], {})[cell["family"]] = cell
    return {
        b: {f: found[b][f] for f in families if f in found[b]} for b in BENCHMARKS if b in found
    }


def _published(p: Published) -> str:
    spread = "" if p.spread is None else f" ± {p.spread:g}"
    budget = "" if p.steps is None else f" at {p.steps:,} steps"
    return f"{p.value:g}{spread} ({p.what}{budget}; {p.source})"


def _ci(values: list[float]) -> str:
    low, mid, high = median_ci(values)
    return f"{mid:.2f} [{low:.2f}, {high:.2f}]"


def _iqm(values: list[float]) -> str:
    """The interquartile mean over seeds with its 95% stratified-bootstrap interval
    (rliable's, `nnx_ppo.algorithms.analysis.statistics`; one task, so the seeds)."""
    from nnx_ppo.algorithms.analysis.statistics import iqm, stratified_bootstrap

    low, high = stratified_bootstrap(iqm, values, n_resamples=2000)
    return f"{iqm(values):.2f} [{low:.2f}, {high:.2f}]"


def _table(bench: Benchmark, cells: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        f"### {bench.title} (`{bench.name}`)",
        "",
        *(f"- Published: {_published(p)}" for p in bench.references),
        "",
        "| ours | seeds | steps | final return, median [95% CI] | min | max | "
        "per-seed final | wall time | final return, IQM [95% CI] | P(final > first row's) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    from nnx_ppo.algorithms.analysis.statistics import probability_of_improvement

    first: list[float] | None = None  # the first row's finals: the reference
    for family, cell in cells.items():
        finals = [r["final"] for r in cell["runs"]]
        better = (
            "reference" if first is None else f"{probability_of_improvement(finals, first):.2f}"
        )
        first = finals if first is None else first
        per_seed = ", ".join(f"{v:.1f}" for v in finals)
        lines.append(
            f"| {family} | {len(finals)} | {cell['runs'][0]['total_steps']:,} | {_ci(finals)} "
            f"| {min(finals):.2f} | {max(finals):.2f} | {per_seed} | {cell['wall_s']:.0f} s "
            f"| {_iqm(finals)} | {better} |"
        )
    return [*lines, ""]


def _panels(cells: dict[str, dict[str, dict[str, Any]]]) -> list[Panel]:
    """One panel per benchmark: each family's curves against the published figures."""
    panels = []
    for name, by_family in cells.items():
        bench = BENCHMARKS[name]
        curves = [(f, [r["curve"] for r in cell["runs"]]) for f, cell in by_family.items()]
        references = [
            (ref.value, "--" if i == 0 else ":", ref.what) for i, ref in enumerate(bench.references)
        ]
        panels.append(Panel(bench.title, curves, references))
    return panels


def write_report(out: Path) -> Path:
    """Write ``out/report.md`` (and ``out/curves.png`` if any cell finished) from the
    cells in ``out/cells``; returns the report's path."""
    cells = load_cells(out)
    body: list[str] = []
    for name, by_family in cells.items():
        body += _table(BENCHMARKS[name], by_family)
    for name in cells:
        bench = BENCHMARKS[name]
        body += [f"Translation of `{name}`:", "", *(f"- {t}" for t in bench.translation), ""]
    title = "Memory benchmarks with published numbers"
    return write_cell_report(out, title, body, _panels(cells), legend="lower right")
