"""device= / --device: an unknown device name, and CUDA asked for where it cannot run (a
build without pyfastdec._engine_cuda, or no GPU), each give one line naming the option,
what is wrong and what was expected, before any decoding."""
from __future__ import annotations

import importlib

import pytest

from pyfastdec import Corrector, Translator, cli
from pyfastdec.backends import cuda as cuda_backend


def gpu_usable() -> bool:
    try:
        importlib.import_module("pyfastdec._engine_cuda").device_name()
        return True
    except (ImportError, RuntimeError):
        return False


@pytest.mark.parametrize("cls", [Translator, Corrector])
def test_unknown_device_name(cls):
    with pytest.raises(ValueError) as err:
        cls(device="tpu")
    assert str(err.value) == "device: 'tpu' is not a device name (expected one of cpu, cuda)"


@pytest.mark.parametrize("cls", [Translator, Corrector])
def test_cuda_on_a_build_without_it(cls, monkeypatch):
    monkeypatch.setitem(cuda_backend.MODULES, "cuda", "_engine_cuda_absent")  # as a CPU-only build has none
    with pytest.raises(cuda_backend.DeviceUnavailable) as err:
        cls(device="cuda")
    message = str(err.value)
    assert "\n" not in message and message.startswith("device: 'cuda' asked for, but pyfastdec._engine_cuda_absent "
                                                      "is not in this build; build it with FASTDEC_CUDA=1")


@pytest.mark.skipif(gpu_usable(), reason="a GPU is usable here: this checks the message where none is")
def test_cuda_without_a_usable_gpu(monkeypatch):
    """Here either the module is missing (a CPU-only build) or it loads and finds no GPU;
    both are one line naming device 'cuda'."""
    with pytest.raises(cuda_backend.DeviceUnavailable) as err:
        Translator(device="cuda")
    message = str(err.value)
    assert "\n" not in message and message.startswith("device: 'cuda' asked for, but ")
    assert ("is not in this build" in message) or ("no CUDA GPU is usable here" in message)


@pytest.mark.parametrize("command", ["translate", "correct"])
def test_cli_device_errors(command, capsys, monkeypatch, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--device", "gpu"])
    assert exit_.value.code == 2
    assert "argument --device: invalid choice: 'gpu' (choose from 'cpu', 'cuda')" in capsys.readouterr().err
    monkeypatch.setitem(cuda_backend.MODULES, "cuda", "_engine_cuda_absent")
    (tmp_path / "in.txt").write_text("hello\n")
    assert cli.main([command, "--device", "cuda", "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fastdec: error: device: 'cuda' asked for, but pyfastdec._engine_cuda_absent is not in this "
                   f"build; build it with FASTDEC_CUDA=1 pip install . (README, 'GPU (CUDA) build')"]


def test_device_reaches_worker_processes():
    """--workers builds each process's Translator from the ModelSpec: the device rides along."""
    from pyfastdec.jobs.options import ModelSpec

    spec = cli.model_spec(cli.build_parser().parse_args(["translate", "--device", "cuda"]))
    assert spec.device == "cuda"
    assert ModelSpec("translate", None, None, 1, "int8", True).device == "cpu"
