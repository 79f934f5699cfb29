#!/usr/bin/env bash
# Prepares, on this machine (no GPU), everything tools/device/train_general_en_de.sh needs,
# so that the device call spends its minutes training:
#   carry/general-en-de/   train, val and test sets (gz) + manifest.json of the built set
#   carry/teacher-general/ spm.model: the recipe's joint vocabulary trained here, exactly as
#                          export.train would train it (one thread, single-core work the
#                          GPU cannot speed up), which export.train finds in its --out and reuses
# and checks the data is under 40 MiB (a device call carries 64 MiB with the whole tree).
# carry/ is ignored through .git/info/exclude, so it travels only when `carry` names it:
#   run(command="bash tools/device/train_general_en_de.sh", carry=["carry"], timeout_s=600)
#
# Run it in the checkout the device call sends (the session's own, not a helper's worktree).
# usage: tools/device/prepare_general_en_de.sh [BUILT_SET_DIR]
#   BUILT_SET_DIR: what `python -m export.general_en_de` wrote (default $FASTDEC_GENERAL_EN_DE,
#   else /work/data/general-en-de)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
SRC=${1:-${FASTDEC_GENERAL_EN_DE:-/work/data/general-en-de}}
PY=${PYTHON:-python}
for f in train val newstest2019 flores200_devtest; do
  for l in en de; do
    [ -s "$SRC/$f.$l.gz" ] || { echo "error: $SRC/$f.$l.gz missing: build the set first (python -m export.general_en_de --mirrors DIR --out $SRC)" >&2; exit 2; }
  done
done
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/carry/' "$exclude" 2>/dev/null || echo '/carry/' >> "$exclude"
mkdir -p carry/general-en-de carry/teacher-general
for f in train val newstest2019 flores200_devtest; do cp "$SRC/$f".{en,de}.gz carry/general-en-de/; done
cp "$SRC/manifest.json" carry/general-en-de/
mb=$(du -sm carry/general-en-de | cut -f1)
if [ "$mb" -ge 40 ]; then echo "error: carry/general-en-de is $mb MiB, over the 40 MiB this call can carry" >&2; exit 2; fi
# the vocabulary belongs to one train set: a rebuilt set gets a new one
trained_on=$(cd carry/general-en-de && sha256sum train.en.gz train.de.gz)
if [ "$(cat carry/teacher-general/spm.trained-on 2>/dev/null)" != "$trained_on" ]; then
  rm -f carry/teacher-general/spm.model
fi
if [ ! -s carry/teacher-general/spm.model ]; then
  FASTDEC_GENERAL_EN_DE=$PWD/carry/general-en-de PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} "$PY" - <<'PYEOF'
from export.data import load_pairs
from export.recipes import get_recipe
from export.vocab import train_vocab
r = get_recipe("teacher-en-de-general")
pairs = load_pairs("train", r["src"], r["tgt"], r["corpus"])
train_vocab([s for s, _ in pairs] + [t for _, t in pairs], "carry/teacher-general/spm.model", r["vocab_size"])
print(f"spm.model ({r['vocab_size']} pieces) from {len(pairs)} train pairs")
PYEOF
  echo "$trained_on" > carry/teacher-general/spm.trained-on
fi
# What a call sends: tracked and untracked-not-ignored files, plus carry/ (64 MiB in all)
sum() { xargs -0 -r stat -c %s | awk '{s+=$1} END {print s+0}'; }
bytes=$(( $(git ls-files -z | sum) + $(git ls-files -z --others --exclude-standard | sum) + $(du -sb carry | cut -f1) ))
echo "a device call sends $((bytes / 1048576)) MiB (limit 64)"
if [ "$bytes" -ge $((62 * 1048576)) ]; then echo "error: over 62 MiB: leave out untracked files or other carried ones" >&2; exit 2; fi
du -sh carry/general-en-de carry/teacher-general
echo "ready: run(command=\"bash tools/device/train_general_en_de.sh\", carry=[\"carry\"], timeout_s=600)"
