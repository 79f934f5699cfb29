#!/usr/bin/env bash
# Stages, under build/device/ (ignored by git), what tools/device/amx_check.sh needs on a
# device that has no network: wheels of the Python packages the device may lack
# (sentencepiece for CPython 3.10-3.13, pytest and its dependencies, pybind11,
# threadpoolctl; installed there only if missing) and the UA-GEC test pairs the
# correction benchmarks read (from this machine's extracted corpus, bench/data.py).
# About 10 MB. Run here, then pass carry=["build/device"] to the device call.
#   bash tools/device/amx_prepare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
dest=build/device
mkdir -p "$dest/wheels" "$dest/uagec"
for v in 3.10 3.11 3.12 3.13; do
  "$PY" -m pip download -q --only-binary=:all: --no-deps --implementation cp --python-version "$v" \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 sentencepiece -d "$dest/wheels"
done
"$PY" -m pip download -q --only-binary=:all: --no-deps -d "$dest/wheels" \
  pytest iniconfig pluggy packaging pygments exceptiongroup tomli pybind11 threadpoolctl
uagec=$("$PY" -c "from bench.data import uagec_dir; print(uagec_dir())")
cp "$uagec/stats.json" "$uagec"/test.src.gz "$uagec"/test.tgt.gz "$dest/uagec/"
du -sh "$dest"
echo "carry: build/device"
