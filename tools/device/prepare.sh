#!/usr/bin/env bash
# Run HERE (a machine with the 'test' extra), before tools/device/cuda_check.sh is sent to
# the device: writes what the device cannot make itself into build/device/, which the
# device call carries (build/ is ignored by git, so it travels only as `carry`):
#   uagec_test_head.txt   the first 100 UA-GEC test sources (the ua-gec package is not
#                         installed there; tests/gpu_cases.py reads this file instead)
# Usage: bash tools/device/prepare.sh [python]
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${1:-python3}"
mkdir -p build/device
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$py" - <<'PY'
import sys
sys.path.insert(0, "tests")
from test_real_sentences import uagec_test_head
lines = uagec_test_head(100)
assert all("\n" not in s for s in lines)
open("build/device/uagec_test_head.txt", "w", encoding="utf-8").write("\n".join(lines) + "\n")
print(f"build/device/uagec_test_head.txt: {len(lines)} sentences")
PY
