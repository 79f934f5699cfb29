#!/usr/bin/env bash
# One device call: distil the general En->De teacher over the general train sources on
# the GPU, train the student (recipe student-en-de-general, --init the teacher) on the
# distilled targets, and bring both back for the CPU half of the chain. Prepare first, here:
#   tools/device/prepare_general_student.sh TEACHER.pt   # carry/general-student (the set
#       # without train.de.gz), carry/teacher-general-compact (int8 rows, ~11 MB, not 40)
#   run(command="bash tools/device/train_general_student.sh",
#       carry=["carry/general-student", "carry/teacher-general-compact"], timeout_s=600)
# Then, on the CPU (pruning, shortlist, heads; FASTDEC_GENERAL_EN_DE = the full set):
#   python -m export.build_models teacher-en-de-general --from carry/teacher-general-compact
#   python -m export.build_models distill-en-de-general --from OUT/train.de.gz
#   python -m export.build_models en-de-general --from OUT/student
#   python -m export.general_report models/en-de-general --caption-model models/en-de
#
# Why the GPU distils (greedy: export/build_chains.py GENERAL_BEAM): train has ~3.1M
# target tokens (151,207 sentences x 20.4). The native engine's greedy made 1,110 tokens/s
# on 2 Zen 3 cores here, so the host's 16 cores would take ~6 minutes even at a perfect
# 8x, most of a call. The torch reference's greedy batches 512 sentences of similar length
# per step; at d256 and 3 decoder layers a step is a few milliseconds of kernel launches,
# ~300 batches of ~40 steps: one to two minutes. train.log has distill's sentences/s, so
# the next session can check the estimate.
#
# Environment (defaults for the device call):
#   DATA=carry/general-student     TEACHER=carry/teacher-general-compact (or a .pt)
#   DISTILL_ARGS="--engine torch --device cuda --beam 1 --batch 512 --chunk 8192"
#   TRAIN_ARGS="--device cuda --batch-tokens 24000"   MINUTES=5 (export.train --minutes)
#   TOTAL_S=560: everything before packing ends by then (the call's limit is 600 s)
# Distillation resumes after its last complete chunk, and export.train from its newest
# epoch, when rerun on the same warm machine (KEEP=/tmp/student-general). A call cut
# before distillation ends returns the lines so far, and no student.
#
# Comes back under $OUT (8 files at most, each < 16 MiB): env.txt, train.log,
# results.json (the student run's), train.de.gz (the distilled targets, one line per
# train source) and train.de.json (distill's record: lines whose output was empty and
# took the source instead), student/shard0.pt + student/meta.json (export.compact_ckpt:
# the student's averaged.pt, or last.pt when cut before averaging).
#
# CPU dry run (a tiny slice, a few steps; seconds to minutes):
#   OUT=/tmp/out KEEP=/tmp/student-dry DATA=SLICE TEACHER=COMPACT TOTAL_S=1500 THREADS=2 \
#     DISTILL_ARGS="--engine torch --beam 1 --batch 20 --chunk 20" TRAIN_ARGS="--max-steps 2 --no-test" \
#     MINUTES=1 PYTHON=/work/venv/bin/python bash tools/device/train_general_student.sh
# SLICE: 40 short train sources and 8-line val/test sets of the general set; COMPACT: a
# teacher-en-de-general of 40 CPU steps, packed. It returned 7 files in 102 s here, which
# build_models then took --from (models/README.md, "General En-De").
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?OUT must name the folder whose files come back}"
START=$(date +%s)
DATA=${DATA:-carry/general-student}
TEACHER=${TEACHER:-carry/teacher-general-compact}
DISTILL_ARGS=${DISTILL_ARGS---engine torch --device cuda --beam 1 --batch 512 --chunk 8192}
TRAIN_ARGS=${TRAIN_ARGS---device cuda --batch-tokens 24000}
MINUTES=${MINUTES:-5}
TOTAL_S=${TOTAL_S:-560}
PY=${PYTHON:-python}
KEEP=${KEEP:-/tmp/student-general}
WORK=$KEEP
LOG=$OUT/train.log
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fail() { echo "error: $*" | tee -a "$LOG"; exit 2; }
left() { local s=$(( TOTAL_S - ($(date +%s) - START) )); echo $(( s > 70 ? s : 70 )); }  # never below what a step needs

for f in train.en val.en val.de newstest2019.en newstest2019.de flores200_devtest.en flores200_devtest.de; do
  [ -s "$DATA/$f.gz" ] || fail "$DATA/$f.gz missing: run tools/device/prepare_general_student.sh and carry its folders"
done
if [ -d "$TEACHER" ]; then
  [ -f "$TEACHER/meta.json" ] || fail "$TEACHER: no meta.json; expected a folder of python -m export.compact_ckpt pack"
elif [ ! -f "$TEACHER" ]; then
  fail "$TEACHER: no such folder or file; expected export.compact_ckpt pack's folder or a checkpoint .pt"
fi
mkdir -p "$WORK" "$OUT"
# The set as export.data reads it, in $WORK: train.de.gz stayed home (the carry limit), so
# the English sources stand in for it; they are read only as the fallback of an output
# that comes out empty (listed in train.de.json, which comes back).
mkdir -p "$WORK/data"
for f in "$DATA"/*.gz; do cp -n "$f" "$WORK/data/"; done
[ -s "$WORK/data/train.de.gz" ] || cp "$DATA/train.en.gz" "$WORK/data/train.de.gz"
export FASTDEC_GENERAL_EN_DE=$WORK/data
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1; nproc
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1
  du -sh "$DATA" "$TEACHER"; ls -la "$WORK"; } > "$OUT/env.txt"

# 1. the teacher as a checkpoint export.distill and export.train --init read
if [ ! -f "$WORK/teacher.pt" ]; then
  if [ -d "$TEACHER" ]; then
    "$PY" -m export.compact_ckpt unpack "$TEACHER" "$WORK/teacher.pt" 2>&1 | tee -a "$LOG"
  else
    cp "$TEACHER" "$WORK/teacher.pt"
  fi
fi
[ -f "$WORK/teacher.pt" ] || fail "no teacher checkpoint in $WORK (see above)"

# 2. distillation, under what is left of the call minus a minute for training and packing
n_train=$(zcat "$WORK/data/train.en.gz" | wc -l)
timeout -k 10 $(( $(left) - 60 )) "$PY" -m export.distill --model "$WORK/teacher.pt" --src en --tgt de \
  --split train --corpus "$FASTDEC_GENERAL_EN_DE" --out "$WORK/train.de" $DISTILL_ARGS --threads "${THREADS:-8}" \
  2>&1 | tee -a "$LOG"
done_lines=$( [ -f "$WORK/train.de" ] && wc -l < "$WORK/train.de" || echo 0)
echo "distilled $done_lines of $n_train train sources ($(( $(date +%s) - START )) s into the call)" | tee -a "$LOG"

# 3. the student, on the complete targets only
rc=3
if [ "$done_lines" -eq "$n_train" ]; then
  rm -f "$WORK/student/averaged.pt" "$WORK/student/results.json"   # an earlier call's: only this call's come back
  timeout -k 10 $(( $(left) - 20 )) "$PY" -m export.train --recipe student-en-de-general --out "$WORK/student" \
    --init "$WORK/teacher.pt" --train-tgt "$WORK/train.de" $TRAIN_ARGS --minutes "$MINUTES" \
    --threads "${THREADS:-8}" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
fi

# 4. what comes back: the targets, and the student's weights (int8 rows) when there is one
gzip -c "$WORK/train.de" > "$OUT/train.de.gz" 2>/dev/null || rm -f "$OUT/train.de.gz"
[ -f "$WORK/train.de.json" ] && cp "$WORK/train.de.json" "$OUT/"
[ -f "$WORK/student/results.json" ] && cp "$WORK/student/results.json" "$OUT/"
model=$WORK/student/averaged.pt
if [ ! -f "$model" ] && ls "$WORK"/student/epoch*.pt >/dev/null 2>&1; then
  model=$WORK/student/last.pt   # cut before averaging: the newest epoch's model without its optimizer state
  "$PY" -m export.compact_ckpt newest "$WORK/student" 2>&1 | tee -a "$LOG"
fi
[ -f "$model" ] && "$PY" -m export.compact_ckpt pack "$model" "$OUT/student" 2>&1 | tee -a "$LOG"
files=$(find "$OUT" -type f | wc -l)
big=$(find "$OUT" -type f -size +16383k | wc -l)
ls -laR "$OUT"
echo "$files files under \$OUT (limit 8), $big over 16 MiB; $(( $(date +%s) - START )) s in all; export.train exit status $rc"
[ "$files" -le 8 ] && [ "$big" -eq 0 ] || { echo "error: more than comes back"; exit 2; }
exit "$rc"
