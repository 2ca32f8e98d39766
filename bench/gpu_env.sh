#!/bin/bash
# What every GPU call script (bench/gpu_call.sh, bench/gpu_table.sh) does the same way: the
# wheels the GPU image lacks (it has JAX, no keras), downloaded here and installed there.
# Sourced, not run: `source "$(dirname "$0")/gpu_env.sh"`.

wheels_download() {  # wheels_download DIR: keras, keras-hub and their pure dependencies
  ${PY:-python3} -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$1" \
    keras==3.15.1 keras-hub==0.32.0 optree==0.20.0 namex==0.1.0
}

python_env() {  # python_env WHEEL_DIR REPO: PY and PYTHONPATH for the commands; a CPU
  # rehearsal (SMOKE=1) keeps its own PY and installs nothing
  if [ -z "${SMOKE:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$1"/*.whl || return 1
    export PYTHONPATH=/tmp/site:$2; PY=python3
  else
    export PYTHONPATH=$2; PY=${PY:-python3}
  fi
  # The compilation cache's path is part of JAX's cache key: a cache carried from one call to
  # the next is read only at the same path (/tmp/jc; a CPU rehearsal may choose its own).
  export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jc} PY
}
