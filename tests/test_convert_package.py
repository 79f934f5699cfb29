"""pyfastdec/convert/ as a package: it runs as `python -m pyfastdec.convert`, importing it
loads no converter, its modules import each other without a circle, nothing in
pyfastdec/ imports export/ or bench/ (a wheel has neither), and export/ writes int8
weights and multipliers by the package's one rule, which gives the bytes torch's
formulas gave."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from child_python import NEUTRAL_CWD, child_env
from pyfastdec.convert.calibration import ACT_STAT, activation_multiplier
from pyfastdec.convert.int8 import quantization_field, quantize_linear
from pyfastdec.model_dir import MAX_ACTIVATION_SCALE, QUANT_DYNAMIC_ACTIVATIONS, QUANT_EMBEDDING

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pyfastdec"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function (absolute names)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-node.level])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def test_runs_as_a_module():
    done = subprocess.run([sys.executable, "-m", "pyfastdec.convert", "--help"], capture_output=True, text=True,
                          cwd=NEUTRAL_CWD, env=child_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "python -m pyfastdec.convert" in done.stdout and "marian-npz-in" in done.stdout


def test_importing_the_package_loads_no_converter():
    code = ("import sys, pyfastdec.convert; print(sorted(m for m in sys.modules if m.startswith('pyfastdec.convert.') "
            "or m.split('.')[0] in ('torch', 'export', 'ctranslate2')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=NEUTRAL_CWD,
                          env=child_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_convert_modules_import_each_other_without_a_circle():
    modules = {f"pyfastdec.convert.{p.stem}": p for p in (PACKAGE / "convert").glob("*.py")
               if p.stem not in ("__init__", "__main__")}
    edges = {name: {m for m in imported_modules(path) if m in modules and m != name}
             for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join(path + (name,))
        if name not in done:
            for other in edges[name]:
                visit(other, path + (name,))
            done.add(name)

    for name in modules:
        visit(name, ())


def test_the_package_never_imports_export_or_bench():
    offenders = [f"{path.relative_to(ROOT)}: {module}" for path in PACKAGE.rglob("*.py")
                 for module in imported_modules(path) if module.split(".")[0] in ("export", "bench")]
    assert not offenders, offenders


def test_activation_multiplier_rule():
    assert activation_multiplier(10.0, 2.0) == 127.0 / (10.0 + 1.1 * 2.0)
    assert activation_multiplier(0.0, 0.0) == MAX_ACTIVATION_SCALE  # a dead input: the largest valid one
    assert "1.1 * std" in ACT_STAT


def test_quantization_field():
    dynamic = quantization_field(["b", "a"])
    assert dynamic["activations"] == QUANT_DYNAMIC_ACTIVATIONS and "activation_scales" not in dynamic
    assert dynamic["embedding"] == QUANT_EMBEDDING
    static = quantization_field(["b", "a"], {"a": 2, "b": 3}, {"sentences": 4}, embedding=False)
    assert list(static["activation_scales"].items()) == [("b", 3.0), ("a", 2.0)]  # the linears' order
    assert static["calibration"] == {"sentences": 4, "statistic": ACT_STAT} and "embedding" not in static
    assert json.dumps(static)  # plain JSON values


def test_int8_rounding_gives_torchs_bytes():
    """The rule export/ wrote int8 weights with in torch (127 / max|w_row|, round half to
    even, clamp) and the package's numpy one store the same bytes, zero rows included."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    for case in range(300):
        w = (rng.standard_normal((int(rng.integers(1, 24)), int(rng.integers(1, 96))))
             * 10.0 ** rng.uniform(-6, 3)).astype(np.float32)
        if case % 5 == 0:
            w[0] = 0
        if case % 3 == 0:  # exact halves after scaling
            w[:, 0] = np.abs(w).max(axis=1)
            w[:, 1:4] = np.round(w[:, 1:4] * 2) / 2
        t = torch.from_numpy(w)
        mult = 127.0 / t.abs().amax(dim=1).clamp(min=1e-12)
        q_ref = torch.clamp(torch.round(t * mult[:, None]), -127, 127).to(torch.int8).numpy()
        q, scale = quantize_linear(w)
        assert np.array_equal(q, q_ref), case
        assert np.array_equal(scale, (1.0 / mult).to(torch.float32).numpy()), case


def test_export_uses_the_package_rules():
    pytest.importorskip("torch")
    import torch

    from export.calibrate import activation_multiplier as export_multiplier
    from export.writer import quantize_weight

    assert export_multiplier is activation_multiplier
    w = np.random.default_rng(3).standard_normal((5, 7)).astype(np.float32)
    q, scale = quantize_weight(torch.from_numpy(w))
    ref_q, ref_scale = quantize_linear(w)
    assert np.array_equal(q.numpy(), ref_q) and np.array_equal(scale.numpy(), ref_scale)


def test_a_pytorch_bin_without_torch_names_the_extra(tmp_path):
    """Only a pytorch_model.bin needs torch; without it the refusal is one line naming the
    extra that brings it (and the torch-free alternative)."""
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    code = ("import sys\nsys.modules['torch'] = None\nfrom pathlib import Path\n"
            "from pyfastdec.convert.hf_marian_import import ConvertError, read_hf_weights\n"
            "try:\n    read_hf_weights(Path(sys.argv[1]))\nexcept ConvertError as err:\n    print(err)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                          cwd=NEUTRAL_CWD, env=child_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and "needs torch" in done.stdout
    assert "pip install 'pyfastdec[export]'" in done.stdout and "safe_serialization=True" in done.stdout
