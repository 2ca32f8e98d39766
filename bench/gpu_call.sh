#!/bin/bash
# One GPU call, prepared here and run there: bench/gpu.py's pre-training rows, then the SQuAD
# fine-tunings of the default QA model side by side on the device path, and beside them the
# default NER model's recipe on CoNLL-2003 with and without --document-context (seeds 1-3
# each), each result written to $OUT as it comes (a call cut off at its limit still returns
# what is there).
#
#   bash bench/gpu_call.sh prepare MINILM_MODEL_DIR   # here, the project's environment active:
#                                                     # .job/ (wheels, float16 start weights,
#                                                     # SQuAD as xz), ~55 MB
#   mv assets/models /somewhere                       # the call carries 64 MiB at most
#   device run:  OUT=$OUT bash bench/gpu_call.sh run  with carry [".job"]
#   SMOKE=1 OUT=/tmp/out PY=/tmp/jaxenv/bin/python bash bench/gpu_call.sh run   # CPU rehearsal
#   bash bench/gpu_call.sh unpack FILES_AT runs/defaults-gpu  # back here: every run's files,
#                                                     # WEIGHTS' run (r_v2all...) a model directory
#
# MINILM_MODEL_DIR is all-MiniLM-L6-v2 as our model directory (python -m model.convert).
# Settings (environment): CALL_S (the call's timeout_s, default 600), LIMIT (s, default
# CALL_S - 45: the QA and NER runs are stopped then and the results packed), PACK_EVERY (s
# between two packings of the finished runs' small files, default 60), BENCH_S (s the bench may take, default 150), BENCH_ARGS, E2 / E1 / EN
# (epochs of the full QA runs, default 2 / of the per-kind runs, default 1 / of the NER runs,
# default 4), WEIGHTS (whose weights come back: v2, the default, the better v2.0 run's, the
# default QA model; or v1: a call brings back 64 MiB at most, one model's float16 weights).
# Comes back: gpu.jsonl, results.tar.xz (every log, metrics, predictions and null odds, no
# n-best lists, and gpu.md if the bench finished), weights.tar.partNN (WEIGHTS' model as
# float16, e.g. v2all.f16.h5, in 15 MiB parts: `unpack` below restores float32). A v2.0 run (v2real; REAL= leaves it out) whose training set also
# holds people's questions: dev-v2.0's half A is split again, its first half (A1: 9 articles,
# 1,462 answerable and 1,458 unanswerable questions, REAL_REPEAT times, default 4) trains, its
# second (A2) tunes the null threshold of both v2.0 runs and picks which one's weights come
# back (v2real.f16.h5 in place of v2all's when it scores higher there); half B is reported.
# PER_KIND=1 adds the per-kind SQuAD v2.0 runs
# (other-paragraph alone, and with answer-removed), measured once on 2026-11-26; E1 < E2 makes
# them cheaper, not comparable with the full run's own epoch E1 (another schedule).
# Measured with it: bench/results/2026-11-26-nvidia-h200.md, docs/finetuning.md.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
JOB=$REPO/.job
source "$REPO/bench/gpu_env.sh"

prepare() {
  local minilm=$1 squad=$REPO/../shared/data/squad
  git_exclude "$REPO" "/.job/"
  rm -rf "$JOB" && mkdir -p "$JOB/whl" "$JOB/minilm" "$JOB/data"
  local py=${PY:-python3}
  PY=$py wheels_download "$JOB/whl" || return 1
  cp "$minilm/config.json" "$minilm/vocab.txt" "$JOB/minilm/"
  fp16 down "$minilm/model.weights.h5" "$JOB/minilm/model.weights.f16.h5" || return 1
  cp "$squad/train-v1.1.reconstructed.json" "$squad/dev-v1.1.json" "$JOB/data/"
  mkdir -p "$JOB/data/conll2003" &&
    cp "$REPO/../shared/data/conll2003/"{train,valid}.txt "$JOB/data/conll2003/" || return 1
  xz -T2 -6 -f "$JOB"/data/conll2003/*.txt
  (cd "$REPO" && $py -m model.tasks.squad split-dev --input "$squad/dev-v2.0.reconstructed.json" \
    --tune "$JOB/data/dev-v2.0.A.json" --report "$JOB/data/dev-v2.0.B.json" &&
    $py -m model.tasks.squad split-dev --input "$JOB/data/dev-v2.0.A.json" \
    --tune "$JOB/data/dev-v2.0.A1.json" --report "$JOB/data/dev-v2.0.A2.json") || return 1
  xz -T2 -6 -f "$JOB"/data/*.json
  du -sh "$JOB"
}

run() {
  T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
  LIMIT=${LIMIT:-$(( CALL_S - 45 ))}
  python_env "$JOB/whl" "$REPO" || exit 1
  W=${W:-/tmp/w}; rm -rf "$W"; mkdir -p "$W/logs" "$OUT"
  device_env "$W/logs/env.txt" || { cp "$W/logs/env.txt" "$OUT/"; exit 1; }
  squad_data > "$W/logs/prep.log" 2>&1 &  # the CPU's work, while the bench has the GPU
  local prep=$!
  BENCH="$PY $REPO/bench/gpu.py --json $OUT/gpu.jsonl --results $W/logs/gpu.md"
  [ -n "${SMOKE:-}" ] && BENCH="$BENCH --quick"
  echo "bench at $(el) s"
  timeout "${BENCH_S:-150}" $BENCH ${BENCH_ARGS:---dropouts 0 --presets mini electra-small base small --sections pretrain} > "$W/logs/bench.log" 2>&1
  echo "bench done at $(el) s"; wait $prep; tail -n 1 "$W/logs/prep.log"
  keep_packing "$W/.packed-last" "${PACK_EVERY:-60}" pack_results
  squad_runs
  stop_packing "$W/.packed-last"
  pack
}

squad_data() {  # SQuAD v1.1 and three v2.0 training sets (one per mix of negatives) under $W
  cd "$W" || return 1
  for f in "$JOB"/data/*.xz; do xz -dc "$f" > "$(basename "$f" .xz)"; done
  mkdir -p conll2003 && for f in "$JOB"/data/conll2003/*.xz; do xz -dc "$f" > "conll2003/$(basename "$f" .xz)"; done
  mkdir -p minilm v1 v2all v2op v2opar v2real
  local mixes=v2all:other-paragraph,answer-removed,entity-swap
  [ -n "${PER_KIND:-}" ] && mixes="$mixes v2op:other-paragraph v2opar:other-paragraph,answer-removed"
  cp "$JOB/minilm/config.json" "$JOB/minilm/vocab.txt" minilm/
  fp16 up "$JOB/minilm/model.weights.f16.h5" minilm/model.weights.h5
  mv train-v1.1.reconstructed.json v1/train-v1.1.json; mv dev-v1.1.json v1/
  for r in $mixes; do
    $PY -m model.tasks.squad make-v2-train --seed 0 --negatives "${r#*:}" \
      --input v1/train-v1.1.json --output "${r%%:*}/train-v2.0.json" &
  done
  local tune=dev-v2.0.A.json
  if [ -n "${REAL-1}" ]; then  # half A's first half trains, its second tunes (both v2 runs)
    tune=dev-v2.0.A2.json
    $PY -m model.tasks.squad make-v2-train --seed 0 --negatives other-paragraph,answer-removed,entity-swap \
      --real dev-v2.0.A1.json --real-repeat "${REAL_REPEAT:-4}" --dev $tune \
      --input v1/train-v1.1.json --output v2real/train-v2.0.json &
  fi
  wait
  for d in v2all v2op v2opar v2real; do cp $tune $d/dev-v2.0.json; done  # tuned there
  [ -n "${PER_KIND:-}" ] || rm -rf v2op v2opar
  [ -n "${REAL-1}" ] || rm -rf v2real
  if [ -n "${SMOKE:-}" ]; then  # one article of each file, CoNLL-2003's first documents
    for f in v1/*.json v2*/*.json; do $PY -c "
import json, sys; j = json.load(open(sys.argv[1])); j['data'] = j['data'][:1]
json.dump(j, open(sys.argv[1], 'w'))" "$f"; done
    for f in conll2003/*.txt; do head -n 400 "$f" > "$f.head" && mv "$f.head" "$f"; done
  fi
  echo "prep done at $(el) s"
}

squad_runs() {  # side by side on the one GPU until LIMIT; each saves its best epoch as it goes
  local pids=() p ft="$PY -m model.train finetune --init $W/minilm --device-data --mixed-precision mixed_bfloat16 --learning-rate 1e-4 --seed 12345"
  [ -n "${SMOKE:-}" ] && ft="$ft --seq-len 128 --steps-per-call 5 --max-train-examples 96"
  # the three QA processes (five with PER_KIND) and the NER two, below, within 0.9 of the GPU
  export XLA_PYTHON_CLIENT_MEM_FRACTION=$([ -n "${PER_KIND:-}" ] && echo .15 || echo .16)
  $ft --task squad2 --data "$W/v2all" --output "$W/r_v2all" --epochs "${E2:-2}" --batch-size 48 > "$W/logs/v2all.log" 2>&1 & pids+=($!)
  $ft --task squad1 --data "$W/v1" --output "$W/r_v1" --epochs "${E2:-2}" --batch-size 32 > "$W/logs/v1.log" 2>&1 & pids+=($!)
  if [ -n "${REAL-1}" ]; then  # its own job (an `a && b &` list would be a subshell's pid)
    $ft --task squad2 --data "$W/v2real" --output "$W/r_v2real" --epochs "${E2:-2}" --batch-size 48 > "$W/logs/v2real.log" 2>&1 & pids+=($!)
  fi
  if [ -n "${PER_KIND:-}" ]; then
    $ft --task squad2 --data "$W/v2op" --output "$W/r_v2op" --epochs "${E1:-1}" --batch-size 48 > "$W/logs/v2op.log" 2>&1 & pids+=($!)
    $ft --task squad2 --data "$W/v2opar" --output "$W/r_v2opar" --epochs "${E1:-1}" --batch-size 48 > "$W/logs/v2opar.log" 2>&1 & pids+=($!)
  fi
  # The NER default's recipe (model/recipes/defaults.py, less --group-by-length, which the
  # device path's fixed shapes do not use), the paper's document context against the sentence.
  export XLA_PYTHON_CLIENT_MEM_FRACTION=.07  # three seeds of 32 x 128: less than one 48 x 384
  local ner="$PY -m model.train finetune --task conll2003 --data $W/conll2003 --init $W/minilm --device-data --seeds 1,2,3 --learning-rate 8e-5 --epochs ${EN:-4}"
  [ -n "${SMOKE:-}" ] && ner="$ner --seq-len 64 --steps-per-call 5 --max-train-examples 16"
  $ner --output "$W/r_ner-sentence-seed{seed}" > "$W/logs/ner-sentence.log" 2>&1 & pids+=($!)
  $ner --document-context --output "$W/r_ner-document-seed{seed}" > "$W/logs/ner-document.log" 2>&1 & pids+=($!)
  echo "QA and NER runs started at $(el) s"
  # the runs still going (by their own pids: the packer runs beside them)
  running() { for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && echo "$p"; done; }
  while [ -n "$(running)" ] && [ "$(el)" -lt "$LIMIT" ]; do sleep 2; done
  # A SIGTERM ends a run at its next batch end (model/training/interrupts.py): one still
  # scoring its dev set after 10 s is killed, so the packing below keeps its time.
  for p in $(running); do echo "stopping $p at $(el) s"; kill "$p"; done
  for _ in 1 2 3 4 5; do [ -n "$(running)" ] && sleep 2; done
  for p in $(running); do echo "killing $p at $(el) s"; kill -9 "$p"; done
  wait "${pids[@]}" 2>/dev/null
  unset XLA_PYTHON_CLIENT_MEM_FRACTION
  echo "QA done at $(el) s"
}

pack_results() {  # every run's small files so far (no weights, no n-best lists) and the logs
  (cd "$W" && for r in r_*; do
    find "$r" -maxdepth 1 -type f ! -name '*.h5' ! -name nbest_predictions.json
    find "$r/logs" "$r/checkpoints" -name '*.csv' -o -name state.json 2>/dev/null
  done; find logs -type f) | pack_files "$W" "$OUT/results.tar.xz" && echo "results packed at $(el) s"
}

pack() {  # WEIGHTS' model as float16 parts, the small files in one archive
  cd "$W" || return 1
  local r weights packed=() back=v1
  [ "${WEIGHTS:-v2}" = v1 ] || back=$(better_v2)
  for r in $back; do  # the best epoch's weights, or the last checkpoint's of a run cut off
    weights=r_$r/model.weights.h5
    [ -f "$weights" ] || weights=$(ls -d r_$r/checkpoints/ckpt-*/model.weights.h5 2>/dev/null | tail -n 1)
    [ -n "$weights" ] || continue
    echo "packing $weights"
    fp16 down "$weights" $r.f16.h5 && packed+=("$r.f16.h5")
  done
  [ ${#packed[@]} -gt 0 ] && tar -cf - "${packed[@]}" | split -b 15M -d - "$OUT/weights.tar.part"
  pack_results
  echo "packed at $(el) s"; ls -la "$OUT"; out_size_check
  for f in logs/*.log; do echo "== $f"; grep -v "Warning\|^\s*$" "$f" | tail -n 4; done
}

better_v2() {  # v2all, or (REAL, the default) whichever of v2all and v2real scored the higher best_f1
  # on their shared tuning file (half A2; the figure to report is half B's, not read here)
  [ -d r_v2real ] || { echo v2all; return; }
  $PY - <<'PYEOF'
import json
def f1(run):
    try:
        return json.load(open(f"r_{run}/metrics.json"))["dev"]["best_f1"]
    except (OSError, KeyError, ValueError):
        return float("-inf")
print(max(("v2all", "v2real"), key=f1))
PYEOF
}

unpack() {  # unpack FILES DEST: a call's files back here as model directories DEST/r_v1, ...
  local files=$1 dest=$2 r
  mkdir -p "$dest" && tar -C "$dest" -xJf "$files/results.tar.xz" || return 1
  ls "$files"/weights.tar.part* > /dev/null 2>&1 || { echo "no weights came back"; return 0; }
  cat "$files"/weights.tar.part* | tar -C "$dest" -xf - || return 1
  for r in v1 v2all v2real; do
    [ -f "$dest/$r.f16.h5" ] || continue
    fp16 up "$dest/$r.f16.h5" "$dest/r_$r/model.weights.h5" && rm "$dest/$r.f16.h5" || return 1
    if [ -f "$dest/r_$r/config.json" ]; then
      echo "$dest/r_$r: a model directory (float32 weights from the float16 that travelled)"
    else  # stopped before its first epoch ended: a checkpoint's weights, no model directory
      echo "$dest/r_$r: weights only (the run was stopped before it wrote its config.json)"
    fi
  done
}

case "${1:-}" in
  prepare) prepare "${2:?the MiniLM model directory}" ;;
  run) run ;;
  unpack) unpack "${2:?FILES: where the call returned its files}" "${3:?a destination folder}" ;;
  fp16) shift; fp16 "$@" ;;
  *) echo "usage: $0 prepare MINILM_DIR | run | unpack FILES DEST | fp16 down|up SRC DST" >&2; exit 2 ;;
esac
