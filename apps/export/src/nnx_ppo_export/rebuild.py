"""Rebuild a trained network from a run folder: its stored config, then its checkpoint.

A checkpoint stores the network's variables and the training config, not the Python
code that built the network. Two ways to get the template `load_network` fills:

- a run of ``nnx-ppo-quickstart``: its ``config.json`` names the environment, the network
  preset and the seed, so the same constructor call is repeated;
- any other run: a factory ``module:function`` that takes the checkpoint's metadata
  (`load_metadata`, with the stored config under ``"config"``) and returns
  ``(template_network, observation_spec)``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RebuiltPolicy", "find_checkpoints", "load_factory", "rebuild", "seed_of"]


@dataclass(frozen=True)
class RebuiltPolicy:
    """A trained network with what export needs to know about it.

    Attributes:
        network: The network with the checkpoint's variables.
        observation_spec: One environment's observation shape (``observation_size``).
        step: The env step of the checkpoint that was loaded.
        description: One line for the user (env, preset, checkpoint).
        source: Where it came from, for the artefact's manifest: the run folder (``None``
            for a bare checkpoint folder) and the checkpoint folder as given, the step, the git
            commit the run recorded (if any) and, for a quickstart run, its environment
            (``env``, ``brax_backend``, ``episode_length``), network preset, what its
            observation holds (``observation``: `nnx_ppo_export.inputs.observation_layout`)
            and the package versions it trained with (``trained_with``).
        envs: A quickstart run's environments (`nnx_ppo_quickstart.envs.EnvPair`:
            ``eval`` is the run's evaluation environment); ``None`` for ``--factory``.
    """

    network: Any
    observation_spec: Any
    step: int
    description: str
    source: dict[str, Any] = field(default_factory=dict)
    envs: Any = None


def find_checkpoints(path: Path) -> tuple[Path, Path | None]:
    """``(checkpoint_dir, run_dir)`` for a run folder or its ``checkpoints/`` folder.

    ``run_dir`` is the folder holding a quickstart ``config.json``, or ``None``. A seed
    folder ``RUN/seed_<s>`` of a ``--seeds`` run gives the run's ``checkpoints/`` (the
    checkpoint of every seed) and ``RUN``; of a ``--shard`` run, those of the shard
    folder ``RUN/shard-<i>-of-<n>`` that trained the seed.

    Raises:
        FileNotFoundError: If ``path`` is not a folder.
    """
    if not path.is_dir():
        raise FileNotFoundError(
            f"CHECKPOINT_DIR {str(path)!r} is not a folder; pass the --output-dir of an "
            "nnx-ppo-quickstart run (or its checkpoints/ folder)."
        )
    if (path / "config.json").is_file() and (path / "checkpoints").is_dir():
        return path / "checkpoints", path
    run = _seed_run(path)
    if run is not None:  # one seed of a --seeds run: the checkpoints of its program
        return run / "checkpoints", run
    if (path.parent / "config.json").is_file():
        return path, path.parent
    return path, None


def seed_of(path: Path) -> int | None:
    """The seed of a ``--seeds`` run's seed folder ``RUN/seed_<s>`` (next to the run's
    ``config.json`` and ``checkpoints/``, or to the ``--shard`` folder that trained
    it), else ``None``."""
    return None if _seed_run(path) is None else int(path.name.removeprefix("seed_"))


def _seed_run(path: Path) -> Path | None:
    """The folder holding the checkpoint of the seed folder ``path`` (``RUN/seed_<s>``):
    ``RUN``, or for a ``--shard`` run the shard folder whose runs include the seed."""
    name = path.name
    if not name.startswith("seed_") or not name.removeprefix("seed_").isdigit():
        return None
    seed, run = int(name.removeprefix("seed_")), path.parent
    if (run / "config.json").is_file() and (run / "checkpoints").is_dir():
        return run
    for shard in sorted(run.glob("shard-*-of-*")):
        if not (shard / "checkpoints").is_dir():
            continue
        try:
            cli = json.loads((shard / "config.json").read_text())["cli"]
            seeds = [int(s) for s in str(cli.get("seeds") or "").split(",") if s]
            if seed in _shard_seeds(shard, seeds):
                return shard
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            continue  # not a quickstart shard folder
    return None


def _shard_seeds(shard: Path, seeds: list[int]) -> list[int]:
    """The seeds a ``--shard`` folder trained (its ``sweep.json``'s runs), in the order of
    its checkpoint's runs."""
    runs = json.loads((shard / "sweep.json").read_text())["runs"]
    return [seeds[int(j)] for j in runs]


def load_factory(spec: str) -> Callable[[dict[str, Any]], tuple[Any, Any]]:
    """Import ``module:function``.

    Raises:
        ValueError: If ``spec`` is not ``module:function`` or the function is missing.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"--factory {spec!r} must be 'module:function', e.g. 'my_project.nets:build'."
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"--factory {spec!r}: cannot import {module_name!r}: {error}") from error
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"--factory {spec!r}: {module_name} has no function {attr!r}.")
    return factory


def _run_index(run_dir: Path, cli: dict[str, Any], seed: int | None) -> int | None:
    """Which run of a ``--seeds`` run's checkpoint is seed ``seed`` (``None`` for a run
    of one seed).

    Raises:
        ValueError: For a ``--seeds`` run folder given without a seed, or a seed the
            run did not train; the message names the seed folders to pass.
    """
    seeds = [int(s) for s in str(cli.get("seeds") or "").split(",") if s]
    if not seeds:
        if seed is not None:
            raise ValueError(
                f"{run_dir} trained one run (no --seeds); pass {run_dir} itself, not a seed folder."
            )
        return None
    folders = ", ".join(str(run_dir / f"seed_{s}") for s in seeds)
    if cli.get("shard"):  # a shard's checkpoint holds its own seeds only
        seeds = _shard_seeds(run_dir, seeds)
        folders = ", ".join(str(run_dir.parent / f"seed_{s}") for s in seeds)
    if seed is None:
        raise ValueError(
            f"{run_dir} holds the seeds {','.join(map(str, seeds))} of one --seeds run; pass "
            f"the folder of the seed to use: {folders}"
        )
    if seed not in seeds:
        raise ValueError(
            f"{run_dir} trained the seeds {','.join(map(str, seeds))}, not {seed}; pass one "
            f"of {folders}"
        )
    return seeds.index(seed)


def _quickstart_template(
    run_dir: Path, seed: int | None = None
) -> tuple[Any, Any, str, Any, dict[str, Any], int | None]:
    from nnx_ppo_quickstart.envs import make_envs
    from nnx_ppo_quickstart.networks import make_network, parse_critic_obs

    from nnx_ppo_export.inputs import observation_layout

    stored = json.loads((run_dir / "config.json").read_text())  # a ValueError if not JSON
    cli = stored.get("cli") if isinstance(stored, dict) else None
    needed = ("env", "network", "seed", "episode_length", "brax_backend")
    if not isinstance(cli, dict) or any(k not in cli for k in needed):
        raise ValueError(
            f"{run_dir / 'config.json'} is not an nnx-ppo-quickstart config (it needs the "
            f"command-line entries {list(needed)}); rebuild the network with --factory."
        )
    envs = make_envs(
        cli["env"],
        episode_length=int(cli["episode_length"]),
        reward_scaling=float(cli.get("reward_scaling", 1.0)),
        brax_backend=cli["brax_backend"],
        # Runs recorded before the latency options had none.
        action_lag=str(cli.get("action_lag", "0")),
        obs_lag=str(cli.get("obs_lag", "0")),
        lag_hold_prob=float(cli.get("lag_hold_prob", 1.0)),
        # Runs recorded before these options trained without them.
        action_repeat=int(cli.get("action_repeat", 1)),
        obs_history=int(cli.get("obs_history", 1)),
    )
    index = _run_index(run_dir, cli, seed)
    network = make_network(
        cli["network"],
        envs.observation_size,
        envs.action_size,
        int(cli["seed"]) if seed is None else seed,
        critic_obs=parse_critic_obs(str(cli.get("critic_obs", ""))),
    )
    what = f"{cli['network']} on {cli['env']} [{envs.source}]"
    if seed is not None:
        what += f", seed {seed} of {cli['seeds']}"
    run = {key: cli[key] for key in ("env", "brax_backend", "episode_length", "network")}
    run["seed"] = int(cli["seed"]) if seed is None else seed
    run.update({key: cli[key] for key in ("action_lag", "obs_lag", "lag_hold_prob") if key in cli})
    run["observation"] = observation_layout(cli, envs.observation_size)
    run["trained_with"] = (stored.get("provenance") or {}).get("versions")
    return network, envs.observation_size, what, envs, run, index


def rebuild(path: Path, *, factory: str | None = None, step: int | None = None) -> RebuiltPolicy:
    """Rebuild the trained network of a run folder.

    Args:
        path: A quickstart run folder (or its ``checkpoints/``, or for a ``--seeds``
            run the folder of one seed, ``RUN/seed_<s>``), or any `Checkpointer` folder
            together with ``factory``.
        factory: ``module:function`` building ``(template_network, observation_spec)``
            from the checkpoint metadata; required for runs that are not quickstart runs.
        step: Load this checkpoint step instead of the latest readable one.

    Returns:
        The `RebuiltPolicy`.

    Raises:
        FileNotFoundError: If there is no checkpoint folder (or no checkpoint at ``step``).
        ValueError: If the stored config cannot rebuild the network.
    """
    from nnx_ppo.algorithms import load_metadata, load_network

    checkpoints, run_dir = find_checkpoints(path)
    metadata = load_metadata(checkpoints, step)
    envs, run, index = None, {}, None
    if factory is not None:
        built = load_factory(factory)(metadata)
        if not (isinstance(built, tuple) and len(built) == 2):
            raise TypeError(
                f"--factory {factory!r} returned a {type(built).__name__}; it must return "
                "(template_network, observation_spec)."
            )
        template, observation_spec = built
        what = f"{type(template).__name__} from {factory}"
    elif run_dir is not None:
        template, observation_spec, what, envs, run, index = _quickstart_template(
            run_dir, seed_of(path)
        )
    else:
        raise ValueError(
            f"{str(path)!r} has no nnx-ppo-quickstart config.json next to its checkpoints, "
            "so the network cannot be rebuilt from it; pass --factory module:function "
            "(a function of the checkpoint metadata returning (network, observation_spec))."
        )
    network = load_network(checkpoints, template, step=metadata["step"], run=index)
    return RebuiltPolicy(
        network=network,
        observation_spec=observation_spec,
        step=int(metadata["step"]),
        description=f"{what}, checkpoint at step {metadata['step']} in {checkpoints}",
        source={
            # As given on the command line: a deployed artefact does not carry the
            # exporting machine's file system.
            "run": None if run_dir is None else str(run_dir),
            "checkpoints": str(checkpoints),
            "step": int(metadata["step"]),
            "git_commit": None if run_dir is None else _recorded_commit(run_dir),
            **run,
        },
        envs=envs,
    )


def _recorded_commit(run_dir: Path) -> str | None:
    """The git commit a quickstart run recorded in its ``config.json`` (``None`` if it
    recorded none, or the file is not a quickstart record)."""
    try:
        stored = json.loads((run_dir / "config.json").read_text())
        return stored["provenance"]["git_commit"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
