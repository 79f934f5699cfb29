"""Which backend runs a model: device "cpu" (the native engine) or "cuda" (the GPU model,
backends/cuda.py). One place, so the API, the command line and worker processes agree."""
from __future__ import annotations

from pyfastdec.backends.cuda import DEVICES, CudaBackend, DeviceUnavailable, check_device
from pyfastdec.backends.native import NativeBackend

__all__ = ["DEVICES", "DeviceUnavailable", "check_device", "model_backends"]


def model_backends(model_dir, drafter_dir, device: str, threads: int, shortlist):
    """(verifier, drafter or None) for loaded directories on `device`. On "cuda" both run
    on the GPU model; a ValueError (DeviceUnavailable: one line) where that cannot be."""
    if check_device(device) == "cpu":
        return (NativeBackend(model_dir, threads=threads, shortlist=shortlist),
                None if drafter_dir is None else NativeBackend(drafter_dir, threads=threads, shortlist=shortlist))
    verifier = CudaBackend(model_dir, shortlist=shortlist)
    return verifier, None if drafter_dir is None else CudaBackend(drafter_dir, shortlist=shortlist)
