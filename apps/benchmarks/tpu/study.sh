#!/usr/bin/env bash
# One prepared command for a TPU v5e machine of the `device` tool: install what the
# studies need (the machine's own index, then the wheels in .whl-tpu/ that
# wheels.sh downloaded and built), then run one study per argument under a shared
# compilation cache, each under `timeout`, its JSON lines and log into $OUT.
#
#   bash apps/benchmarks/tpu/study.sh SECONDS NAME "STUDY ARGS" [NAME "STUDY ARGS"]...
#
# e.g. (one cell of the ablations study, 5 seeds in one train_many program):
#   bash apps/benchmarks/tpu/study.sh 540 lstm-seq10 \
#       "ablations base --task CartpoleBalance/masked --network lstm_quickstart \
#        --seeds 0,1,2,3,4 --steps 1044480 --stagger --set sequence_length=10"
# SECONDS is the time the studies share (each gets what the earlier ones left).
set -uo pipefail
budget=$1; shift
start=$SECONDS
site=/tmp/site
export PIP_CONFIG_FILE=/dev/null PYTHONUNBUFFERED=1
python3 -m pip install --isolated -q --only-binary=:all: --index-url file:///opt/pypi/simple \
    --target "$site" flax optax orbax-checkpoint ml-collections etils tqdm lxml \
    trimesh scipy pillow toolz 2>&1 | tail -3
python3 -m pip install --isolated -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$site" .whl-tpu/*.whl 2>&1 | tail -3
export PYTHONPATH="${PYTHONPATH:-}:$site"
export JAX_COMPILATION_CACHE_DIR=/tmp/jaxcache
python3 -c "import jax, flax, mujoco_playground, nnx_ppo.algorithms.ppo; print(jax.devices())" \
    || exit 3
echo "set-up: $((SECONDS - start)) s"
while [ $# -ge 2 ]; do
    name=$1; args=$2; shift 2
    left=$((budget - (SECONDS - start)))
    echo "== $name ($left s left): $args"
    # shellcheck disable=SC2086  # the study's arguments are words on purpose
    timeout "$left" python3 -m nnx_ppo_benchmarks.studies.$args --out "$OUT/$name.jsonl" \
        2>&1 | tee "$OUT/$name.log" | tail -20
done
