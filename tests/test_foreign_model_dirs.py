"""`-m` / Translator(model_dir) given another framework's model folder says which
`fastdec convert` command makes a pyfastdec directory of it (pyfastdec/model_dir/foreign_models.py),
for folders written by the frameworks themselves: transformers' save_pretrained,
CTranslate2's converter, Marian's training (tests/data/marian_tiny)."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from child_python import NEUTRAL_CWD, child_env
from pyfastdec.model_dir import ModelDir, ModelDirError

ROOT = Path(__file__).resolve().parents[1]
CONSOLE_SCRIPT = "import sys\nfrom pyfastdec.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def fastdec(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CONSOLE_SCRIPT, *map(str, args)], capture_output=True, text=True,
                          cwd=NEUTRAL_CWD, env=child_env(), timeout=300)


def refusal(path: Path) -> str:
    """The CLI's one line for `translate -m path`, checked equal to ModelDir.load's."""
    done = fastdec("translate", "-m", path, "--threads", "1")
    assert done.returncode != 0 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    with pytest.raises(ModelDirError) as err:
        ModelDir.load(path)
    assert str(err.value) in done.stderr
    return str(err.value)


def test_hugging_face_marian_folder(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.MarianConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1,
                                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                       decoder_ffn_dim=32, pad_token_id=63, decoder_start_token_id=63)
    transformers.MarianMTModel(config).save_pretrained(tmp_path / "opus")
    message = refusal(tmp_path / "opus")
    assert message.endswith(f"convert it first: fastdec convert marian {tmp_path / 'opus'} OUT_DIR")
    (tmp_path / "opus" / "config.json").write_text('{"model_type": "t5"}')
    assert "only Marian models convert (fastdec convert marian HF_DIR OUT_DIR)" in refusal(tmp_path / "opus")


def test_ctranslate2_folder(tmp_path):
    pytest.importorskip("ctranslate2", reason="writing a CTranslate2 model needs the 'bench' extra")
    from pyfastdec.convert.ctranslate2_export import to_ctranslate2

    out = to_ctranslate2(ROOT / "models" / "en-de-attn", tmp_path / "ct2")
    assert "a CTranslate2 model (model.bin)" in refusal(out)
    assert "fastdec convert marian HF_DIR OUT_DIR" in refusal(out)


def test_marian_npz_folder_and_its_command(tmp_path):
    folder = tmp_path / "marian"
    folder.mkdir()
    shutil.copy(ROOT / "tests" / "data" / "marian_tiny" / "post.npz", folder / "model.npz")
    shutil.copy(ROOT / "tests" / "data" / "marian_tiny" / "vocab.spm", folder / "vocab.spm")
    message = refusal(folder)
    command = message.split("convert it first: ", 1)[1]
    assert command == f"fastdec convert marian-npz-in {folder / 'model.npz'} {folder / 'vocab.spm'} OUT_DIR"
    args = shlex.split(command.replace("OUT_DIR", str(tmp_path / "converted")))[1:]
    done = fastdec(*args)
    assert done.returncode == 0, done.stderr
    ModelDir.load(tmp_path / "converted")  # the suggested command made a model directory
