"""Child processes: one module per implementation, each run in its own environment.

Run as ``python -m nnx_ppo_benchmarks.children.<module> --spec JSON --out PATH`` with
the benchmark's ``src`` folder on ``PYTHONPATH``. They import only the standard
library, JAX and their own implementation's packages.
"""

__all__: list[str] = []
