"""The ``jax.device_put_replicated`` shim that lets brax 0.14.2's PPO run on JAX >= 0.10."""

from __future__ import annotations

import dataclasses
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from nnx_ppo_benchmarks import brax_compat
from nnx_ppo_benchmarks.brax_compat import device_put_replicated

JAX_HAS_IT = tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 10)


def test_replicates_every_leaf_on_a_new_leading_device_axis():
    devices = jax.local_devices()
    n = len(devices)
    x = {
        "w": np.arange(6.0, dtype=np.float32).reshape(2, 3),
        "steps": jnp.uint32(7),
        "scalar": 3,  # a Python int stays weakly typed, as JAX's function kept it
        "half": jnp.ones((2,), jnp.bfloat16),
        "key": jax.random.key(5),
    }
    y = device_put_replicated(x, devices)
    assert y["w"].shape == (n, 2, 3) and y["w"].dtype == jnp.float32
    np.testing.assert_array_equal(y["w"], np.broadcast_to(x["w"], (n, 2, 3)))
    assert y["steps"].shape == (n,) and y["steps"].dtype == jnp.uint32 and int(y["steps"][0]) == 7
    assert y["scalar"].dtype == jnp.int32 and y["scalar"].weak_type
    assert not y["w"].weak_type and y["half"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(
        jax.random.key_data(y["key"]), np.stack([jax.random.key_data(x["key"])] * n)
    )
    # Slice i lives on devices[i].
    shards = sorted(y["w"].addressable_shards, key=lambda s: s.index[0].start or 0)
    assert [s.device for s in shards] == devices
    # What brax does with it: a pmap-ed step with a collective over the device axis.
    total = jax.pmap(lambda t: jax.lax.psum(t["w"].sum(), "i"), axis_name="i")(y)
    np.testing.assert_allclose(total, np.full((n,), 15.0 * n))


def test_rejects_an_empty_device_list():
    with pytest.raises(ValueError, match=r"devices=\[\] must be a non-empty sequence"):
        device_put_replicated(np.ones(2), [])


def test_missing_tells_a_removed_attribute_from_a_deprecated_one():
    def deprecated(name):
        warnings.warn(f"{name} is deprecated", DeprecationWarning, stacklevel=2)
        return print

    old_jax = types.ModuleType("old_jax")
    old_jax.__getattr__ = deprecated  # type: ignore[method-assign]
    assert brax_compat._missing(types.ModuleType("new_jax"), "device_put_replicated")
    assert not brax_compat._missing(old_jax, "device_put_replicated")  # no warning escapes
    assert brax_compat._missing(jax, "device_put_replicated") is not JAX_HAS_IT


def test_apply_restores_the_function_brax_calls():
    pmap = pytest.importorskip("brax.training.pmap")
    if JAX_HAS_IT:
        assert brax_compat.apply() is False
        return
    assert brax_compat.apply() is True
    try:
        assert jax.device_put_replicated is device_put_replicated
        assert brax_compat.apply() is False  # installed once
        # brax's own helper, which calls jax.device_put_replicated, now works.
        out = pmap.bcast_local_devices({"a": np.arange(3.0)})
        assert out["a"].shape == (1, 3)
    finally:
        del jax.device_put_replicated  # JAX as it was, for the other tests
    assert brax_compat._missing(jax, "device_put_replicated")


@pytest.mark.extended
def test_brax_ppo_trains_in_the_harness_on_this_jax(tmp_path):
    # The brax child of the GPU benchmark's --tiny plan, in this interpreter (what
    # --environments current runs on a TPU VM): on JAX >= 0.10 only brax_compat lets it run.
    pytest.importorskip("brax")
    from nnx_ppo_benchmarks.runner import run_child
    from nnx_ppo_benchmarks.suite import gpu
    from nnx_ppo_benchmarks.venvs import current_environment

    plan = dataclasses.replace(
        gpu.GpuPlan.tiny(), tasks=("CartpoleBalance",), networks=("mlp_default",)
    )
    [spec, *_], _ = gpu.gpu_plan(plan, ("brax",))
    raw = run_child(spec, current_environment(), tmp_path, timeout_s=1200)
    assert raw["status"] == "ok", (raw.get("error"), raw.get("traceback", "")[-2000:])
    assert [steps for _, steps in raw["progress"]] == [240, 480]
    assert np.isfinite(raw["final_eval_reward"])
    assert raw["versions"]["jax"] == jax.__version__
