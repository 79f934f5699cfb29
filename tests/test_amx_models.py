"""The shipped models on the AMX kernels: every lossless strategy returns greedy's
output, and every output equals the one of the table the AMX one is built on (its float
kernels: layer norm, attention, softmax), which differs only in the int8 GEMM, a
bit-identical one: "amx" is VNNI's table, "amx-emulated" the scalar one.

Each run is a fresh process under FASTDEC_ISA (the engine picks its kernels once per
process): "amx-emulated" everywhere (tiles emulated: the same GEMM code as on AMX), "amx"
where the CPU has AMX-INT8 and the OS allows it (skipped elsewhere, with the reason).
"""
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

import pyfastdec
from child_python import NEUTRAL_CWD, child_env

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
DETECTED = pyfastdec.cpu_info()["detected"]
# (AMX table, the table it shares every other kernel with)
ISAS = [("amx-emulated", "scalar"), pytest.param("amx", "vnni", marks=pytest.mark.skipif(
    DETECTED != "amx", reason=f"this CPU has no AMX-INT8 usable by this process (detected: {DETECTED})"))]
UK = ["Я хочу піти до магазин.", "Він сказав що прийде завтра.", "Ми бачили цей фільм минулого тиждня.",
      "Вона не знає, де знаходиться її ключі."]

# Prints {run: outputs}; argv: model root, English sentences (JSON), Ukrainian ones (JSON).
PROBE = r"""
import json, sys
from pathlib import Path
import pyfastdec
from pyfastdec import Corrector, Translator
models, en, uk = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
out = {"isa": pyfastdec.cpu_info()["isa"]}
t = Translator(models / "en-de", drafter=models / "en-de-drafter", threads=1)
for algo in ("greedy", None, "gad"):
    out[f"en-de {algo or t.strategy.algo}"] = t.translate(en, algo=algo)
c = Corrector(models / "uk-gec", threads=1)
for algo in ("greedy", "iad"):
    out[f"uk-gec {algo}"] = c.translate(uk, algo=algo)
if (models / "en-de-big").is_dir() and (models / "en-de-little").is_dir():
    big = Translator(models / "en-de-big", drafter=models / "en-de-little", threads=1)
    for algo in ("greedy", "bild"):
        out[f"en-de-big {algo}"] = big.translate(en, algo=algo)
print(json.dumps(out))
"""


def english(n):
    with gzip.open(ROOT / "data" / "multi30k" / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(n)]


def probe(isa):
    proc = subprocess.run([sys.executable, "-c", PROBE, str(MODELS), json.dumps(english(12)), json.dumps(UK)],
                          env=child_env(FASTDEC_ISA=isa), cwd=NEUTRAL_CWD, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("isa,base", ISAS)
def test_lossless_strategies_equal_greedy_on_the_amx_kernels(isa, base):
    got, want = probe(isa), probe(base)
    assert (got.pop("isa"), want.pop("isa")) == (isa, base)
    assert set(got) == set(want) and len(got) >= 5
    for run, outputs in got.items():
        model = run.split()[0]
        assert outputs == got[f"{model} greedy"], f"{isa}: {run} differs from greedy"
        assert outputs == want[run], f"{isa}: {run} differs from {base}'s output"
