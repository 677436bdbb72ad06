"""The one run of ours that several studies start from."""

from __future__ import annotations

from nnx_ppo_benchmarks.settings import RunSpec


def suite_run(task: str, network: str, seed: int, steps: int = 307_200) -> RunSpec:
    """The suite's run of ``ours`` on ``task`` with ``network`` and ``seed``: the task's
    settings (Playground's brax-PPO settings), 256 envs, 8 minibatches, ``steps``
    rounded up to 4 chunks of whole iterations (`plan_suite`).

    >>> spec = suite_run("CartpoleBalance", "mlp_small", 3)
    >>> spec.implementation, spec.seed, spec.ppo.n_envs, spec.n_chunks
    ('ours', 3, 256, 4)
    """
    from nnx_ppo_benchmarks.suite.run import SuiteOptions, plan_suite

    [spec] = plan_suite(
        SuiteOptions(
            tasks=(task,),
            networks=(network,),
            implementations=("ours",),
            seeds=(seed,),
            total_steps=steps,
            n_chunks=4,
            n_envs=256,
            n_minibatches=8,
        )
    )
    return spec
