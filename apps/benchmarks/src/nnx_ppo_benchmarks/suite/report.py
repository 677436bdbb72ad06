"""The suite's tables: one row per (task, network, implementation), and ours/brax ratios.

Shared by the control suite and the GPU benchmark (:mod:`.gpu`), whose markdown is the
docs table's format. Per row: the seeds that finished; the final deterministic
evaluation's return, median and 95% percentile-bootstrap interval over seeds; the
steady-state steps/s, compile seconds and peak RSS (medians over seeds, as derived by
:func:`nnx_ppo_benchmarks.metrics.derive`). Ratios, per task and network where both
implementations ran: return ours/brax (ratio of the medians) and steps/s ours/brax
(median of the seed-paired ratios: paired runs ran back to back). A cell an
implementation cannot run (``status="unsupported"``: brax PPO and a recurrent family)
is a row that says why. Per task, what memory costs and buys: every other family of
ours against ours' MLP of the same task (return and steps/s) and brax's MLP (return).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.common import median_ci
from nnx_ppo_benchmarks.metrics import json_safe, ratio_summary
from nnx_ppo_benchmarks.settings import NETWORKS
from nnx_ppo_benchmarks.suite.variants import split_variant, unstacked

__all__ = ["markdown", "summarize", "write_report"]


def _ok(runs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in runs if r.get("status") == "ok"]


def _median(values: Sequence[float | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"rows": [...], "ratios": [...]}`` from run records (each with ``env_name``,
    ``network``, ``implementation``, ``seed``, ``status`` and, if ok, ``derived``).

    Example:
        >>> def run(impl, seed, ret, sps):
        ...     return {"env_name": "T", "network": "mlp", "implementation": impl,
        ...             "seed": seed, "status": "ok", "derived": {"final_eval_reward": ret,
        ...             "steady_sps": sps, "compile_s": 1.0, "peak_rss_mb": 9.0}}
        >>> s = summarize([run("ours", 0, 10.0, 200.0), run("brax", 0, 5.0, 100.0),
        ...                run("ours", 1, 30.0, 300.0), run("brax", 1, 15.0, 100.0)])
        >>> [(r["implementation"], r["return"]["median"], r["steady_sps"]) for r in s["rows"]]
        [('ours', 20.0, 250.0), ('brax', 10.0, 100.0)]
        >>> s["ratios"][0]["return"], s["ratios"][0]["steady_sps"]
        (2.0, 2.5)
    """
    seen = list(dict.fromkeys((r["env_name"], r["network"], r["implementation"]) for r in runs))
    # Grouped by task, then network, each in order of first appearance.
    task_at = {t: i for i, t in enumerate(dict.fromkeys(k[0] for k in seen))}
    pair_at = {p: i for i, p in enumerate(dict.fromkeys(k[:2] for k in seen))}
    keys = sorted(seen, key=lambda k: (task_at[k[0]], pair_at[k[:2]]))
    rows = []
    for task, network, impl in keys:
        cell = [
            r
            for r in runs
            if (r["env_name"], r["network"], r["implementation"]) == (task, network, impl)
        ]
        ok = _ok(cell)
        returns = [
            float(r["derived"]["final_eval_reward"])
            for r in ok
            if r["derived"].get("final_eval_reward") is not None
        ]
        ci = median_ci(returns) if returns else None
        rows.append(
            {
                "task": task,
                "network": network,
                "implementation": impl,
                "seeds": sorted(r["seed"] for r in ok),
                "unsupported": next(
                    (r.get("error") for r in cell if r.get("status") == "unsupported"), None
                ),
                "failed": sum(
                    r.get("status") not in ("ok", "not run", "unsupported") for r in cell
                ),
                "not_run": sum(r.get("status") == "not run" for r in cell),
                "return": None
                if ci is None
                else dict(zip(("low", "median", "high"), ci, strict=True)),
                "returns": returns,
                **{
                    metric: _median([r["derived"].get(metric) for r in ok])
                    for metric in ("steady_sps", "compile_s", "peak_rss_mb", "train_s")
                },
            }
        )
    ratios = []
    for task, network in dict.fromkeys((t, n) for t, n, _ in keys):
        by_impl = {
            row["implementation"]: row
            for row in rows
            if (row["task"], row["network"]) == (task, network)
        }
        if "ours" not in by_impl or "brax" not in by_impl or by_impl["brax"]["unsupported"]:
            continue
        ours, brax = by_impl["ours"], by_impl["brax"]
        ret = None
        if ours["return"] and brax["return"] and brax["return"]["median"]:
            ret = ours["return"]["median"] / brax["return"]["median"]

        def paired(impl: str, task: str = task, network: str = network) -> dict[int, float]:
            return {
                r["seed"]: r["derived"]["steady_sps"]
                for r in _ok(runs)
                if (r["env_name"], r["network"], r["implementation"]) == (task, network, impl)
                and r["derived"].get("steady_sps")
            }

        mine, theirs = paired("ours"), paired("brax")
        seeds = sorted(set(mine) & set(theirs))
        sps = ratio_summary([mine[s] for s in seeds], [theirs[s] for s in seeds])
        ratios.append(
            {
                "task": task,
                "network": network,
                "return": ret,
                "steady_sps": None if sps is None else sps["median"],
                "within_brax_interval": None
                if not (ours["return"] and brax["return"])
                else brax["return"]["low"] <= ours["return"]["median"] <= brax["return"]["high"]
                or ours["return"]["median"] > brax["return"]["high"],
            }
        )
    return {"rows": rows, "ratios": ratios, "memory": _memory(runs, rows)}


def _paired_sps(runs: Sequence[Mapping[str, Any]], task: str, network: str) -> dict[int, float]:
    return {
        r["seed"]: r["derived"]["steady_sps"]
        for r in _ok(runs)
        if (r["env_name"], r["network"], r["implementation"]) == (task, network, "ours")
        and r["derived"].get("steady_sps")
    }


def _memory(
    runs: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Per task, what each memory buys against ours' first MLP family of that task:
    every other family of ours on the task, and ours' MLPs on its history variant
    (``T/masked-history4`` for ``T/masked``). Return ratio (of the medians), steps/s
    ratio (median of the seed-paired ratios), and the return ratio against brax's run
    of the baseline MLP family on the task."""

    def is_mlp(network: str) -> bool:
        return network in NETWORKS and NETWORKS[network].kind == "mlp"

    def ratio(row: Mapping[str, Any], other: Mapping[str, Any] | None) -> float | None:
        if other is None or not other["return"]["median"]:
            return None
        return float(row["return"]["median"] / other["return"]["median"])

    ours = [row for row in rows if row["implementation"] == "ours" and row["return"]]
    out = []
    for task in dict.fromkeys(row["task"] for row in rows):
        mlps = [row for row in ours if row["task"] == task and is_mlp(row["network"])]
        if not mlps:
            continue
        base = mlps[0]
        brax = next(
            (
                row
                for row in rows
                if (row["task"], row["network"], row["implementation"])
                == (task, base["network"], "brax")
                and row["return"]
            ),
            None,
        )
        candidates = [
            (row, row["network"])
            for row in ours
            if row["task"] == task and not is_mlp(row["network"])
        ] + [
            (row, f"{row['network']} on {split_variant(row['task'])[1]}")
            for row in ours
            if unstacked(row["task"]) == task and is_mlp(row["network"])
        ]
        for row, label in candidates:
            here = _paired_sps(runs, row["task"], row["network"])
            there = _paired_sps(runs, task, base["network"])
            seeds = sorted(set(here) & set(there))
            sps = ratio_summary([here[s] for s in seeds], [there[s] for s in seeds])
            out.append(
                {
                    "task": task,
                    "network": label,
                    "baseline": base["network"],
                    "return_vs_ours_mlp": ratio(row, base),
                    "return_vs_brax_mlp": ratio(row, brax),
                    "steady_sps_vs_ours_mlp": None if sps is None else sps["median"],
                }
            )
    return out


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown(summary: Mapping[str, Any], *, title: str, preamble: Sequence[str] = ()) -> str:
    """The report: per-row table, then the ratio table (if any pair ran)."""
    lines = [f"# {title}", "", *preamble]
    if preamble:
        lines.append("")
    lines += [
        "| task | network | implementation | seeds | return: median [95% interval] "
        "| steps/s | compile s | peak RSS MB |",
        "|---|---|---|---|---|---:|---:|---:|",
    ]
    for row in summary["rows"]:
        ret = row["return"]
        shown = "-" if ret is None else f"{ret['median']:.1f} [{ret['low']:.1f}, {ret['high']:.1f}]"
        failed = f" ({row['failed']} failed)" if row["failed"] else ""
        if row.get("not_run"):
            failed += f" ({row['not_run']} not run)"
        if row.get("unsupported"):
            failed += f" (not run: {row['unsupported']})"
        lines.append(
            f"| {row['task']} | {row['network']} | {row['implementation']} | "
            f"{len(row['seeds'])}{failed} | {shown} | {_num(row['steady_sps'])} | "
            f"{_num(row['compile_s'], 1)} | {_num(row['peak_rss_mb'])} |"
        )
    if summary["ratios"]:
        lines += [
            "",
            "| task | network | return ours/brax | steps/s ours/brax | ours' median within or "
            "above brax's interval |",
            "|---|---|---:|---:|---|",
        ]
        for ratio in summary["ratios"]:
            within = ratio["within_brax_interval"]
            lines.append(
                f"| {ratio['task']} | {ratio['network']} | {_num(ratio['return'], 2)} | "
                f"{_num(ratio['steady_sps'], 2)} | "
                f"{'-' if within is None else ('yes' if within else 'no')} |"
            )
    if summary.get("memory"):
        lines += [
            "",
            "What memory costs and buys (ours; each family against the MLP of the same task):",
            "",
            "| task | network | against | return / ours' MLP | return / brax's MLP "
            "| steps/s / ours' MLP |",
            "|---|---|---|---:|---:|---:|",
        ]
        for m in summary["memory"]:
            lines.append(
                f"| {m['task']} | {m['network']} | {m['baseline']} | "
                f"{_num(m['return_vs_ours_mlp'], 2)} | {_num(m['return_vs_brax_mlp'], 2)} | "
                f"{_num(m['steady_sps_vs_ours_mlp'], 2)} |"
            )
    return "\n".join(lines) + "\n"


def write_report(
    results: dict[str, Any], output_dir: Path, *, title: str, preamble: Sequence[str] = ()
) -> dict[str, Path]:
    """Add ``summary`` to ``results`` and write ``results.json`` and ``results.md``."""
    output_dir.mkdir(parents=True, exist_ok=True)
    results["summary"] = summarize(results["runs"])
    paths = {"json": output_dir / "results.json", "markdown": output_dir / "results.md"}
    paths["json"].write_text(json.dumps(json_safe(results), indent=1, allow_nan=False))
    paths["markdown"].write_text(markdown(results["summary"], title=title, preamble=preamble))
    return paths
