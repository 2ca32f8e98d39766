#!/bin/bash
# What every GPU call script (bench/gpu_call.sh, bench/gpu_table.sh, bench/gpu_pretrain_call.sh)
# does the same way: the wheels the GPU image lacks (it has JAX, no keras), downloaded here and
# installed there; weights as float16 for the journey; the job folders kept out of git.
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

git_exclude() {  # git_exclude REPO PATTERN: a job folder that git never shows (this clone only)
  grep -qx "$2" "$1/.git/info/exclude" 2>/dev/null || echo "$2" >> "$1/.git/info/exclude"
}

fp16() {  # fp16 down|up SRC DST: every float32 dataset of an .h5 to float16 (down) or back;
  # "down" leaves out the optimizer's variables (a checkpoint's model weights alone)
  ${PY:-python3} - "$@" <<'EOF'
import sys
import h5py
import numpy as np
direction, src, dst = sys.argv[1:4]
to, frm = (np.float16, np.float32) if direction == "down" else (np.float32, np.float16)
with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
    b.attrs.update(dict(a.attrs))
    def copy(name, obj):
        if direction == "down" and name.startswith("optimizer"):
            return
        if isinstance(obj, h5py.Group):
            b.require_group(name).attrs.update(dict(obj.attrs))
            return
        data = obj[()]
        if getattr(data, "dtype", None) == frm:
            data = data.astype(to)
        b.create_dataset(name, data=data).attrs.update(dict(obj.attrs))
    a.visititems(copy)
EOF
}
