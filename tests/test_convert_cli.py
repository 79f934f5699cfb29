"""`fastdec convert` as a user meets it: its help, and one-line errors (never a
traceback, never a staging path) for outputs that are their input, bad output paths,
a full disk, oversized options and damaged inputs; a converter killed or interrupted
leaves no staging directory behind, and the next run removes one left by a kill -9.
Each case runs the console script's code in a fresh Python."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from child_python import NEUTRAL_CWD, child_env

CONSOLE_SCRIPT = "import sys\nfrom pyfastdec.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def fastdec(*args: str, prelude: str = "", cwd=NEUTRAL_CWD) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", prelude + CONSOLE_SCRIPT, *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=child_env(), timeout=300)


def test_convert_help_lists_the_converters():
    """`fastdec --help` points to `fastdec convert --help`, which argparse.REMAINDER
    refused as an unrecognised argument of `fastdec` itself."""
    assert "fastdec convert --help" in fastdec("--help").stdout
    for flag in ("--help", "-h"):
        done = fastdec("convert", flag)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: fastdec convert") and "marian-npz-in" in done.stdout
    done = fastdec("convert", "marian", "--help")
    assert done.returncode == 0 and "--calibrate" in done.stdout and "dynamic" in done.stdout.replace("\n", " ")


# ----------------------------------------------------------------------------- never over the input
import gzip  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from pyfastdec.model_dir import ModelDir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "en-de-attn"  # int8, attention decoder: every exporter takes it
MARIAN = ROOT / "tests" / "data" / "marian_tiny"


def assert_one_line(done: subprocess.CompletedProcess, *needles: str) -> str:
    err = done.stderr
    assert done.returncode != 0, (done.returncode, err)
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("error: "), err
    assert STAGING not in err, err
    for needle in needles:
        assert needle in err, err
    return err


STAGING = ".staging-"


def tree_digest(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def float_model(tmp_path) -> Path:
    """A float32 directory (models/en-de-attn dequantised), for `convert int8`."""
    pytest.importorskip("torch", reason="the float twin is written by export/writer.py (the 'test' extra)")
    from export.writer import write_float_twin

    return write_float_twin(MODEL, tmp_path / "float")


def converter_cases(tmp_path: Path, float_model: Path) -> list[tuple[list[str], Path]]:
    """(arguments before OUT, the input) of every converter, on copies; the input of
    marian-npz-in is its .npz file."""
    model = shutil.copytree(MODEL, tmp_path / "model")
    marian = shutil.copytree(MARIAN, tmp_path / "marian")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "marian"}')
    return [(["ctranslate2", str(model)], model), (["marian-npz", str(model)], model),
            (["int8", str(float_model)], float_model),
            (["marian-npz-in", str(marian / "post.npz"), str(marian / "vocab.spm")], marian / "post.npz"),
            (["marian", str(hf)], hf)]


@pytest.mark.parametrize("where", ["same", "inside", "parent"])
def test_output_that_is_the_input_is_refused(tmp_path, float_model, where):
    """`convert ctranslate2 M M --force` deleted M before reading it; every converter now
    refuses an output that is its input, inside it, or contains it, and leaves it whole."""
    for args, source in converter_cases(tmp_path, float_model):
        kept = source.parent if source.is_file() else source
        before = tree_digest(kept)
        out = {"same": source, "inside": source / "sub", "parent": source.parent}[where]
        how = {"same": "is the input", "inside": "is inside the input", "parent": "contains the input"}[where]
        assert_one_line(fastdec("convert", *args, out, "--force"), f"{out}: the output directory {how} {source}")
        assert tree_digest(kept) == before, args[0]


# ----------------------------------------------------------------------------- full disk, bad paths
# In the child: every file write of the converters fails after a few bytes, as on a full
# disk (a tiny tmpfs does the same, but needs root to mount).
FULL_DISK = """import errno, builtins, io
_open = builtins.open
def _full_open(file, mode="r", *a, **k):
    if any(c in mode for c in "wax") and ".staging-" in str(file):
        with _open(file, "wb") as f:  # the file appears, its content does not fit
            f.write(b"par")
        raise OSError(errno.ENOSPC, "No space left on device", str(file))
    return _open(file, mode, *a, **k)
builtins.open = io.open = _full_open
import numpy as np
import pyfastdec.model_dir.safetensors_io as st
st.save_file = lambda path, *a, **k: _full_open(path, "wb")
np.savez = lambda file, *a, **k: _full_open(file, "wb")
"""


def test_full_disk_gives_one_line_and_leaves_nothing(tmp_path, float_model):
    cases = converter_cases(tmp_path, float_model)[:4]  # the HF case has no model to write
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        cases = cases[1:]
    for args, _ in cases:
        out = tmp_path / f"out-{args[0]}"
        done = fastdec("convert", *args, out, prelude=FULL_DISK)
        assert_one_line(done, f"error: {out}: cannot write: no space left on the device")
        assert not out.exists() and not [p for p in tmp_path.iterdir() if STAGING in p.name], args[0]


@pytest.mark.parametrize("bad", ["under-a-file", "dev-null"])
def test_bad_output_path_gives_one_line(tmp_path, bad):
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "out" if bad == "under-a-file" else Path("/dev/null/out")
    assert_one_line(fastdec("convert", "marian-npz", MODEL, out), f"{out}: cannot create")


def test_max_positions_is_bounded_before_allocating(tmp_path):
    """--max-positions 1e9 allocated 4.2 GB of position table before failing."""
    pytest.importorskip("ctranslate2", reason="the CTranslate2 converter needs the 'bench' extra")
    started = time.perf_counter()
    done = fastdec("convert", "ctranslate2", MODEL, tmp_path / "ct2", "--max-positions", "1000000000",
                   prelude="import resource\nresource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n")
    assert_one_line(done, "--max-positions 1000000000: expected an integer from 1 to 16384")
    assert time.perf_counter() - started < 60 and not (tmp_path / "ct2").exists()


# ----------------------------------------------------------------------------- damaged inputs
def test_truncated_lex_gz_gives_one_line(tmp_path):
    lex = tmp_path / "lex.s2t.gz"
    data = (MARIAN / "lex.s2t.gz").read_bytes()
    lex.write_bytes(data[:len(data) // 2])
    done = fastdec("convert", "marian-npz-in", MARIAN / "post.npz", MARIAN / "vocab.spm", tmp_path / "out",
                   "--shortlist", lex, "20", "8")
    assert_one_line(done, f"error: {lex}: truncated or damaged gzip file")
    assert not (tmp_path / "out").exists()


def npy_header_only(shape: tuple[int, ...]) -> bytes:
    """A .npy whose header declares `shape` (float32) but which holds no data."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def test_npz_member_shape_checked_before_reading(tmp_path):
    """A 2 MB .npz whose embedding declares 2 GB: refused from its header, under a 1.5 GB
    address-space limit (reading the member first ran out of memory)."""
    npz = tmp_path / "big.npz"
    with zipfile.ZipFile(MARIAN / "post.npz") as src, zipfile.ZipFile(npz, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "Wemb.npy":
                data = npy_header_only((500, 1 << 20)) + bytes(2 << 20)
            dst.writestr(info.filename, data)
    limit = "import resource\nresource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))\n"
    done = fastdec("convert", "marian-npz-in", npz, MARIAN / "vocab.spm", tmp_path / "out", prelude=limit)
    assert_one_line(done, f"error: {npz}: tensor Wemb has shape [500, 1048576] (expected [500, 16])")


# ----------------------------------------------------------------------------- interrupted conversions
def test_stale_staging_of_a_killed_run_is_removed(tmp_path):
    out = tmp_path / "npz"
    stale = tmp_path / f".npz{STAGING}{2 ** 22 + 12345}-abc"  # above any pid_max: its process is gone
    live = tmp_path / f".npz{STAGING}{os.getpid()}-def"  # a running conversion's: kept
    for d in (stale, live):
        d.mkdir()
        (d / "model.npz").write_bytes(b"half")
    done = fastdec("convert", "marian-npz", MODEL, out)
    assert done.returncode == 0, done.stderr
    assert not stale.exists() and live.exists() and (out / "model.npz").is_file()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_conversion_leaves_no_staging(tmp_path, sig):
    slow = ("import time, numpy as np\n_savez = np.savez\n"
            "def _slow(file, *a, **k):\n    open(file, 'wb').write(b'partial')\n    print('writing', flush=True)\n"
            "    time.sleep(60)\nnp.savez = _slow\n")
    out = tmp_path / "npz"
    child = subprocess.Popen([sys.executable, "-c", slow + CONSOLE_SCRIPT, "convert", "marian-npz", str(MODEL),
                              str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=NEUTRAL_CWD, env=child_env())
    assert child.stdout.readline() == "writing\n"
    assert [p for p in tmp_path.iterdir() if STAGING in p.name]
    child.send_signal(sig)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130 and "Traceback" not in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_truncated_parallel_gz_names_the_file(tmp_path):
    """`convert marian --shortlist SRC TGT` reads them with ibm1_shortlist.read_parallel."""
    from pyfastdec.convert.ibm1_shortlist import read_parallel

    good, bad = tmp_path / "a.en", tmp_path / "b.de.gz"
    good.write_text("a\nb\n")
    data = gzip.compress(("x " * 5000 + "\n").encode() * 20)
    bad.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match=f"^{bad}: truncated or damaged gzip file"):
        read_parallel(good, bad)


def test_unreadable_input_while_staging_is_not_blamed_on_the_output(tmp_path):
    """An input read inside the staged block (here the spm.model CTranslate2 copies in)
    fails as 'cannot read' naming it, not as a write error of the output."""
    pytest.importorskip("ctranslate2", reason="the CTranslate2 converter needs the 'bench' extra")
    model = shutil.copytree(MODEL, tmp_path / "model")
    prelude = (f"import shutil, errno\n_copy = shutil.copy\n"
               f"def _fail(src, dst, *a, **k):\n"
               f"    raise OSError(errno.EACCES, 'Permission denied', str(src))\n"
               f"shutil.copy = shutil.copyfile = _fail\n")
    done = fastdec("convert", "ctranslate2", model, tmp_path / "ct2", prelude=prelude)
    assert_one_line(done, f"{model / 'spm.model'}: cannot read: Permission denied")
    assert not (tmp_path / "ct2").exists()
