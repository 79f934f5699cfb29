"""A pyfastdec folder without its compiled engine (a source checkout after `pip install .`,
imported from the repository root) fails with an error that says what to do, and the
test run itself is not hidden by it (tests/conftest.py)."""
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pyfastdec

SOURCE = Path(pyfastdec.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[1]
ENGINE_NAME = f"_engine{EXTENSION_SUFFIXES[0]}"


def copy_sources(root: Path, checkout: bool = True) -> Path:
    """The package's Python files under root/pyfastdec, without the compiled engine, in a
    folder that looks like a checkout (a CMakeLists.txt next to it) when `checkout`."""
    shutil.copytree(SOURCE, root / "pyfastdec",
                    ignore=shutil.ignore_patterns("_engine*", "models", "__pycache__"))
    if checkout:
        shutil.copyfile(ROOT / "CMakeLists.txt", root / "CMakeLists.txt")
    return root / "pyfastdec"


def import_error(cwd: Path, pythonpath: Path | None = None) -> str:
    """The last stderr line of `python -S -c "from pyfastdec import cpu_info"` run in cwd (cpu_info: the
    public name that loads the engine before numpy, which -S hides). -S: no site
    packages, so no editable-install finder can supply an engine from elsewhere."""
    env = {"PATH": "/usr/bin:/bin"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run([sys.executable, "-S", "-c", "from pyfastdec import cpu_info"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout
    return done.stderr.strip().splitlines()[-1]


def test_source_checkout_without_engine_says_how_to_build_in_place(tmp_path):
    package = copy_sources(tmp_path)
    line = import_error(tmp_path)
    assert line.startswith(f"ImportError: {package}: pyfastdec's compiled engine ({ENGINE_NAME}) is not in "
                           f"this folder; you are importing the source folder of the checkout {tmp_path}")
    assert "partially initialized" not in line
    assert line.endswith("run from outside the repository to use the installed package, or build in place "
                         "to use this one: `pip install -e .` or `python tools/build_inplace.py`")


def test_names_the_installed_package_the_source_folder_hides(tmp_path):
    checkout, site = tmp_path / "checkout", tmp_path / "site-packages"
    checkout.mkdir()
    copy_sources(checkout)
    (site / "pyfastdec").mkdir(parents=True)
    (site / "pyfastdec" / ENGINE_NAME).write_bytes(b"")  # only looked at, never loaded
    line = import_error(checkout, pythonpath=site)
    assert f"and hides the installed pyfastdec in {site / 'pyfastdec'}:" in line


def test_an_engine_that_does_not_load_is_named_with_the_loaders_reason(tmp_path):
    package = copy_sources(tmp_path)
    (package / ENGINE_NAME).write_bytes(b"not an ELF file\n" * 100)
    line = import_error(tmp_path)
    assert line.startswith(f"ImportError: {package / ENGINE_NAME}: pyfastdec's compiled engine did not load: ")
    assert "invalid ELF header" in line


def test_an_engine_built_for_another_python_is_pointed_out(tmp_path):
    package = copy_sources(tmp_path)
    (package / "_engine.cpython-39-x86_64-linux-gnu.so").write_bytes(b"")
    line = import_error(tmp_path)
    assert f"(only _engine.cpython-39-x86_64-linux-gnu.so, built for another Python)" in line


def test_an_installed_package_without_engine_says_reinstall(tmp_path):
    package = copy_sources(tmp_path, checkout=False)
    line = import_error(tmp_path)
    assert line == (f"ImportError: {package}: pyfastdec's compiled engine ({ENGINE_NAME}) is not in this folder; "
                    f"reinstall pyfastdec (`pip install --force-reinstall pyfastdec`)")


def test_python_m_pytest_in_a_checkout_without_engine_uses_the_installed_package(tmp_path):
    """`python -m pytest` puts the checkout root first on sys.path; conftest.py must move
    an engine-less source folder behind the installed package (as CI's plain `pytest` has it)."""
    copy_sources(tmp_path)
    (tmp_path / "tests").mkdir()
    shutil.copyfile(ROOT / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    installed = SOURCE.parent  # the pyfastdec this run imports: site-packages in CI, else a build in place
    (tmp_path / "tests" / "test_which.py").write_text(
        "import pyfastdec\n\n"
        "def test_which():\n"
        f"    assert pyfastdec.__file__.startswith({str(installed)!r}), pyfastdec.__file__\n"
        "    pyfastdec.cpu_info()\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(installed), "FASTDEC_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_which.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
