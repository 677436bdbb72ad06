"""Settings shared by every test session of the monorepo.

On recent NVIDIA GPUs JAX computes float32 matrix products in TF32 by default (about
three significant digits). The tests compare jit against eager runs, replays against
rollouts and sharded against single-device runs to float32 tolerance, so on an
accelerator they run with full-precision products. CPU runs are unaffected.
"""

import jax

if jax.default_backend() != "cpu":
    jax.config.update("jax_default_matmul_precision", "highest")
