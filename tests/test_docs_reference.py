"""The reference pages are checked against the code, so they cannot fall behind it.

- ``docs/concepts/configuration.md`` documents every field of the config dataclasses
  with its exact type and default, and no field that does not exist;
- ``docs/concepts/metrics.md`` lists every metric name a training run emits (names with
  ``<...>`` are patterns), with the ``LogLevel`` group that enables it, and nothing
  that is never emitted;
- every public name (``__all__``) of every public module of the three distributions is
  rendered by a ``::: module`` directive of some page under ``docs/api/``.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import pytest
from flax import nnx

from nnx_ppo.algorithms import config as config_module
from nnx_ppo.algorithms.config import (
    EvalConfig,
    LogLevel,
    PPOConfig,
    TrainConfig,
    VideoConfig,
)

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
CONFIG_PAGE = DOCS / "concepts" / "configuration.md"
METRICS_PAGE = DOCS / "concepts" / "metrics.md"
CONFIGS = (PPOConfig, EvalConfig, VideoConfig, TrainConfig)


# --------------------------------------------------------------------------- parsing


def _cells(row: str) -> list[str]:
    """Split a Markdown table row on ``|``, except inside code spans (as Python-Markdown
    does: `` `float | None` `` is one cell)."""
    body = row.strip().removeprefix("|").removesuffix("|")
    cells, current, in_code = [], "", False
    for char in body:
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(current.strip())
            current = ""
        else:
            current += char
    cells.append(current.strip())
    return cells


def _code(cell: str) -> str:
    """The content of a cell that is one code span, e.g. `` `n_envs` `` -> ``n_envs``."""
    match = re.fullmatch(r"`([^`]+)`", cell)
    if not match:
        raise AssertionError(f"expected a single `code` cell, got {cell!r}")
    return match.group(1)


def _sections(page: Path) -> dict[str, list[list[str]]]:
    """``{heading: [table rows as cell lists]}`` for the ``##`` sections of a page.

    Header and separator rows are dropped; only rows whose first cell is a code span
    are kept.
    """
    sections: dict[str, list[list[str]]] = {}
    heading = ""
    in_fence = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if line.startswith("## "):
            heading = line[3:].strip()
            sections.setdefault(heading, [])
        elif line.startswith("|") and heading:
            cells = _cells(line)
            if cells and re.fullmatch(r"`[^`]+`", cells[0]):
                sections[heading].append(cells)
    return sections


# --------------------------------------------------------------------------- configuration


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()  # type: ignore[misc,operator]


def _config_rows(cls: type) -> list[list[str]]:
    sections = _sections(CONFIG_PAGE)
    heading = f"`{cls.__name__}`"
    assert heading in sections, f"{CONFIG_PAGE.name} has no '## {heading}' section"
    return [row for row in sections[heading] if len(row) == 4]


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_config_page_documents_exactly_the_fields(cls: type) -> None:
    documented = [_code(row[0]) for row in _config_rows(cls)]
    fields = [f.name for f in dataclasses.fields(cls)]
    assert len(documented) == len(set(documented)), f"duplicate rows: {documented}"
    missing = [name for name in fields if name not in documented]
    stale = [name for name in documented if name not in fields]
    assert not missing, f"{cls.__name__} fields missing from {CONFIG_PAGE.name}: {missing}"
    assert not stale, f"{CONFIG_PAGE.name} documents nonexistent {cls.__name__} fields: {stale}"
    assert documented == fields, "document the fields in declaration order"


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_config_page_types_and_defaults_match(cls: type) -> None:
    rows = {_code(row[0]): row for row in _config_rows(cls)}
    namespace = {name: getattr(config_module, name) for name in config_module.__all__}
    for field in dataclasses.fields(cls):
        _, type_cell, default_cell, meaning = rows[field.name]
        assert _code(type_cell) == field.type, (
            f"{cls.__name__}.{field.name}: the page says type {_code(type_cell)!r}, "
            f"the dataclass {field.type!r}"
        )
        documented = eval(_code(default_cell), namespace)  # e.g. `1_000_000`, `PPOConfig()`
        assert documented == _default(field), (
            f"{cls.__name__}.{field.name}: the page says default {_code(default_cell)}, "
            f"the dataclass {_default(field)!r}"
        )
        assert meaning, f"{cls.__name__}.{field.name} has no explanation"


def test_config_page_documents_the_derived_properties() -> None:
    rows = _sections(CONFIG_PAGE)["`PPOConfig`"]
    documented = {_code(row[0]) for row in rows if len(row) == 2}
    # Properties may live on a shared base class of the configs: walk the MRO.
    properties = {
        name
        for klass in PPOConfig.__mro__
        for name, value in vars(klass).items()
        if isinstance(value, property)
    }
    assert documented == properties


def test_config_page_documents_every_log_level_flag() -> None:
    rows = _sections(CONFIG_PAGE)["`LogLevel`"]
    documented = [_code(row[0]) for row in rows]
    assert documented == list(LogLevel.__members__)


# --------------------------------------------------------------------------- metrics


def _pattern(name: str) -> re.Pattern[str]:
    """`env/<name>` -> ``env/[^/]+``; ``<path>`` may span several ``/`` levels."""
    parts = re.split(r"(<[a-z_]+>)", name)
    regex = "".join(
        (".+" if part == "<path>" else "[^/]+") if part.startswith("<") else re.escape(part)
        for part in parts
    )
    return re.compile(regex)


def _metric_rows() -> dict[str, str]:
    """``{documented name: group}`` from the metrics page's tables."""
    rows: dict[str, str] = {}
    for heading, table in _sections(METRICS_PAGE).items():
        if "metrics" not in heading.lower():
            continue
        for cells in table:
            name = _code(cells[0])
            assert name not in rows, f"{name} documented twice"
            rows[name] = cells[1].strip("`")
    return rows


def _match(key: str, documented: dict[str, str]) -> str | None:
    """The documented name (exact, else pattern) that ``key`` falls under."""
    if key in documented:
        return key
    hits = [name for name in documented if "<" in name and _pattern(name).fullmatch(key)]
    return hits[0] if len(hits) == 1 else None


AGENTS = ("agent_a", "agent_b")


def _two_agent_setup() -> tuple[Any, Any]:
    """TwoAgentEnv (dict obs, actions, rewards; env metrics) and a per-agent network
    whose samplers emit metrics, so that every kind of metric name appears."""
    from nnx_ppo.envs import TwoAgentEnv
    from nnx_ppo.networks.adapter import PPOAdapter
    from nnx_ppo.networks.containers import Sequential
    from nnx_ppo.networks.feedforward import MLP
    from nnx_ppo.networks.normalizer import Normalizer
    from nnx_ppo.networks.sampling_layers import NormalTanhSampler
    from nnx_ppo.networks.utils import Map
    from nnx_ppo.wrappers import EpisodeWrapper

    rngs = nnx.Rngs(0)
    env = EpisodeWrapper(TwoAgentEnv(), episode_length=5)
    network = Sequential([
        Normalizer({k: 4 for k in AGENTS}),
        PPOAdapter(
            action=Map({
                k: Sequential([MLP(4, [8], 4, rngs=rngs), NormalTanhSampler(rngs)])
                for k in AGENTS
            }),
            value=Map({k: MLP(4, [8], 1, rngs=rngs) for k in AGENTS}),
        ),
    ])  # fmt: skip
    return env, network


@pytest.fixture(scope="module")
def emitted() -> list[dict[str, float]]:
    """The records of a tiny run with every log group on."""
    from nnx_ppo.algorithms.ppo.train import train_ppo

    env, network = _two_agent_setup()
    config = TrainConfig(
        ppo=PPOConfig(
            n_envs=4, rollout_length=5, n_minibatches=2, n_epochs=1, total_steps=40,
            iterations_per_call=2, log_level=LogLevel.ALL | LogLevel.DIAGNOSTICS,
            target_kl=1.0,  # train/updates_taken
        ),
        eval=EvalConfig(n_envs=2, max_episode_length=5),
    )  # fmt: skip
    records: list[dict[str, float]] = []
    train_ppo(env, network, config, log_fn=lambda m, s: records.append(dict(m)), progress=False)
    return records


def test_every_emitted_metric_is_documented(emitted: list[dict[str, float]]) -> None:
    documented = _metric_rows()
    keys = {key for record in emitted for key in record}
    undocumented = sorted(key for key in keys if _match(key, documented) is None)
    assert not undocumented, f"metrics emitted but not in {METRICS_PAGE.name}: {undocumented}"


def test_every_documented_metric_is_emitted(emitted: list[dict[str, float]]) -> None:
    documented = _metric_rows()
    keys = {key for record in emitted for key in record}
    used = {_match(key, documented) for key in keys}
    stale = sorted(set(documented) - used)
    assert not stale, f"{METRICS_PAGE.name} documents metrics no run emits: {stale}"


_JIT_GROUPS = (
    "LOSSES", "ACTOR", "CRITIC", "ROLLOUT", "ROLLOUT_OBS", "ENV_METRICS", "NETWORK_METRICS",
    "GRAD_NORM", "WEIGHTS", "DIAGNOSTICS",
)  # fmt: skip


def _iteration_keys(level: LogLevel) -> set[str]:
    """Metric names one jitted iteration returns at ``level`` (traced, not compiled)."""
    from nnx_ppo.algorithms.ppo.iteration import (
        init_train_state,
        make_optimizer,
        make_training_iteration,
    )

    env, network = _two_agent_setup()
    ppo = PPOConfig(n_envs=4, rollout_length=3, n_minibatches=2, n_epochs=1, log_level=level)
    optimizer = make_optimizer(ppo)
    graphdef, state = init_train_state(env, network, ppo, optimizer, jax.random.PRNGKey(0))
    iteration = make_training_iteration(env, graphdef, optimizer, ppo)
    _, metrics = jax.eval_shape(iteration, state)
    return set(metrics)


def test_metric_groups_match_log_levels() -> None:
    documented = _metric_rows()
    for group in _JIT_GROUPS:
        keys = _iteration_keys(LogLevel[group])
        assert keys, f"LogLevel.{group} enables no metric"
        for key in keys:
            name = _match(key, documented)
            assert name is not None and documented[name] == group, (
                f"LogLevel.{group} emits {key!r}, documented as group "
                f"{documented.get(name or '', 'missing')!r}"
            )
    # THROUGHPUT is measured on the host, evaluation is always on.
    expected = {"THROUGHPUT", "evaluation", *_JIT_GROUPS}
    assert set(documented.values()) == expected
    assert _iteration_keys(LogLevel.NONE) == set()


# --------------------------------------------------------------------------- API pages


def _public_modules() -> Iterator[str]:
    """Dotted names of the public modules of the three distributions."""
    for src in sorted(ROOT.glob("packages/*/src")):
        for path in sorted(src.rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if any(part.startswith("_") for part in parts):
                continue
            yield ".".join(parts)


def _api_directives() -> set[str]:
    """Modules rendered by a ``::: module`` line of some page under ``docs/api``."""
    found = set()
    for page in (DOCS / "api").rglob("*.md"):
        found.update(re.findall(r"^::: *([\w.]+)", page.read_text(), re.M))
    return found


def test_public_modules_are_found() -> None:
    modules = set(_public_modules())
    assert {"nnx_ppo.networks.types", "nnx_ppo.algorithms.ppo.train", "nnx_ppo.envs"} <= modules


def test_every_public_name_has_an_api_page() -> None:
    directives = _api_directives()
    rendered = {name: importlib.import_module(name) for name in directives}
    missing = []
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            if module_name in directives:
                continue  # the module's page renders its whole __all__
            obj = getattr(module, name)
            # A re-export is documented where it is defined, e.g. nnx_ppo.envs.PointMass
            # by `::: nnx_ppo.envs.point_mass`.
            if not any(
                name in getattr(page, "__all__", ()) and getattr(page, name) is obj
                for page in rendered.values()
            ):
                missing.append(f"{module_name}.{name}")
    assert not missing, (
        f"public names with no API page (add `::: <module>` to a page under docs/api/): {missing}"
    )


def test_api_directives_point_at_real_modules() -> None:
    modules = set(_public_modules())
    stale = sorted(d for d in _api_directives() if d not in modules)
    assert not stale, f"docs/api pages render modules that are not public: {stale}"
