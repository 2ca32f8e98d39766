#!/bin/bash
# What every GPU call script (bench/gpu_call.sh, bench/gpu_table.sh, bench/gpu_pretrain_call.sh)
# does the same way: the wheels the GPU image lacks (it has JAX, no keras), downloaded here and
# installed there; weights as float16 for the journey; the job folders kept out of git; the
# call's limit (CALL_S), the check that JAX sees the GPU, results packed as they come.
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

# The call's own limit: CALL_S, the seconds the device gives the command (the `run` tool's
# timeout_s, default 600). Each script stops its work early enough to pack within it.
CALL_S=${CALL_S:-600}

device_env() {  # device_env FILE: the GPU, Python and package versions into FILE (and the last
  # two lines printed); outside a CPU rehearsal (SMOKE=1), a JAX that sees no GPU stops the
  # call, which would otherwise spend its minutes at a CPU's speed
  nvidia-smi > "$1" 2>&1
  $PY - >> "$1" 2>&1 <<'PYEOF'
import os, sys
import jax, keras, keras_hub
print(sys.version)
print("jax", jax.__version__, "keras", keras.__version__, "keras_hub", keras_hub.__version__, jax.devices())
if jax.default_backend() != "gpu" and not os.environ.get("SMOKE"):
    print(f"error: JAX sees no GPU (backend {jax.default_backend()}): stopping the call")
    sys.exit(3)
PYEOF
  local rc=$?
  tail -n 2 "$1"
  return $rc
}

keep_packing() {  # keep_packing STOP SECONDS COMMAND...: COMMAND every SECONDS in the
  # background until the file STOP exists, so that what has finished is in $OUT as it comes
  # (a call cut off at its limit still brings it back); stop_packing STOP ends it
  rm -f "$1"
  (
    while true; do  # until STOP, or until the script that started it is gone ($$: its pid)
      for _ in $(seq "$2"); do [ -e "$1" ] || ! kill -0 $$ 2>/dev/null && exit 0; sleep 1; done
      "${@:3}"
    done
  ) &
  PACKER=$!
}

stop_packing() { touch "$1"; wait "$PACKER" 2>/dev/null; }

pack_files() {  # pack_files DIR ARCHIVE: the files whose paths (relative to DIR) come on stdin,
  # as an xz archive, written under a name of its own and renamed whole (never half an archive;
  # a packing cut off leaves a *.tmp, which the scripts' final packing removes). A log that
  # grows while it is read, or a checkpoint removed meanwhile, is packed as read or left out.
  (
    cd "$1" || exit 1
    tmp=$2.$BASHPID.tmp
    XZ_OPT=-T0 tar --warning=no-file-changed --warning=no-file-removed --ignore-failed-read \
      -cJf "$tmp" -T -
    if [ $? -le 1 ]; then mv "$tmp" "$2"; else rm -f "$tmp"; exit 1; fi
  )
}

out_size_check() {  # the call's files back: at most 8 files, 64 MiB together (a warning);
  # what a packing cut off left removed
  local n bytes
  rm -f "$OUT"/*.tmp
  n=$(find "$OUT" -type f | wc -l); bytes=$(du -cb "$OUT" | tail -n 1 | cut -f1)
  if [ "$n" -gt 8 ] || [ "$bytes" -gt $(( 64 << 20 )) ]; then
    echo "warning: \$OUT holds $n files, $(( bytes >> 20 )) MiB: over what comes back (8, 64 MiB)"
  fi
}

tree_bytes() {  # the bytes of the working tree that travel with every call (tracked files and
  # untracked ones git does not ignore), assets/models left out (moved away for a call)
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard | grep -zv '^assets/models/' |
    xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
}
