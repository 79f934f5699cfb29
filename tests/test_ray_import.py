"""Ray stays an extra: pyfastdec and its CLI never import it, and without it the error says
how to install it. Each check runs in a fresh interpreter (sys.modules of this one may
already hold Ray)."""
import subprocess
import sys
from pathlib import Path

from child_python import NEUTRAL_CWD, child_env

MODEL = Path(__file__).resolve().parents[1] / "models" / "en-de"


def python(code: str) -> subprocess.CompletedProcess:
    """Runs outside the checkout with this process's pyfastdec (installed or built in place)."""
    return subprocess.run([sys.executable, "-c", code], cwd=NEUTRAL_CWD, env=child_env(), capture_output=True,
                          text=True, timeout=120)


def test_pyfastdec_and_its_cli_do_not_import_ray():
    r = python("import sys, pyfastdec, pyfastdec.cli, pyfastdec.api\n"
               "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_without_ray_the_module_says_how_to_install_the_extra():
    r = python("import sys; sys.modules['ray'] = None\n"  # what `import ray` meets when Ray is not installed
               "import pyfastdec.ray")
    assert r.returncode != 0
    assert "ImportError: pyfastdec.ray needs Ray Data, which is not installed: pip install 'pyfastdec[ray]'" \
        in r.stderr


def test_without_ray_fastdec_ray_is_one_line_naming_the_extra(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("A man.\n")
    r = python("import sys; sys.modules['ray'] = None\n"
               "from pyfastdec import cli\n"
               f"sys.exit(cli.main(['translate', '-m', {str(MODEL)!r}, '--ray', '-i', {str(src)!r}, "
               f"'-o', {str(tmp_path / 'out.txt')!r}]))")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "fastdec: error: pyfastdec.ray needs Ray Data, which is not installed: pip install 'pyfastdec[ray]' "
        "(or pip install 'ray[data]')"]
