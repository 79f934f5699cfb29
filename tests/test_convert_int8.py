"""`fastdec convert marian --quantize int8` with and without calibration text, from the
package alone (pyfastdec/convert/int8.py, pyfastdec/convert/calibration.py):

- the int8 weights and embedding are export/writer.py's bytes (one rounding rule, which
  tests/test_convert_package.py checks against torch's formula);
- the static multipliers are export/calibrate.py's (the PyTorch forward pass);
- without --calibrate the directory has dynamic activations, which model_dir.py accepts
  only without multipliers, and which decode like HF's float32 greedy on most sentences;
- int8 and --shortlist conversions never import torch or the repository's export/
  package (a wheel has neither; tests/test_wheel_convert.py runs one for real).
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from child_python import NEUTRAL_CWD, child_env  # noqa: E402
from marian_checkpoints import read_lines  # noqa: E402
from test_convert_marian import MAX_NEW, SENTENCES, hf_generate, our_sources, tiny  # noqa: E402,F401

from export.calibrate import calibrate as torch_calibrate  # noqa: E402
from export.writer import quantize_embedding, quantize_weight, read_model_dir  # noqa: E402
from pyfastdec.model_dir import safetensors_io  # noqa: E402
from pyfastdec.convert.calibration import calibrate  # noqa: E402
from pyfastdec.backends.native import NativeBackend  # noqa: E402
from pyfastdec.convert.command import main as convert_main  # noqa: E402
from pyfastdec.decoding.greedy import greedy  # noqa: E402
from pyfastdec.model_dir import ModelDir, ModelDirError, quantized_linears  # noqa: E402



def random_pairs(n: int, vocab: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Sources and targets of varied lengths (targets may be empty): padded batches."""
    rng = np.random.default_rng(seed)
    return [([int(x) for x in rng.integers(1, vocab, rng.integers(1, 14))],
             [int(x) for x in rng.integers(1, vocab, rng.integers(0, 14))]) for _ in range(n)]


def test_numpy_calibration_equals_torch_calibration(tiny):
    out = tiny[3]
    pairs = random_pairs(45, 390)
    ours = calibrate(ModelDir.load(out), pairs)
    model, _ = read_model_dir(out)
    reference = torch_calibrate(model, pairs)
    assert ours.keys() == reference.keys()
    worst = max(abs(ours[k] / reference[k] - 1) for k in reference)
    assert worst < 1e-5, worst


@pytest.fixture(scope="module")
def int8_dirs(tiny, tmp_path_factory):
    """(static, dynamic) int8 directories converted through the command line."""
    root = tmp_path_factory.mktemp("int8")
    calib = root / "calib.en"
    calib.write_text("\n".join(read_lines("val.en.gz", 300)) + "\n", encoding="utf-8")
    static, dynamic = root / "static", root / "dynamic"
    assert convert_main(["marian", str(tiny[0]), str(static), "--quantize", "int8", "--calibrate", str(calib)]) == 0
    assert convert_main(["marian", str(tiny[0]), str(dynamic), "--quantize", "int8"]) == 0
    return static, dynamic


def test_int8_bytes_are_the_torch_writers(tiny, int8_dirs):
    float_tensors = safetensors_io.load_file(tiny[3] / "model.safetensors")
    config = ModelDir.load(tiny[3]).config
    for out in int8_dirs:
        got = safetensors_io.load_file(out / "model.safetensors")
        for lin in quantized_linears(config):
            q, scale = quantize_weight(torch.from_numpy(np.array(float_tensors[f"{lin}.weight"])))
            assert np.array_equal(got[f"{lin}.weight"], q.numpy()), lin
            assert np.array_equal(got[f"{lin}.weight_scale"], scale.numpy()), lin
        q, scale = quantize_embedding(torch.from_numpy(np.array(float_tensors["embed.weight"])))
        assert np.array_equal(got["embed.weight"], q.numpy()) and np.array_equal(got["embed.weight_scale"],
                                                                                   scale.numpy())


def test_static_and_dynamic_configs(int8_dirs):
    static, dynamic = (json.loads((d / "config.json").read_text())["quantization"] for d in int8_dirs)
    assert static["activations"] == "int8_static_per_tensor" and static["calibration"]["sentences"] == 300
    assert len(static["activation_scales"]) == len(quantized_linears(ModelDir.load(int8_dirs[0]).config))
    assert dynamic["activations"] == "int8_dynamic_per_row" and "activation_scales" not in dynamic
    assert ModelDir.load(int8_dirs[1]).config.quantization.activation_scales == {}


@pytest.mark.parametrize("which", [0, 1], ids=["static", "dynamic"])
def test_int8_greedy_agrees_with_hf_float32(tiny, int8_dirs, which):
    """Stated agreement >= 75 % of sentences identical to HF's float32 greedy (measured on
    this random model, whose std-0.2 weights give larger activations than trained ones:
    static 0.83, dynamic 0.85)."""
    _, model, tokenizer, _ = tiny
    sentences = read_lines("test_2016_flickr.en.gz", SENTENCES)
    expected = hf_generate(model, tokenizer, sentences, num_beams=1)
    md, sources = our_sources(int8_dirs[which], sentences)
    got, _ = greedy(NativeBackend(md, threads=1, shortlist=False), sources, max_len=MAX_NEW)
    same = sum(a == b for a, b in zip(got, expected)) / len(expected)
    print(f"int8 {'static dynamic'.split()[which]} greedy identical to HF float32: {same:.2f}")
    assert same >= 0.75


def _rewrite_quantization(directory, change) -> None:
    from pyfastdec.model_dir.checksums import directory_checksums as checksums

    config = json.loads((directory / "config.json").read_text())
    change(config["quantization"])
    config.pop("checksum")
    config["checksum"] = checksums(directory, config)
    (directory / "config.json").write_text(json.dumps(config))


def test_model_dir_refuses_mixed_activation_forms(int8_dirs, tmp_path):
    import shutil

    dynamic = shutil.copytree(int8_dirs[1], tmp_path / "dynamic")
    _rewrite_quantization(dynamic, lambda q: q.update(activation_scales={}))
    with pytest.raises(ModelDirError, match=r"quantization\.activation_scales: present \(expected none with "
                                            r"activations \"int8_dynamic_per_row\""):
        ModelDir.load(dynamic)
    static = shutil.copytree(int8_dirs[0], tmp_path / "static")
    _rewrite_quantization(static, lambda q: q.pop("activation_scales"))
    with pytest.raises(ModelDirError, match=r"quantization\.activation_scales"):
        ModelDir.load(static)


def test_int8_and_shortlist_need_neither_torch_nor_export(tiny, tmp_path):
    """In a child where `import torch` and `import export` fail, as in a wheel without
    the export extra."""
    calib = tmp_path / "calib.en"
    calib.write_text("\n".join(read_lines("val.en.gz", 50)) + "\n", encoding="utf-8")
    src, tgt = tmp_path / "p.en", tmp_path / "p.de"
    src.write_text("\n".join(read_lines("val.en.gz", 200)) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(read_lines("val.de.gz", 200)) + "\n", encoding="utf-8")
    block = "import sys\nsys.modules['torch'] = None\nsys.modules['export'] = None\n"
    run = "from pyfastdec.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    for extra in (["--calibrate", str(calib)], []):
        out = tmp_path / f"out{len(extra)}"
        done = subprocess.run([sys.executable, "-c", block + run, "convert", "marian", str(tiny[0]), str(out),
                               "--quantize", "int8", *extra, "--shortlist", str(src), str(tgt)],
                              capture_output=True, text=True, cwd=NEUTRAL_CWD, env=child_env(), timeout=300)
        assert done.returncode == 0, done.stderr
        md = ModelDir.load(out)
        assert md.config.quantization is not None and (out / "shortlist.bin").is_file()


def test_convert_int8_keeps_a_float_directorys_shortlist_loadable(tiny, tmp_path):
    """`fastdec convert int8` of a float directory with its own shortlist: the copy is
    listed in the int8 directory's checksum, so the engine runs it with that shortlist
    (an unlisted one is refused as another model's) and decodes as it does with the
    same shortlist under another name."""
    src, tgt = tmp_path / "p.en", tmp_path / "p.de"
    src.write_text("\n".join(read_lines("val.en.gz", 200)) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(read_lines("val.de.gz", 200)) + "\n", encoding="utf-8")
    float_dir, int8_dir = tmp_path / "f32", tmp_path / "i8"
    assert convert_main(["marian", str(tiny[0]), str(float_dir), "--shortlist", str(src), str(tgt)]) == 0
    assert convert_main(["int8", str(float_dir), str(int8_dir)]) == 0
    assert (int8_dir / "shortlist.bin").read_bytes() == (float_dir / "shortlist.bin").read_bytes()
    _, sources = our_sources(int8_dir, read_lines("test_2016_flickr.en.gz", 8))
    own = greedy(NativeBackend(int8_dir, threads=1), sources)[0]
    given = greedy(NativeBackend(int8_dir, threads=1, shortlist=str(float_dir / "shortlist.bin")), sources)[0]
    assert own == given
