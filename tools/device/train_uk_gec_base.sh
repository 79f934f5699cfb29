#!/usr/bin/env bash
# uk-gec-base (issue 29 item 2) in ONE device call: synthetic-error pretraining, then
# fine-tuning on UA-GEC gec-only, on the GPU, within a budget of seconds; what comes back
# lands under $OUT (at most 8 files of 16 MiB: the device tool's limit).
#
# Here, once per checkout (needs PyPI and the ua-gec package; ~13 MB):
#     bash tools/device/prepare_uk_gec_base.sh          # -> .gecbase/ (ignored)
# Then one device call (about 10 minutes; the budget is the training part):
#     run(command="bash tools/device/train_uk_gec_base.sh 520", carry=[".gecbase"], timeout_s=600)
# A dry run on this CPU (tiny recipes, seconds):
#     OUT=/tmp/gb-out DEVICE=cpu SYNTH_RECIPE=test-tiny-gec-synth FT_RECIPE=test-tiny-gec \
#         SYNTH_SHARE=0.5 bash tools/device/train_uk_gec_base.sh 300
# Then, here: python -m export.build_models uk-gec-base --from-compact <files_at>/model
#
# Steps: (1) pymorphy3 from the carried wheels if the machine lacks it; (2) the synthetic
# corpus from the carried UA-GEC corpus (export.gec_noise, ~1 minute, deterministic: the
# carried spm.model was trained on the same bytes), or a carried .gecbase/synth;
# (3) SYNTH_SHARE of the budget on the synth recipe, (4) the rest fine-tuning from its
# averaged or best checkpoint (whichever scored higher on val); each stage checkpoints
# every CKPT_MIN minutes into $WORK (full state: rerunning this script on the same warm
# machine resumes both stages bit for bit); (5) the final checkpoint packed int8
# (export.compact_ckpt) into $OUT/model, the log, results.json and throughput.txt.
# A model packed by an earlier call can start this one (.gecbase/init/, from $OUT/model):
# a warm start without the optimizer state; at ~36 MB it fits the 64 MiB carry only
# beside a working tree of under ~27 MB.
set -euo pipefail
BUDGET=${1:-${BUDGET:-520}}   # seconds of this script's wall clock, data and evaluations included
: "${OUT:?set OUT (the device tool sets it; for a dry run any empty folder)}"
CARRY=${CARRY:-.gecbase}
DEVICE=${DEVICE:-cuda}
SYNTH_RECIPE=${SYNTH_RECIPE:-uk-gec-base-synth}
FT_RECIPE=${FT_RECIPE:-uk-gec-base}
SYNTH_SHARE=${SYNTH_SHARE:-0.85}
EVAL_S=${EVAL_S:-40}     # seconds each stage's evaluations take after its training (val; test after fine-tuning)
RESERVE=${RESERVE:-20}   # seconds kept for packing and slack
CKPT_MIN=${CKPT_MIN:-2}
THREADS=${THREADS:-8}
WORK=${WORK:-/tmp/gecbase-work}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
start=$(date +%s)
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/train.log") 2>&1
elapsed() { echo $(( $(date +%s) - start )); }
echo "== uk-gec-base: budget ${BUDGET}s, device $DEVICE, recipes $SYNTH_RECIPE -> $FT_RECIPE, work $WORK"
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

# (1) packages the image lacks
if ! $PY -c "import pymorphy3, pymorphy3_dicts_uk" 2>/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/gecbase-site \
        "$CARRY"/wheels/*.whl
    export PYTHONPATH=/tmp/gecbase-site${PYTHONPATH:+:$PYTHONPATH}
fi

# (2) data: the recipes read $FASTDEC_UAGEC and $FASTDEC_GEC_SYNTH
CARRY=$(realpath "$CARRY")
export FASTDEC_UAGEC=$CARRY/ua-gec
if [ -f "$CARRY/synth/train.src.gz" ]; then
    export FASTDEC_GEC_SYNTH=$CARRY/synth
else
    export FASTDEC_GEC_SYNTH=$WORK/synth
    if [ ! -f "$FASTDEC_GEC_SYNTH/train.src.gz" ]; then
        $PY -m export.gec_noise --recipe "$SYNTH_RECIPE" --out "$FASTDEC_GEC_SYNTH"
    fi
fi
echo "== data ready at $(elapsed)s"

stage() {  # stage RECIPE RUN SECONDS [extra export.train args]
    local recipe=$1 run=$2 secs=$3
    shift 3
    if [ "$secs" -lt 20 ]; then echo "== $recipe: ${secs}s left, skipped"; return 1; fi
    local minutes
    minutes=$($PY -c "print(round($secs / 60, 2))")
    # --minutes: the stage's plan over every call (STAGE_MINUTES); --stop-after-minutes:
    # this call's share, data loading included; the final evaluation comes after it.
    $PY -m export.train --recipe "$recipe" --out "$run" --device "$DEVICE" --threads "$THREADS" \
        --minutes "${STAGE_MINUTES:-600}" --stop-after-minutes "$minutes" --checkpoint-minutes "$CKPT_MIN" \
        --log-every 50 "$@"
}
chosen() {  # the run's averaged.pt or best.pt, whichever scored higher on val (as build_models chooses)
    $PY - "$1" <<'EOF'
import json, sys
from pathlib import Path
run = Path(sys.argv[1]); res = json.loads((run / "results.json").read_text())
print(max((res[n]["val"], str(run / f"{n}.pt")) for n in ("averaged", "best") if n in res)[1])
EOF
}

collect() {  # collect RUN: its chosen checkpoint packed to $OUT/model (whole or not at all), the reports
    local run=$1
    rm -rf "$OUT/model.tmp"
    $PY -m export.compact_ckpt pack "$(chosen "$run")" "$OUT/model.tmp"
    rm -rf "$OUT/model" && mv "$OUT/model.tmp" "$OUT/model"
    $PY - "$WORK" "$OUT" <<'EOF'
import json, sys
from pathlib import Path
work, out = Path(sys.argv[1]), Path(sys.argv[2])
results = {}
for stage in ("synth-run", "ft-run"):
    path = work / stage / "results.json"
    if path.exists():
        results[stage] = json.loads(path.read_text())
(out / "results.json").write_text(json.dumps(results, indent=1))
with open(out / "throughput.txt", "w") as f:
    for stage, res in results.items():
        t = res.get("throughput", {})
        line = (f"{stage} {res['recipe']}: {t.get('tgt_tokens_per_s')} target tokens/s over {t.get('train_seconds')} s"
                f" on {t.get('device')} (bf16 {t.get('bf16')}, {t.get('batch_tokens')} tokens per batch); steps "
                f"{res['steps']}, epochs {res['epochs']}; val {res.get('averaged', {}).get('val')} averaged, "
                f"{res.get('best', {}).get('val')} best")
        print(line)
        f.write(line + "\n")
EOF
}

INIT=()
if [ -f "$CARRY/init/meta.json" ]; then  # a model packed by an earlier call
    $PY -m export.compact_ckpt unpack "$CARRY/init" "$WORK/carried.pt"
    INIT=(--init "$WORK/carried.pt")
    carried_recipe=$($PY -c "import json; print(json.load(open('$CARRY/init/meta.json'))['recipe'])")
    echo "== carried-in model of recipe $carried_recipe"
fi

left=$(( BUDGET - $(elapsed) - RESERVE - 2 * EVAL_S ))
synth_secs=$($PY -c "print(int($left * $SYNTH_SHARE))")
if [ "${carried_recipe:-}" = "$FT_RECIPE" ]; then
    echo "== carried model is fine-tuned already: fine-tuning goes on"
else
    # (3) pretraining on synthetic errors (vocabulary: the carried one, trained here on the same corpus)
    if [ -f "$CARRY/spm.model" ] && [ ! -f "$WORK/synth-run/spm.model" ] && [ ${#INIT[@]} -eq 0 ] \
        && $PY -c "import sys, sentencepiece as s; from export.recipes import get_recipe
sys.exit(s.SentencePieceProcessor(model_file=sys.argv[1]).vocab_size() != get_recipe(sys.argv[2])['vocab_size'])" \
            "$CARRY/spm.model" "$SYNTH_RECIPE"; then  # (a tiny dry-run recipe trains its own)
        mkdir -p "$WORK/synth-run" && cp "$CARRY/spm.model" "$WORK/synth-run/spm.model"
        if [ -f "$CARRY/synth.md5" ]; then  # the corpus the carried spm.model was trained on
            sums=$(realpath "$CARRY/synth.md5")
            (cd "$FASTDEC_GEC_SYNTH" && md5sum -c --quiet "$sums") \
                || echo "== WARNING: the synthetic corpus differs from the one spm.model was trained on"
        fi
    fi
    if stage "$SYNTH_RECIPE" "$WORK/synth-run" "$synth_secs" --no-test "${INIT[@]}"; then
        INIT=(--init "$(chosen "$WORK/synth-run")")
        collect "$WORK/synth-run"
    fi
fi
echo "== pretraining done at $(elapsed)s"

# (4) fine-tuning on UA-GEC (its own run folder: --init applies to a fresh --out only)
ft_secs=$(( BUDGET - $(elapsed) - RESERVE - EVAL_S ))
if stage "$FT_RECIPE" "$WORK/ft-run" "$ft_secs" "${INIT[@]}"; then
    collect "$WORK/ft-run"
fi
echo "== fine-tuning done at $(elapsed)s"

# (5) what came back is written after each stage (collect): a call killed later still returns a model
echo "== done at $(elapsed)s of ${BUDGET}s"
ls -la "$OUT" "$OUT/model" 2>/dev/null || true
sleep 1  # tee's last lines reach train.log before the tool collects $OUT
