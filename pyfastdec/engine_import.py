"""Imports the compiled engine, pyfastdec._engine, and says what to do when it is not there.

The usual cause is a source checkout: `python -m ...` and `python -c ...` put the current
directory first on sys.path, so from the repository root `import pyfastdec` finds the
source folder, which holds no compiled engine unless it was built in place, ahead of the
package that `pip install .` put in site-packages. Python's own error for that ("cannot
import name '_engine' from partially initialized module") points at a circular import.
"""
from __future__ import annotations

import importlib
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import ModuleType

PACKAGE = Path(__file__).resolve().parent
BUILD_IN_PLACE = "`pip install -e .` or `python tools/build_inplace.py`"


def import_engine() -> ModuleType:
    """pyfastdec._engine, or an ImportError that names the folder and the fix."""
    try:
        return importlib.import_module("pyfastdec._engine")
    except ImportError as error:
        if str(error).startswith("FASTDEC_ISA"):  # it loaded and refused the setting: nothing to reinstall
            raise
        raise ImportError(engine_missing_message(PACKAGE, error)) from error


def engine_file(package: Path) -> Path | None:
    """The engine this interpreter would load from `package`, if one was built there."""
    for suffix in EXTENSION_SUFFIXES:
        if (package / f"_engine{suffix}").is_file():
            return package / f"_engine{suffix}"
    return None


def installed_elsewhere(package: Path) -> Path | None:
    """Another pyfastdec on sys.path that has its engine (what `pip install .` put in
    site-packages), which the source folder hides."""
    for entry in sys.path:
        candidate = Path(entry or ".").resolve() / "pyfastdec"
        if candidate != package and engine_file(candidate) is not None:
            return candidate
    return None


def engine_missing_message(package: Path, error: ImportError) -> str:
    found = engine_file(package)
    if found is not None:  # there, but the loader refused it (wrong glibc, corrupt file...)
        return f"{found}: pyfastdec's compiled engine did not load: {error}"
    expected = f"_engine{EXTENSION_SUFFIXES[0]}"
    others = sorted(p.name for p in package.glob("_engine.*"))
    message = f"{package}: pyfastdec's compiled engine ({expected}) is not in this folder"
    if others:
        message += f" (only {', '.join(others)}, built for another Python)"
    if not (package.parent / "CMakeLists.txt").is_file():  # not a source checkout
        return message + "; reinstall pyfastdec (`pip install --force-reinstall pyfastdec`)"
    message += (f"; you are importing the source folder of the checkout {package.parent}, which "
                f"comes first on sys.path when Python runs from there")
    installed = installed_elsewhere(package)
    if installed is not None:
        message += f" and hides the installed pyfastdec in {installed}"
    return (message + f": run from outside the repository to use the installed package, or build "
            f"in place to use this one: {BUILD_IN_PLACE}")
