#!/usr/bin/env bash
# Download, into .whl-tpu/ (git-ignored), the wheels a TPU
# v5e machine of the `device` tool needs beside its own JAX and its own package index
# (which holds flax, optax, orbax-checkpoint, mujoco, scipy, ml-collections, absl-py,
# etils, tqdm, pillow, lxml, trimesh, matplotlib, tensorboardx): the simulators and the
# pieces the index lacks. Run from the repository root on a machine with pip and the
# package registry; see README.md beside this file.
set -euo pipefail
mkdir -p .whl-tpu
download() {
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 --platform any -d .whl-tpu "$@"
}
download brax==0.14.2 mujoco==4.0.1 mujoco-core==4.0.1 glfw==2.11.0 mujoco-mjx==3.17.0 playground==0.2.0 mediapy==1.2.7 jaxopt==0.8.5 \
    dm-pix==0.4.5 chex==0.1.92 humanize==4.17.0 optuna==5.1.0 tensorboardx==2.6.5
# The project's own distributions, as wheels built from the working tree.
uv build --quiet --all-packages --wheel --out-dir .whl-tpu
ls .whl-tpu
