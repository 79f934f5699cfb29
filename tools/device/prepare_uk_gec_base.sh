#!/usr/bin/env bash
# Build .gecbase/, what tools/device/train_uk_gec_base.sh needs carried to the GPU machine
# (which has torch, sentencepiece and sacrebleu but no network, no pymorphy3, no ua-gec):
#   wheels/    pymorphy3, its Ukrainian dictionary and dawg2-python (pure Python, 8.3 MB)
#   ua-gec/    the UA-GEC gec-only corpus (export.uagec; 2.9 MB): fine-tuning data, val and
#              test, and the clean sentences gec_noise corrupts
#   spm.model  the 8k vocabulary of uk-gec-base-synth, trained here on the synthetic corpus
#              the device rebuilds byte for byte (export.gec_noise is seeded)
# The 30 MB synthetic corpus itself is not carried: the repository's tracked files take
# ~48 of the 64 MiB that travel.
#     bash tools/device/prepare_uk_gec_base.sh [CARRY_DIR]      # default .gecbase
set -euo pipefail
CARRY=${1:-.gecbase}
PY=${PYTHON:-python}
RECIPE=${SYNTH_RECIPE:-uk-gec-base-synth}
mkdir -p "$CARRY/wheels"
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d "$CARRY/wheels" \
    pymorphy3==2.0.6 pymorphy3-dicts-uk==2.4.1.1.1663094765 dawg2-python==0.9.0
FASTDEC_UAGEC=$PWD/$CARRY/ua-gec $PY -c "from export.uagec import ensure_corpus; print(ensure_corpus())"
if [ ! -f "$CARRY/spm.model" ]; then
    synth=$(mktemp -d)
    FASTDEC_UAGEC=$PWD/$CARRY/ua-gec $PY -m export.gec_noise --recipe "$RECIPE" --out "$synth"
    $PY -c "
import sys
from pathlib import Path
from export.recipes import get_recipe
from export.uagec import train_corpus_vocab
train_corpus_vocab(Path(sys.argv[1]), Path(sys.argv[2]), get_recipe(sys.argv[3])['vocab_size'])
" "$synth" "$CARRY/spm.model" "$RECIPE"
    md5sum "$synth"/train.*.gz | sed "s|$synth/||" > "$CARRY/synth.md5"   # the device's rebuild must match
    rm -rf "$synth"
fi
du -sh "$CARRY"
