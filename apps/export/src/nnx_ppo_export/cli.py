"""``nnx-ppo-export``: export a trained policy from a checkpoint folder.

::

    nnx-ppo-export CHECKPOINT_DIR --format onnx|stablehlo --out DIR [--overwrite]
                   [--record-obs N [--record-envs B]]

``CHECKPOINT_DIR`` is the ``--output-dir`` of an ``nnx-ppo-quickstart`` run (or its
``checkpoints/`` folder): the network is rebuilt from the run's stored ``config.json``
and loaded from the latest readable checkpoint (``--step`` for another). Other runs pass
``--factory module:function`` (see `nnx_ppo_export.rebuild`). The artefact folder
``DIR`` appears atomically, with a generated ``README.md``; see the "Deploy a policy"
how-to for its contents. ``--record-obs N`` also rolls the deterministic policy out on
the run's evaluation environment for ``N`` steps from a reset (episodes restart when
they end) and ships the observations, reset flags and JAX actions as ``obs.npz``, so the
README's loop checks the artefact on the target machine.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from nnx_ppo_apps_common.cli import HelpFormatter, fail, non_negative_int, positive_int
from nnx_ppo_apps_common.compiles import CompileLog
from nnx_ppo_apps_common.runs import add_run_arguments, use_compilation_cache

__all__ = ["main", "parse_args"]

PROG = "nnx-ppo-export"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--help`` lists every option with its default)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Export a trained policy to StableHLO or ONNX (carry as named tensors).",
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "checkpoint_dir",
        type=Path,
        metavar="CHECKPOINT_DIR",
        help="the --output-dir of an nnx-ppo-quickstart run, or its checkpoints/ folder; "
        "for a --seeds run the folder of one seed, RUN/seed_<s>",
    )
    parser.add_argument(
        "--format",
        required=True,
        choices=("onnx", "stablehlo"),
        help="artefact format: 'onnx' (runs with onnxruntime, no JAX) or 'stablehlo' "
        "(serialized jax.export programs)",
    )
    parser.add_argument("--out", required=True, type=Path, help="artefact folder to create")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.add_argument(
        "--include-value", action="store_true", help="also output the value estimates"
    )
    parser.add_argument(
        "--step", type=non_negative_int, default=None, help="checkpoint step (default: latest)"
    )
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset version (>= 17)")
    parser.add_argument(
        "--platforms",
        default=None,
        help="StableHLO: comma-separated platforms to lower for, e.g. cpu,cuda (default: "
        "this machine's JAX backend)",
    )
    parser.add_argument(
        "--record-obs",
        type=positive_int,
        default=None,
        metavar="N",
        help="record N steps of the policy on the run's environment into DIR/obs.npz "
        "(observations, reset flags, JAX actions) for parity checks where it is deployed "
        "(default: no recording)",
    )
    parser.add_argument(
        "--record-envs",
        type=positive_int,
        default=1,
        metavar="B",
        help="environments recorded in parallel by --record-obs",
    )
    parser.add_argument(
        "--factory",
        default=None,
        help="module:function rebuilding (network, observation_spec) from the checkpoint "
        "metadata, for runs that are not nnx-ppo-quickstart runs (default: rebuild from "
        "the run's config.json)",
    )
    add_run_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = parse_args(argv)
    # Heavy imports after argument parsing, so `--help` is instant.
    out = args.out.expanduser().absolute()
    if out.exists() and not args.overwrite:  # before the slow rebuild
        return fail(PROG, f"--out {out} already exists; pass --overwrite to replace it")
    if args.record_obs is not None and args.factory is not None:
        return fail(
            PROG,
            "--record-obs needs the run's environment, which only an nnx-ppo-quickstart "
            "run's config.json names; a --factory run has none (record your own obs.npz, "
            "see the artefact's README.md)",
        )
    if args.format == "onnx" and importlib.util.find_spec("jax2onnx") is None:
        # Before JAX loads and the run is rebuilt (a minute): the install is the fix.
        return fail(
            PROG,
            "--format onnx needs the jax2onnx converter, which nnx-modules' 'onnx' extra "
            'installs: pip install "nnx-modules[onnx]" (or `uv sync` in the nnx-ppo '
            "workspace); --format stablehlo needs only JAX",
        )
    cache = use_compilation_cache(not args.no_compile_cache)
    compiles = CompileLog().start()
    from nnx_ppo.networks.export import (
        DeterministicPolicy,
        ExportError,
        export_policy,
        read_manifest,
    )
    from nnx_ppo_export.inputs import observation_notes
    from nnx_ppo_export.rebuild import rebuild
    from nnx_ppo_export.rollouts import record_rollout, reference_arrays

    platforms = None
    if args.platforms is not None:
        if args.format != "stablehlo":
            return fail(PROG, "--platforms applies to --format stablehlo only")
        platforms = tuple(p.strip() for p in args.platforms.split(",") if p.strip())
    try:
        rebuilt = rebuild(args.checkpoint_dir, factory=args.factory, step=args.step)
        print(f"Exporting {rebuilt.description} as {args.format} to {out}/")
        policy = DeterministicPolicy(
            rebuilt.network, rebuilt.observation_spec, include_value=args.include_value
        )
        notes = None
        if "observation" in rebuilt.source:  # a quickstart run: what each input holds
            notes = observation_notes(
                rebuilt.source["observation"], rebuilt.source["env"], policy.observation_names
            )
        reference = None
        if args.record_obs is not None:
            rollout = record_rollout(
                # The run's evaluation env as it is (its episode limit, action repeat,
                # observation history and latency), restarted where an episode ends.
                rebuilt.envs.eval,
                rebuilt.network,
                n_envs=args.record_envs,
                n_steps=args.record_obs,
                episode_length=None,
            )
            reference = reference_arrays(rollout, policy.observation_names, policy.action_names)
            print(
                f"  recorded {args.record_obs} steps x {args.record_envs} env(s) of "
                f"{rebuilt.source['env']} ({int(rollout.done.sum())} episode ends) -> obs.npz"
            )
        export_policy(
            policy,
            None,
            out,
            format=args.format,
            include_value=args.include_value,
            overwrite=args.overwrite,
            opset=args.opset,
            platforms=platforms,
            source=rebuilt.source,
            reference=reference,
            observation_notes=notes,
        )
    except (FileNotFoundError, FileExistsError, ValueError, TypeError, ImportError) as error:
        return fail(PROG, str(error))
    except ExportError as error:
        return fail(PROG, str(error))
    manifest = read_manifest(out)
    for fn in ("step", "reset"):
        if manifest[fn] is None:
            continue
        ins = ", ".join(t["name"] for t in manifest[fn]["inputs"])
        outs = ", ".join(t["name"] for t in manifest[fn]["outputs"])
        print(f"  {manifest['files'][fn]}: ({ins}) -> ({outs})")
    print(f"Tensor names, shapes and dtypes: {out / 'policy.json'}")
    print(f"How to run it (and check it against obs.npz): {out / 'README.md'}")
    print(compiles.stop().note(cache))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
