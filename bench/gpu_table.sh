#!/bin/bash
# One GPU call that runs a table of the papers (python -m model.experiments) at the `gpu` scale:
# prepared here, run there from the prepared input alone, TensorFlow-free, each finished
# command's output kept in $OUT as it comes (a call cut off at its limit still returns them).
#
#   bash bench/gpu_table.sh prepare TABLE [TABLE ...]  # here, the project's environment active:
#                                                      # .job/ (wheels, the table's input), ~60 MB
#   mv assets/models /somewhere                        # the call carries 64 MiB at most
#   device run:  OUT=$OUT TABLE=pretraining-tasks bash bench/gpu_table.sh run   with carry [".job"]
#   SMOKE=1 OUT=/tmp/out PY=/tmp/jaxenv/bin/python TABLE=... bash bench/gpu_table.sh run  # CPU rehearsal
#
# Settings (environment): TABLE (or several, comma-separated: run one after another in one WORK,
# so that a pre-training serves each, as its weights do not come back), RUNS (a part of the
# table, of each table: `--runs`, the pre-training runs by name as `--dry-run` prints them),
# JOBS (fine-tunings at once, `--jobs`, default 4; each process then takes 18 % of the GPU's
# memory), CALL_S (the call's timeout_s, default 600), LIMIT (s after which no command starts,
# default CALL_S - 100; the report is written from what finished), HARD (s at which a command
# still running is stopped, default CALL_S - 35, so that the results are packed within the
# call), PACK_EVERY (s between two packings of what has finished into results.tar.xz, default
# 60). SMOKE=1 rehearses the same call at the smoke scale
# (`prepare` then writes the smoke input). DONE=WORK (prepare): the results earlier calls
# brought back, merged into WORK, travel too, and the call skips those commands (a
# pre-training whose row is not complete runs again: weights do not come back). JOB (a folder
# for .job's contents), W (the work folder, default /tmp/w) and JOB_INPUT (where `run` unpacks
# the input, default /tmp/input): a rehearsal beside a prepared .job (tests/test_jax_only.py).
# JAXCACHE=FILE
# (prepare): an earlier call's jaxcache.tar.xz, JAX's persistent compilation cache, so that the
# call loads the programs that one compiled (40-45 s each) instead of compiling them again
# (JAX's cache key includes the cache's own path and the GPU's model: every call keeps it at
# /tmp/jc, as gpu_env.sh sets, and names the device kind the cache was made on);
# left out, with a note, where .job would pass CAP MiB (default: what the 64 MiB a call carries
# leave beside the tracked files, assets/models moved out, less 1 MiB). Comes back: TABLE.md (the
# report), run.log, results.tar.xz (every metrics.json, dev_units.json, train_summary.json, held-out score,
# timings.json, the plot), jaxcache.tar.xz (the compilation cache after the call, where it
# fits in 16 MiB). A table run in parts: `merge` each call's results.tar.xz into one WORK here, then
# `python -m model.experiments TABLE --scale gpu --work WORK --data INPUT --report`.
# Measured with it: docs/experiments.md.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
JOB=${JOB:-$REPO/.job}
source "$REPO/bench/gpu_env.sh"
SCALE=gpu
[ -n "${SMOKE:-}" ] && SCALE=smoke

prepare() {
  git_exclude "$REPO" "/.job/"
  rm -rf "$JOB" && mkdir -p "$JOB/whl"
  local py=${PY:-python3} data=${DATA:-$REPO/../shared/data} input=$JOB/input
  PY=$py wheels_download "$JOB/whl" || return 1
  for table in "$@"; do
    (cd "$REPO" && $py -m model.experiments "$table" --scale "$SCALE" --data "$data" \
      --prepare "$input") || return 1
  done
  # The corpus is xz already; the rest (tasks, vocabulary) travels as one xz archive.
  mv "$input/corpus" "$JOB/corpus"
  tar -C "$input" -cJf "$JOB/input.tar.xz" . && rm -rf "$input"
  # DONE=WORK: what earlier calls measured (merged into WORK) goes along, so that the call
  # skips those commands (their metrics.json exists) and starts on what is left.
  # Only RUNS' results (all, without RUNS): a call needs no others.
  if [ -n "${DONE:-}" ]; then
    (cd "$DONE" && if [ -n "${RUNS:-}" ]; then
      for r in ${RUNS//,/ }; do
        find "finetune/$r" "features/$r" -name metrics.json -o -name dev_units.json
        find mlm -name "$r.json"
      done
    else
      find finetune features -name metrics.json -o -name dev_units.json; find mlm -name '*.json'
    fi 2>/dev/null | tar -cJf "$JOB/done.tar.xz" -T -) || return 1
    echo "done.tar.xz: $(tar -tJf "$JOB/done.tar.xz" | wc -l) finished results of $DONE"
  fi
  if [ -n "${JAXCACHE:-}" ]; then  # programs an earlier call compiled, where .job has room
    xz -t "$JAXCACHE" || { echo "JAXCACHE=$JAXCACHE: not a whole .tar.xz" >&2; return 1; }
    local bytes=$(( $(du -sb "$JOB" | cut -f1) + $(stat -c %s "$JAXCACHE") ))
    local cap=${CAP:-$(( (63 << 20) - $(tree_bytes) >> 20 ))}
    if [ "$bytes" -le $(( cap << 20 )) ]; then cp "$JAXCACHE" "$JOB/jaxcache.tar.xz"
    else echo "note: $JAXCACHE left out: .job would be $(( bytes >> 20 )) MiB, over CAP=$cap"; fi
  fi
  du -sh "$JOB"/*; du -sh "$JOB"
}

run() {
  : "${TABLE:?TABLE=... (a table, or several comma-separated)}"
  T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
  python_env "$JOB/whl" "$REPO" || exit 1
  W=${W:-/tmp/w}; INPUT=${JOB_INPUT:-/tmp/input}
  mkdir -p "$W" "$OUT" && rm -rf "$INPUT" && mkdir -p "$INPUT"
  tar -C "$INPUT" -xJf "$JOB/input.tar.xz" && cp -r "$JOB/corpus" "$INPUT/corpus" || exit 1
  if [ -f "$JOB/done.tar.xz" ]; then tar -C "$W" -xJf "$JOB/done.tar.xz" || exit 1; fi
  mkdir -p "$JAX_COMPILATION_CACHE_DIR"
  if [ -f "$JOB/jaxcache.tar.xz" ]; then  # an optimisation: without it, programs compile
    tar -C "$JAX_COMPILATION_CACHE_DIR" -xJf "$JOB/jaxcache.tar.xz" ||
      echo "warning: jaxcache.tar.xz not unpacked; compiling afresh"
  fi
  echo "compilation cache: $(ls "$JAX_COMPILATION_CACHE_DIR" | wc -l) entries at the start"
  device_env "$OUT/env.txt" || exit 1
  echo "input ready at $(el) s"
  # LIMIT: no command starts after it; HARD: a command still running then is stopped (the
  # report is then written by `--report` from what finished), so that packing always happens
  # inside the call's own limit.
  # JOBS: fine-tunings at once (`--jobs`), child processes beside the one that pre-trains
  # alone; each JAX process then takes 0.9/(JOBS+1) of the GPU's memory (model.experiments).
  local limit=${LIMIT:-$(( CALL_S - 100 ))} hard=${HARD:-$(( CALL_S - 35 ))} jobs=${JOBS:-4} table rc
  keep_packing "$W/.packed-last" "${PACK_EVERY:-60}" pack_results
  for table in ${TABLE//,/ }; do  # one after another in one WORK: a run serves them all
    rc=late
    if [ "$(el)" -lt "$limit" ]; then
      (cd "$REPO" && timeout -k 20 -s INT $(( hard - $(el) )) $PY -m model.experiments "$table" \
        --scale "$SCALE" --data "$INPUT" --work "$W" --in-process \
        --time-limit $(( limit - $(el) )) --jobs "$jobs" ${RUNS:+--runs "$RUNS"}) >> "$OUT/run.log" 2>&1
      rc=$?
    fi
    echo "$table exit $rc at $(el) s"
    if [ "$rc" != 0 ] && [ "$rc" != 75 ] || [ ! -f "$W/$table.md" ]; then  # 75: --time-limit
      (cd "$REPO" && $PY -m model.experiments "$table" --scale "$SCALE" --data "$INPUT" \
        --work "$W" --report ${RUNS:+--runs "$RUNS"}) >> "$OUT/run.log" 2>&1
    fi
  done
  stop_packing "$W/.packed-last"
  pack
}

pack_results() {  # every small result file so far in one archive, $OUT/results.tar.xz
  (cd "$W" && find . -name metrics.json -o -name dev_units.json -o -name train_summary.json \
    -o -name timings.json -o -name hardware.json -o -name '*.png' -o -path './mlm/*.json' \
    -o -name dataset.json -o -path './logs/*.log') | pack_files "$W" "$OUT/results.tar.xz" &&
    echo "results packed at $(el) s"
}

pack() {  # the results, the report beside them, the compilation cache
  cd "$W" || return 1
  for table in ${TABLE//,/ }; do [ -f "$table.md" ] && cp "$table.md" "$OUT/"; done
  pack_results
  # The compiled programs, for the next call's JAXCACHE (a file comes back up to 16 MiB),
  # written under another name and renamed whole: a call cut off here brings back none.
  XZ_OPT=-T0 tar -C "$JAX_COMPILATION_CACHE_DIR" -cJf "$W/jaxcache.tmp" . &&
    echo "compilation cache: $(ls "$JAX_COMPILATION_CACHE_DIR" | wc -l) entries," \
      "$(du -sh "$JAX_COMPILATION_CACHE_DIR" | cut -f1), $(du -h "$W/jaxcache.tmp" | cut -f1) as xz"
  if [ "$(stat -c %s "$W/jaxcache.tmp" 2>/dev/null || echo 0)" -gt $(( 16 << 20 )) ]; then
    echo "jaxcache.tar.xz over 16 MiB: not brought back"
  elif [ -s "$W/jaxcache.tmp" ]; then
    mv "$W/jaxcache.tmp" "$OUT/jaxcache.tar.xz"
  fi
  rm -f "$W/jaxcache.tmp"
  echo "packed at $(el) s"; ls -la "$OUT"; out_size_check
  grep -E "^\[|^#" "$OUT/run.log" | grep -v "^\[.*\] python" | tail -n 12
}

merge() {  # merge RESULTS.tar.xz WORK: one call's results into WORK, beside other parts'
  local results=$1 work=$2 tmp
  tmp=$(mktemp -d) && tar -C "$tmp" -xJf "$results" || return 1
  mkdir -p "$work"
  ${PY:-python3} - "$tmp" "$work" <<'EOF'
import json, os, shutil, sys
src, dst = sys.argv[1:3]
for root, _, files in os.walk(src):
    for name in files:
        a = os.path.join(root, name)
        b = os.path.join(dst, os.path.relpath(a, src))
        os.makedirs(os.path.dirname(b), exist_ok=True)
        if name in ("timings.json", "hardware.json") and os.path.exists(b):
            old, new = json.load(open(b)), json.load(open(a))
            if name == "hardware.json":
                extra = [m for m in new["machines"] if m not in old["machines"]]
                new = {"machines": old["machines"] + extra}
            else:
                new = {**old, **new}
            json.dump(new, open(b, "w"), indent=2)
        else:
            shutil.copyfile(a, b)
EOF
  rm -rf "$tmp"
  echo "merged into $work; then: python -m model.experiments TABLE --scale gpu --work $work --data INPUT --report"
}

case "${1:-}" in
  prepare) shift; prepare "${@:?a table}" ;;
  run) run ;;
  merge) merge "${2:?RESULTS.tar.xz}" "${3:?WORK}" ;;
  *) echo "usage: $0 prepare TABLE [TABLE ...] | run | merge RESULTS.tar.xz WORK" >&2; exit 2 ;;
esac
