#!/usr/bin/env bash
# ONE device call that does the two things a lent session needs most and that do not
# compete for the same part of the machine (tools/device/README.md, "Plan"):
#   - the GPU trains uk-gec-base (issue 29 item 2: tools/device/train_uk_gec_base.sh),
#     its host process pinned to TRAIN_CPUS;
#   - the host's other cores run issue 31's AMX check (tools/device/amx_check.sh), pinned
#     to AMX_CPUS, at one thread per measurement as that script sets.
# Here, once per checkout (the carry is ~13 MB beside the ~48 MB of tracked files):
#   bash tools/device/prepare_uk_gec_base.sh          # .gecbase/
#   bash tools/device/amx_prepare.sh                  # build/device/ (only uagec/ is carried)
# Then:
#   run(command="bash tools/device/session_gecbase_amx.sh", carry=[".gecbase", "build/device/uagec"],
#       timeout_s=600)
# Dry run on this CPU (tiny recipes, emulated tiles, one core each):
#   OUT=/tmp/sess DEVICE=cpu SYNTH_RECIPE=test-tiny-gec-synth FT_RECIPE=test-tiny-gec SYNTH_SHARE=0.5 \
#     AMX_DRY_RUN=1 TRAIN_CPUS=0 AMX_CPUS=1 BUDGET=300 bash tools/device/session_gecbase_amx.sh
#
# What comes back (the tool returns at most 8 files): train_uk_gec_base.sh's train.log,
# results.json, throughput.txt and model/ (meta.json + 3 int8 shards), and amx.tgz, every
# file amx_check.sh wrote (summary.txt first), packed again every 20 s so that a call cut
# by its time limit still returns what was measured.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT (the device tool sets it; for a dry run any empty folder)}"
BUDGET=${BUDGET:-520}            # seconds, for each of the two halves
TRAIN_CPUS=${TRAIN_CPUS:-0-7}
AMX_CPUS=${AMX_CPUS:-8-15}
AMX_OUT=${AMX_OUT:-/tmp/amx-out}
mkdir -p "$OUT" "$AMX_OUT"

pack_amx() {  # atomically: a half-written archive never comes back
  tar -czf "$OUT/amx.tgz.tmp" -C "$AMX_OUT" . 2>/dev/null && mv "$OUT/amx.tgz.tmp" "$OUT/amx.tgz"
}

THREADS=${THREADS:-$(taskset -c "$TRAIN_CPUS" nproc)} \
  taskset -c "$TRAIN_CPUS" bash tools/device/train_uk_gec_base.sh "$BUDGET" > /dev/null 2>&1 &
train_pid=$!
OUT=$AMX_OUT AMX_BUDGET_S=$BUDGET CMAKE_BUILD_PARALLEL_LEVEL=$(taskset -c "$AMX_CPUS" nproc) \
  taskset -c "$AMX_CPUS" bash tools/device/amx_check.sh > /dev/null 2>&1 &
amx_pid=$!

while kill -0 "$amx_pid" 2>/dev/null; do
  sleep 20
  pack_amx
done
wait "$amx_pid"; amx_rc=$?
pack_amx
wait "$train_pid"; train_rc=$?
echo "session: amx_check rc=$amx_rc, train_uk_gec_base rc=$train_rc" | tee -a "$OUT/train.log"
ls -la "$OUT" "$OUT/model" 2>/dev/null
# The tool's limit on files: everything else under $OUT would be left out silently.
count=$(find "$OUT" -type f | wc -l)
[ "$count" -le 8 ] || echo "session: WARNING $count files under \$OUT, the tool returns 8" | tee -a "$OUT/train.log"
