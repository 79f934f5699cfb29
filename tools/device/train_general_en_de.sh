#!/usr/bin/env bash
# One device call: train the general En->De teacher (recipe teacher-en-de-general) on the
# GPU and bring back what a later CPU session needs to distil it. Prepare first, here:
#   tools/device/prepare_general_en_de.sh          # carry/: data set + spm.model
#   run(command="bash tools/device/train_general_en_de.sh", carry=["carry"], timeout_s=600)
# Needs export.train's --device and --batch-tokens (branch h33-gecbase); without them
# train.log says so and the call ends in seconds.
#
# Environment (defaults for the device call):
#   MINUTES=7           training budget (export.train --minutes: per-epoch val included);
#                       start-up, data and the final test decoding come on top, and
#                       TRAIN_LIMIT_S=540 cuts export.train short of a run's 600 s
#   TRAIN_ARGS="--device cuda --batch-tokens 24000"   extra export.train arguments ("" for
#                       the CPU dry run); the recipe's 6000-token batches are sized for the
#                       2-core CPU run that may train the same recipe, a GPU wants more
#   DATA=carry/general-en-de     the built set; RESUME=carry/teacher-general (spm.model,
#                       and epoch checkpoints when small enough to carry) is copied into
#                       $OUT/teacher first, so export.train resumes from it
# A second call on the same warm machine resumes from /tmp/teacher-general, the copy this
# script leaves there ($OUT is emptied between calls; /tmp is not). A fresh machine cannot
# resume from an earlier call: an epoch checkpoint with its Adam state is ~120 MB, over
# what a call carries in (64 MiB) or brings back (64 MiB, 16 MiB a file).
#
# Comes back under $OUT (8 files at most): env.txt, train.log, and in ckpt/ results.json,
# the averaged model's newstest2019 output, averaged.pt in 15 MiB parts and SHA256SUMS
# (last.pt, the newest epoch's model, if training was cut before averaging).
# Rejoin here:  cat ckpt/averaged.pt.part* > averaged.pt && sha256sum -c ckpt/SHA256SUMS
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?OUT must name the folder whose files come back}"
MINUTES=${MINUTES:-7}
TRAIN_ARGS=${TRAIN_ARGS---device cuda --batch-tokens 24000}
DATA=${DATA:-carry/general-en-de}
RESUME=${RESUME:-carry/teacher-general}
PY=${PYTHON:-python}
WORK=$OUT/teacher
KEEP=${KEEP:-/tmp/teacher-general}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

for f in train val newstest2019 flores200_devtest; do
  for l in en de; do
    [ -s "$DATA/$f.$l.gz" ] || { echo "error: $DATA/$f.$l.gz missing: run tools/device/prepare_general_en_de.sh and carry 'carry'" | tee "$OUT/train.log"; exit 2; }
  done
done
mb=$(du -sm "$DATA" | cut -f1)
[ "$mb" -lt 40 ] || { echo "error: $DATA is $mb MiB, expected < 40" | tee "$OUT/train.log"; exit 2; }
export FASTDEC_GENERAL_EN_DE=$(realpath "$DATA")

usage=$("$PY" -m export.train --help 2>&1)
for opt in $TRAIN_ARGS; do
  if [[ $opt == --* ]] && ! grep -q -- "$opt" <<<"$usage"; then
    echo "error: export.train has no $opt (--device and --batch-tokens: merge h33-gecbase first)" | tee "$OUT/train.log"; exit 2
  fi
done
mkdir -p "$WORK"
[ -d "$RESUME" ] && cp -r "$RESUME"/. "$WORK"/
[ -d "$KEEP" ] && cp -r "$KEEP"/. "$WORK"/   # an earlier call on this machine: its newer checkpoints win
rm -f "$WORK"/averaged.pt "$WORK"/results.json "$WORK"/averaged.*.de "$WORK"/best.*.de   # an earlier call's: only this call's may come back
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1; nproc
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1
  ls -la "$WORK"; } > "$OUT/env.txt"

# Under its own time limit, so that packing below always runs inside the call's 600 s
# (a run killed by the call's limit brings back only what $OUT held already): averaged.pt
# is written before the final test decoding, so a cut there still returns the model.
timeout -k 10 "${TRAIN_LIMIT_S:-540}" "$PY" -m export.train --recipe teacher-en-de-general --out "$WORK" \
  $TRAIN_ARGS --minutes "$MINUTES" --threads "${THREADS:-8}" 2>&1 | tee -a "$OUT/train.log"
rc=${PIPESTATUS[0]}

# Keep everything on this machine for a further call, then leave under $OUT only what
# comes back: the epoch checkpoints (~120 MB each) stay behind.
rm -rf "$KEEP" && cp -r "$WORK" "$KEEP"
mkdir -p "$OUT/ckpt"
for f in results.json averaged.newstest2019.de; do [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/ckpt/"; done
model=averaged.pt
if [ ! -f "$WORK/averaged.pt" ] && ls "$WORK"/epoch*.pt >/dev/null 2>&1; then
  # cut before averaging: the newest epoch checkpoint without its optimizer state
  model=last.pt
  "$PY" -m export.compact_ckpt newest "$WORK"
fi
if [ -f "$WORK/$model" ]; then
  split -b 15m -d "$WORK/$model" "$OUT/ckpt/$model.part"
  (cd "$WORK" && sha256sum "$model") > "$OUT/ckpt/SHA256SUMS"
fi
rm -rf "$WORK"
ls -la "$OUT" "$OUT/ckpt"
echo "export.train exit status $rc"
exit "$rc"
