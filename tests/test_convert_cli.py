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
    assert done.returncode == 0 and "--calibrate" in done.stdout

