"""The job machinery (pyfastdec/jobs) sits below the command line: the library side that
runs jobs (Ray, the resumable job, row batches) imports it and never pyfastdec.cli, so no
import circle runs through the CLI. Checked in a fresh interpreter, with a stand-in for
Ray where it is not installed (only the imports are checked)."""
import subprocess
import sys

from child_python import NEUTRAL_CWD, child_env

FAKE_RAY = """\
import sys, types
try:
    import ray.data
except ImportError:
    for name in ("ray", "ray.data", "ray.exceptions"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["ray"].data = sys.modules["ray.data"]
    sys.modules["ray"].exceptions = sys.modules["ray.exceptions"]
"""


def test_the_library_side_of_jobs_does_not_import_the_cli():
    code = FAKE_RAY + ("import pyfastdec.jobs.workers, pyfastdec.resumable_job, pyfastdec.row_batches, pyfastdec.ray, "
                       "pyfastdec.ray_cli, pyfastdec.model_summary\n"
                       "print(sorted(m for m in sys.modules if m == 'pyfastdec.cli'))")
    r = subprocess.run([sys.executable, "-c", code], cwd=NEUTRAL_CWD, env=child_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
