import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Tests import their numpy references (kernel_reference.py) as plain modules.
sys.path.insert(0, str(Path(__file__).parent))
# `pyfastdec` must resolve to a package that carries the compiled extension. A source
# folder without it (a checkout after `pip install .`, as in CI) must not hide the
# installed package: `pytest` does not put the root on sys.path, but `python -m pytest`
# does, first; it is moved behind site-packages here. Built in place
# (tools/build_inplace.py), the source folder is the one under test and keeps its place.
# An editable install (`pip install -e .`) needs neither: its import hook, ahead of
# sys.path, maps `pyfastdec` to the source folder with the engine it built.
if not any((ROOT / "pyfastdec" / f"_engine{suffix}").is_file() for suffix in EXTENSION_SUFFIXES):
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != ROOT]
# The export/ tools (training-side, not installed) live at the repository root: appended.
sys.path.append(str(ROOT))
