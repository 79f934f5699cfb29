"""The README's claims that can go stale: its links lead to files in the repository, its
n-best example prints what the CLI prints, and the wheels it describes are the ones the
package metadata and tools/build_wheel.sh promise."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: the test extra installs tomli
    import tomli as tomllib

from child_python import NEUTRAL_CWD, child_env

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_relative_links_lead_to_files_inside_the_repository():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if "://" not in t]
    assert local, "no relative links found: the pattern no longer matches the README"
    for target in local:
        path = (REPO / target).resolve()
        assert path.is_relative_to(REPO), f"README.md links to {target}, outside the repository"
        assert path.exists(), f"README.md links to {target}, which does not exist"


def test_nbest_example_is_what_the_cli_prints():
    block = re.search(r"echo \"(?P<sentence>[^\"]+)\" \| fastdec translate (?P<args>--n-best[^#\n]*)#[^\n]*\n"
                      r"(?P<lines>(?:# \d+ \|\|\|[^\n]*\n)+)", README)
    assert block, "README.md has no n-best example of the form: echo \"...\" | fastdec translate --n-best ..."
    fastdec = shutil.which("fastdec")
    command = [fastdec] if fastdec else [sys.executable, "-m", "pyfastdec.cli"]
    done = subprocess.run([*command, "translate", *block["args"].split()], input=block["sentence"] + "\n",
                          capture_output=True, text=True, timeout=120, cwd=NEUTRAL_CWD, env=child_env())
    assert done.returncode == 0, done.stderr
    shown = [line[2:] for line in block["lines"].splitlines()]
    printed = done.stdout.splitlines()
    assert [line.split(" ||| ")[:2] for line in printed] == [line.split(" ||| ")[:2] for line in shown]
    # The scores to 4 significant digits: the last of the 6 printed may differ between
    # CPUs (float32 parts of the engine run each ISA's own instructions).
    numbers = [[float(x) for x in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", line.split(" ||| ", 2)[2])] for line in printed]
    assert numbers == [pytest.approx([float(x) for x in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", line.split(" ||| ", 2)[2])],
                                     rel=1e-4) for line in shown]


def test_wheels_built_are_the_python_versions_declared():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = sorted((tuple(map(int, c.rsplit(":: ", 1)[1].split("."))) for c in project["classifiers"]
                       if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)))
    script = (REPO / "tools" / "build_wheel.sh").read_text()
    default = re.search(r"pythons=\((python3\.\d+(?: python3\.\d+)*)\)", script)
    assert default, "tools/build_wheel.sh has no default list of interpreters: pythons=(python3.X ...)"
    built = sorted(tuple(map(int, p.removeprefix("python").split("."))) for p in default[1].split())
    assert built == declared
    floor = tuple(map(int, project["requires-python"].removeprefix(">=").split(".")))
    assert built[0] == floor, "the oldest wheel is not the requires-python floor"
