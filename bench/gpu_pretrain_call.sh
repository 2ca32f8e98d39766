#!/bin/bash
# The default models' pre-training on one lent GPU (issue: default models a user trusts): the
# fill-mask model, all-MiniLM-L6-v2 pre-trained further on the whole corpus (MODEL=mlm), or the
# ELECTRA discriminator from scratch (MODEL=electra). The corpus (48 MB of WordPiece ids) and
# MiniLM's float16 weights (45 MB) do not fit together in the 64 MiB one command carries, so the
# job is two commands on one warm machine (/tmp is kept between them): `data` carries the
# corpus and makes the records; `train` carries the start weights, trains for BUDGET seconds of
# steps (the steps from a 200-step calibration run of the same command), scores the model and
# brings its weights back as float16 (ELECTRA's held-out AUC is scored here after `unpack`:
# `python -m model.evaluate --task rtd` on a Keras model needs TensorFlow).
#
#   bash bench/gpu_pretrain_call.sh prepare-data            # here: .job-data/ (wheels, ids), ~53 MB
#   bash bench/gpu_pretrain_call.sh prepare-init MODEL_DIR  # here: .job-init/ (wheels, float16
#                                                           # weights; MODEL=mlm only), ~50 MB
#   mv assets/models /somewhere                             # a command carries 64 MiB at most
#   device run 1:  MODEL=mlm bash bench/gpu_pretrain_call.sh data          carry [".job-data"]
#   device run 2:  OUT=$OUT MODEL=mlm bash bench/gpu_pretrain_call.sh train  carry [".job-init"]
#   back here:     bash bench/gpu_pretrain_call.sh unpack FILES_AT runs/defaults-gpu
#   SMOKE=1 PY=/tmp/jaxenv/bin/python ... data / train     # the same on a CPU, a few steps
#
# The machine goes back 30 s after a command ends: run 2 must follow run 1 at once.
# MODEL=electra needs no start weights: `data` then `train` in one command (carry
# [".job-data"]): `export CALL_T0=$(date +%s); MODEL=electra bash ... data && OUT=$OUT
# MODEL=electra bash ... train`, so that `train` counts its limit from the call's start.
# Settings: CALL_S (the call's timeout_s, default 600), LIMIT (s after which `train` stops
# whatever runs and packs, default CALL_S - 60), BUDGET (s of training steps, default what is
# left of LIMIT when `train` starts less 210 for mlm, 240 for electra: 330 and 300 in a 600 s
# call of `train` alone), W (the work folder, default /tmp/wp-MODEL).
# Comes back: results.tar.xz (the run's summary, held-out curve, evaluation, logs),
# model.f16.h5.partNN (the model's float16 weights, 15 MiB parts; `unpack` restores float32).
# MLM's recipe is the shipped one's (model/recipes/defaults.py PRETRAIN_FLAGS: minilm-l6, batch
# 256, 20 % masked, 26 predictions, learning rate 5e-4) on every shard, on the device path
# (dropout 0); ELECTRA's is the beyond-bert table's at the gpu scale (electra-small, batch 256).
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO/bench/gpu_env.sh"
MODEL=${MODEL:-mlm}
W=${W:-/tmp/wp-$MODEL}

prepare_data() {
  local job=$REPO/.job-data py=${PY:-python3} data=${DATA:-$REPO/../shared/data}
  git_exclude "$REPO" "/.job-data/"
  rm -rf "$job" && mkdir -p "$job/whl" "$job/corpus" || return 1
  PY=$py wheels_download "$job/whl" || return 1
  local vocab=${VOCAB:-$REPO/assets/models/mlm/vocab.txt}  # MiniLM's: bert-base-uncased's
  [ -n "${SMOKE:-}" ] && local wiki="$data/pretrain/enwiki-2015/AA/wiki_00.gz" books="$data/pretrain/gutenberg/books/000*.txt.gz"
  (cd "$REPO" && $py -m model.data --write-ids --vocab "$vocab" --output "$job/corpus/train.ids.npz.xz" \
    --input "${wiki:-$data/pretrain/enwiki-2015/AA/*.gz}" --input "${books:-$data/pretrain/gutenberg/books/*.txt.gz}" &&
   $py -m model.data --write-ids --vocab "$vocab" --output "$job/corpus/valid.ids.npz.xz" \
    --input "$data/wikitext-2-raw/wiki.valid.raw") || return 1
  cp "$vocab" "$job/vocab.txt" && xz -T2 -6 -c "$data/wikitext-2-raw/wiki.valid.raw" > "$job/wiki.valid.raw.xz"
  du -sh "$job"
}

prepare_init() {
  local job=$REPO/.job-init model=$1
  git_exclude "$REPO" "/.job-init/"
  rm -rf "$job" && mkdir -p "$job/whl" "$job/init" || return 1
  PY=${PY:-python3} wheels_download "$job/whl" || return 1
  cp "$model/config.json" "$model/vocab.txt" "$job/init/" &&
    fp16 down "$model/model.weights.h5" "$job/init/model.weights.f16.h5" || return 1
  du -sh "$job"
}

inputs() { [ "$MODEL" = electra ] && echo segment-pairs || echo sentence-pairs; }

data() {  # the records of MODEL's input format, training and held-out, under $W
  T0=${CALL_T0:-$(date +%s)}
  local job=$REPO/.job-data
  python_env "$job/whl" "$REPO" || exit 1
  mkdir -p "$W" && cp "$job/vocab.txt" "$W/" && xz -dc "$job/wiki.valid.raw.xz" > "$W/wiki.valid.raw" || exit 1
  local split
  for split in train valid; do
    $PY -m model.data --inputs "$(inputs)" --vocab "$W/vocab.txt" --output "$W/$split-$(inputs)" \
      --input "$job/corpus/$split.ids.npz.xz" --seq-len 128 --num-shards 16 || exit 1
  done
  echo "records of $(inputs) in $W after $(( $(date +%s) - T0 )) s"
}

flags() {  # MODEL's pre-training flags, less --steps and --output
  # 7 x 256 held-out sequences: WikiText-2 valid makes about 2,200, so none is read twice
  local common=(--data "$W/train-$(inputs)" --eval-data "$W/valid-$(inputs)" --eval-steps 7
    --batch-size 256 --learning-rate 5e-4 --device-data --mixed-precision mixed_bfloat16
    --steps-per-call 20 --keep-checkpoints 100)
  [ -n "${SMOKE:-}" ] && common+=(--batch-size 8 --steps-per-call 2)
  if [ "$MODEL" = electra ]; then
    local size=electra-small
    [ -n "${SMOKE:-}" ] && size=tiny
    echo "${common[@]}" --objective electra --config "$size" --seed 1
  else
    echo "${common[@]}" --objective bert --config minilm-l6 --init "$W/init" --mask-rate 0.2 \
      --max-predictions 26 --seed 12345
  fi
}

train() {
  T0=${CALL_T0:-$(date +%s)}; el() { echo $(( $(date +%s) - T0 )); }
  local limit=${LIMIT:-$(( CALL_S - 60 ))}
  local budget=${BUDGET:-$(( limit - $(el) - $([ "$MODEL" = electra ] && echo 240 || echo 210) ))}
  [ -n "${SMOKE:-}" ] && budget=${BUDGET:-5}
  local job=$REPO/.job-init
  [ "$MODEL" = electra ] && job=$REPO/.job-data
  python_env "$job/whl" "$REPO" || exit 1
  [ -d "$W/train-$(inputs)" ] || { echo "no records in $W: run \`data\` first on this machine" >&2; exit 1; }
  mkdir -p "$OUT" "$W/logs"
  device_env "$W/logs/env.txt" || { cp "$W/logs/env.txt" "$OUT/"; exit 1; }
  if [ "$MODEL" = mlm ]; then
    mkdir -p "$W/init" && cp "$job/init/config.json" "$job/init/vocab.txt" "$W/init/" &&
      fp16 up "$job/init/model.weights.f16.h5" "$W/init/model.weights.h5" || exit 1
  fi
  local run=$W/run calibration=$W/calibration steps
  # The calibration: 200 steps of the same command (compiled once: the run loads the program
  # from the persistent cache), timed after its first call, its save not counted.
  local n=200
  [ -n "${SMOKE:-}" ] && n=20
  timeout $(( limit - $(el) )) $PY -m model.train pretrain $(flags) --output "$calibration" \
    --steps $n --checkpoint-every $n > "$W/logs/calibration.log" 2>&1 || { tail -n 20 "$W/logs/calibration.log"; exit 1; }
  steps=$($PY - "$calibration/train_summary.json" "$budget" <<'EOF'
import json, math, sys
s = json.load(open(sys.argv[1]))
per_step = s["median_step_seconds"]  # the median call's step (model/training/pretrain.py)
# whole 20-step calls, 6 checkpoint intervals of them (the held-out curve's six points)
print(120 * math.ceil(float(sys.argv[2]) / per_step / 120))
EOF
)
  echo "calibrated at $(el) s: $steps steps for $budget s of steps"
  timeout -s INT $(( limit - $(el) )) $PY -m model.train pretrain $(flags) --output "$run" \
    --steps "$steps" --checkpoint-every $(( steps / 6 )) --warmup-steps $(( steps * 6 / 100 )) \
    > "$W/logs/train.log" 2>&1
  local rc=$?
  echo "trained to $(el) s (exit $rc)"; grep "tokens/s" "$W/logs/train.log" | tail -n 1
  [ -f "$run/model.weights.h5" ] || { echo "no model written"; pack; exit 1; }
  # ELECTRA's held-out AUC is scored back here: corrupting the text with a Keras model's own
  # generator goes through the export's serving function, which needs TensorFlow.
  if [ "$MODEL" = mlm ]; then
    $PY -m model.evaluate --task mlm --model "$run" --data "$W/wiki.valid.raw" > "$W/logs/evaluate.log" 2>&1
    tail -n 30 "$W/logs/evaluate.log"
  fi
  pack
}

pack() {
  cd "$W" || return 1
  [ -f run/model.weights.h5 ] && fp16 down run/model.weights.h5 model.f16.h5 &&
    split -b 15M -d model.f16.h5 "$OUT/model.f16.h5.part"
  { find run calibration -maxdepth 1 -type f ! -name '*.h5'; find logs -type f; } |
    pack_files "$W" "$OUT/results.tar.xz"
  echo "packed at $(el) s"; ls -la "$OUT"; out_size_check
}

unpack() {  # unpack FILES DEST: the run's directory back here as DEST/run, float32 weights
  local files=$1 dest=$2
  mkdir -p "$dest" && tar -C "$dest" -xJf "$files/results.tar.xz" || return 1
  cat "$files"/model.f16.h5.part* > "$dest/model.f16.h5" &&
    fp16 up "$dest/model.f16.h5" "$dest/run/model.weights.h5" &&
    rm "$dest/model.f16.h5" && echo "$dest/run: a model directory"
}

case "${1:-}" in
  prepare-data) prepare_data ;;
  prepare-init) prepare_init "${2:?the model directory to start from (all-MiniLM-L6-v2 converted)}" ;;
  data) data ;;
  train) train ;;
  unpack) unpack "${2:?FILES: where the call returned its files}" "${3:?a destination folder}" ;;
  *) echo "usage: $0 prepare-data | prepare-init MODEL_DIR | data | train | unpack FILES DEST" >&2; exit 2 ;;
esac
