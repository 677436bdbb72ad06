"""What the apps write and print at the end of a run: JSON files (atomically), the
throughput summary of a training run, its final return and its closing line, and the
results block of an app's README."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["done_message", "final_return", "readme_results", "throughput", "write_json"]


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON (ending in a newline) to ``path``, atomically.

    The file is written next to ``path`` and renamed over it, so a reader (or a run
    interrupted while writing) never sees half a file; an earlier version stays intact
    until the new one is complete.

    Raises:
        TypeError: If ``data`` is not JSON-serialisable (nothing is written then).
    """
    text = json.dumps(data, indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would create it (mkstemp: 0600)
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def throughput(
    total_steps: int, wall_time_s: float, *, start_step: int = 0
) -> dict[str, float | int]:
    """``{"steps", "wall_time_s", "steps_per_second"}`` of a run (rounded for reading).

    Args:
        total_steps: The run's env steps at the end.
        wall_time_s: This attempt's wall time.
        start_step: The step this attempt resumed from: the throughput counts the steps
            trained in ``wall_time_s``, and the record gets ``"resumed_from_step"``.

    Examples:
        >>> throughput(150_000, 61.234)
        {'steps': 150000, 'wall_time_s': 61.2, 'steps_per_second': 2449.6}
        >>> throughput(150_000, 20.0, start_step=100_000)["steps_per_second"]
        2500.0
    """
    trained = total_steps - start_step
    record: dict[str, float | int] = {
        "steps": int(total_steps),
        "wall_time_s": round(wall_time_s, 1),
        "steps_per_second": round(trained / wall_time_s, 1) if wall_time_s > 0 else 0.0,
    }
    if start_step:
        record["resumed_from_step"] = int(start_step)
    return record


def final_return(history: Sequence[tuple[int, dict[str, float]]]) -> float:
    """The last evaluation's mean return (``nan`` without an evaluation).

    Args:
        history: ``[(step, metrics), ...]``, as `TrainResult.eval_history` holds it.

    Examples:
        >>> final_return([(0, {"eval/episode_reward/mean": 1.0}),
        ...               (100, {"eval/episode_reward/mean": 7.5})])
        7.5
        >>> final_return([])
        nan
    """
    return history[-1][1]["eval/episode_reward/mean"] if history else float("nan")


def readme_results(readme: str) -> str | None:
    """The text between a README's ``<!-- results -->`` and ``<!-- /results -->`` lines,
    where an app's README shows its committed results table (``None`` without them).

    Examples:
        >>> readme_results("# App\\n<!-- results -->\\n| a |\\n<!-- /results -->\\n")
        '| a |'
    """
    block = re.search(r"<!-- results -->\n(.*?)\n<!-- /results -->", readme, re.S)
    return block.group(1) if block else None


def done_message(summary: dict[str, Any], final_return: float, out: Path) -> str:
    """The line an app prints after training: steps, time, throughput, final return.

    Args:
        summary: A dict with the keys of `throughput`.
        final_return: The last evaluation's mean return (``nan`` without one).
        out: The output folder.

    Examples:
        >>> print(done_message(throughput(150_000, 61.234), 998.7, Path("out")))
        ... # doctest: +NORMALIZE_WHITESPACE
        Done: 150,000 steps in 61 s (2,450 steps/s, including compilation and eval);
        final eval return 998.7. Results in out/
    """
    resumed = summary.get("resumed_from_step")
    steps = f"{summary['steps']:,} steps" + (f" (resumed at {resumed:,})" if resumed else "")
    return (
        f"Done: {steps} in {summary['wall_time_s']:.0f} s "
        f"({summary['steps_per_second']:,.0f} steps/s, including compilation and eval); "
        f"final eval return {final_return:.1f}. Results in {out}/"
    )
