"""pytest set-up for the benchmarks' tests (bench/ is in testpaths, so plain `pytest` runs them).

Two things differ from tests/conftest.py:

- bench/ is a package, so pytest imports every module here as `bench.<name>` with the
  repository root first on sys.path ("prepend" import mode), again at each test module.
  A root without a built engine (a checkout after `pip install .`, as in CI) would then
  shadow the installed pyfastdec. So, as tests/conftest.py does for tests/, the root moves
  behind site-packages, and pyfastdec is imported now, while the installed package is the
  one found: later re-insertions of the root cannot replace a module already imported.
- The pytest-benchmark suites (test_bench_*.py) time nothing unless asked to: plain
  `pytest` runs each benchmarked call once, as a test. `pytest bench/ --benchmark-only`
  (or `--benchmark-enable`) times them, as before, every suite: the default `-m 'not
  slow'` would otherwise drop test_bench_step.py, whose models take a while to build.
"""
from __future__ import annotations

import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ENGINELESS_ROOT = not any((ROOT / "pyfastdec" / f"_engine{suffix}").is_file() for suffix in EXTENSION_SUFFIXES)


def _drop_root() -> None:
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != ROOT]


if ENGINELESS_ROOT:
    _drop_root()
    try:
        import pyfastdec  # noqa: F401  (pins the installed package; see the docstring)
    except ImportError:
        pass  # no engine anywhere: the tests that need one fail with pyfastdec's own message
    sys.path.append(str(ROOT))  # bench/ and export/ live only here


def pytest_collection_finish(session):
    # Collecting bench/ put the root back in front of sys.path, and a process a test spawns
    # (fastdec --workers: multiprocessing's spawn) takes this sys.path and would import the
    # engine-less checkout: the root goes behind site-packages again before any test runs.
    if ENGINELESS_ROOT:
        _drop_root()
        sys.path.append(str(ROOT))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # Before pytest-benchmark's own pytest_configure (trylast) reads the option.
    if not config.pluginmanager.hasplugin("benchmark"):
        return
    if not (config.getoption("benchmark_only") or config.getoption("benchmark_enable")):
        config.option.benchmark_disable = True
    elif config.option.markexpr == "not slow":  # pyproject's addopts, not a -m of the caller's
        config.option.markexpr = ""  # timing means every suite, the slow-marked decoder step too
