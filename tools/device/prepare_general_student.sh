#!/usr/bin/env bash
# Prepares, on this machine, what tools/device/train_general_student.sh carries:
#   carry/general-student/          train.en.gz, val, newstest2019, flores200_devtest (.en/.de.gz):
#                                   the general set without train.de.gz (4 MB): the tracked tree
#                                   (~48 MB), the set (8 MB) and the teacher (11 MB) are 67 MB,
#                                   over the 64 MiB a call carries; distillation writes its own
#                                   German, and needs the references only for an empty output
#   carry/teacher-general-compact/  the teacher, export.compact_ckpt (int8 rows, ~11 MB)
# and checks that what the call sends stays under 62 MiB. carry/ is ignored (.git/info/exclude).
#   run(command="bash tools/device/train_general_student.sh",
#       carry=["carry/general-student", "carry/teacher-general-compact"], timeout_s=600)
# usage: tools/device/prepare_general_student.sh TEACHER.pt [BUILT_SET_DIR]
#   TEACHER.pt: the teacher-en-de-general checkpoint (train_general_en_de.sh's averaged.pt,
#   rejoined, or the CPU run's averaged.pt); BUILT_SET_DIR as prepare_general_en_de.sh's
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
TEACHER=${1:?usage: $0 TEACHER.pt [BUILT_SET_DIR]}
SRC=${2:-${FASTDEC_GENERAL_EN_DE:-/work/data/general-en-de}}
PY=${PYTHON:-python}
[ -f "$TEACHER" ] || { echo "error: $TEACHER: no such checkpoint (expected teacher-en-de-general's .pt)" >&2; exit 2; }
for f in train.en val.en val.de newstest2019.en newstest2019.de flores200_devtest.en flores200_devtest.de; do
  [ -s "$SRC/$f.gz" ] || { echo "error: $SRC/$f.gz missing: build the set first (python -m export.general_en_de)" >&2; exit 2; }
done
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/carry/' "$exclude" 2>/dev/null || echo '/carry/' >> "$exclude"
rm -rf carry/general-student carry/teacher-general-compact
mkdir -p carry/general-student
cp "$SRC"/train.en.gz "$SRC"/{val,newstest2019,flores200_devtest}.{en,de}.gz carry/general-student/
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} "$PY" -m export.compact_ckpt pack "$TEACHER" carry/teacher-general-compact
recipe=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['recipe'])" carry/teacher-general-compact/meta.json)
[ "$recipe" = teacher-en-de-general ] || { echo "error: $TEACHER: recipe $recipe (expected teacher-en-de-general)" >&2; exit 2; }
sum() { xargs -0 -r stat -c %s | awk '{s+=$1} END {print s+0}'; }
bytes=$(( $(git ls-files -z | sum) + $(git ls-files -z --others --exclude-standard | sum)
          + $(du -sb carry/general-student | cut -f1) + $(du -sb carry/teacher-general-compact | cut -f1) ))
echo "a device call sends $((bytes / 1048576)) MiB (limit 64)"
if [ "$bytes" -ge $((62 * 1048576)) ]; then echo "error: over 62 MiB: leave out untracked files" >&2; exit 2; fi
du -sh carry/general-student carry/teacher-general-compact
echo 'ready: run(command="bash tools/device/train_general_student.sh", carry=["carry/general-student", "carry/teacher-general-compact"], timeout_s=600)'
