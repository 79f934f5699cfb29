"""The CUDA backend: the GPU model (csrc/cuda/gpu_model.h) behind the Backend protocol
(base.py), from the same model directories as the native backend.

Weights go to the GPU in float16 (cuBLAS GEMMs, float32 accumulation and activations);
an int8 directory is dequantised first (q * weight_scale, as the engine reads it). The
encoder output, cross-attention K/V, shortlist masks and the KV cache or SSRU states stay
on the GPU; a step uploads token ids and downloads winners (argmax / top-k), and full
log-probs or logits only when asked for. Nothing in the protocol changed for it.

`ops="reference"` runs the same C++ model over plain float32 reference ops on the CPU
(pyfastdec._engine_gpuref, built with FASTDEC_GPU_REFERENCE=1 or FASTDEC_CUDA=1): the
host-side logic, tested without a GPU against the CPU engine (tests/test_gpu_reference.py).

A NAT drafter (arch "nat-drafter") drafts on the GPU too, recomputing [BOS, prefix] each
call (the CPU engine caches it). Not here: `draft_greedy` (BiLD runs its loop over `step`).
"""
from __future__ import annotations

import importlib
import os

import numpy as np

from pyfastdec.backends.base import BackendBase, Draft, StepOut, Want, step_out
from pyfastdec.backends.edit_margin import check_keep_ids
from pyfastdec.backends.proposals import check_proposals
from pyfastdec.model_dir import ModelDir, engine_edit_margin
from pyfastdec.model_dir.int8_rows import dequantize_rows

DEVICES = ("cpu", "cuda")
MODULES = {"cuda": "_engine_cuda", "reference": "_engine_gpuref"}
BUILD_HINT = {"cuda": "build it with FASTDEC_CUDA=1 pip install . (README, 'GPU (CUDA) build')",
              "reference": "build it with FASTDEC_GPU_REFERENCE=1 python tools/build_inplace.py"}


class DeviceUnavailable(ValueError):
    """CUDA asked for where it cannot run: a build without pyfastdec._engine_cuda, or no GPU."""


def check_device(device) -> str:
    """device as given, or a one-line ValueError naming it and the choices."""
    if device not in DEVICES:
        raise ValueError(f"device: {device!r} is not a device name (expected one of {', '.join(DEVICES)})")
    return device


def gpu_engine(ops: str = "cuda"):
    """The GPU model's module for `ops`, or DeviceUnavailable saying why in one line."""
    if ops not in MODULES:
        raise ValueError(f"ops: {ops!r} is not one of {', '.join(MODULES)}")
    name = MODULES[ops]
    try:
        module = importlib.import_module(f"pyfastdec.{name}")
    except ImportError as err:
        missing = isinstance(err, ModuleNotFoundError) and err.name == f"pyfastdec.{name}"
        why = "is not in this build" if missing else f"does not load ({err})"
        raise DeviceUnavailable(f"device: 'cuda' asked for, but pyfastdec.{name} {why}; {BUILD_HINT[ops]}"
                                if ops == "cuda" else f"ops 'reference': pyfastdec.{name} {why}; {BUILD_HINT[ops]}"
                                ) from None
    return module


def float_tensors(model_dir: ModelDir) -> dict[str, np.ndarray]:
    """The directory's weights as float32: int8 linears and embedding dequantised
    (q * weight_scale per output row), float32 ones as they are."""
    tensors = model_dir.tensors
    out = {}
    for name, value in tensors.items():
        if name.endswith(".weight_scale"):
            continue
        if value.dtype == np.int8:
            out[name] = dequantize_rows(value, tensors[name + "_scale"])
        else:
            out[name] = np.asarray(value, dtype=np.float32)
    return out


class CudaBackend(BackendBase):
    """One model directory on the GPU model.

    path: the directory, or a ModelDir already loaded from it. shortlist: as the native
    backend's (True: the directory's shortlist.bin if present; False: full vocabulary;
    a path: that file). ops: "cuda" (the GPU) or "reference" (the CPU twin, for tests).
    """

    def __init__(self, path: str | os.PathLike | ModelDir, shortlist=True, ops: str = "cuda"):
        from pyfastdec.backends.native import engine_config, load_shortlist

        engine = gpu_engine(ops)
        try:  # the check: the name itself is not kept
            engine.device_name()
        except RuntimeError as err:  # no usable GPU: the CUDA ops say why
            raise DeviceUnavailable(f"device: 'cuda' asked for, but {err}") from None
        self._read_model_dir(path if isinstance(path, ModelDir) else ModelDir.load(path))
        self._model = engine.Model(engine_config(self.config), float_tensors(self.model_dir))
        self._engine = engine
        # The shortlist as the native backend loads and checks it; candidates come from
        # the CPU engine's index (the same lists as the native backend's).
        self.shortlist, self._shortlist_index = load_shortlist(self.model_dir, shortlist)

    # ---- Backend protocol
    def _sources(self, src_ids):
        if self.shares_encoder:
            raise ValueError(f"encode: {self.model_dir.path} has no encoder (config.json encoder.shared); "
                             f"attach it to the memory of the model whose encoder it reads")
        return [list(map(int, s)) for s in src_ids]

    def encode(self, src_ids):
        sources = self._sources(src_ids)
        lists = [] if self._shortlist_index is None else [
            self._shortlist_index.candidates(s).tolist() for s in sources]
        return self._model.encode(sources, lists)

    def encode_full_vocabulary(self, src_ids):
        return self._model.encode(self._sources(src_ids), [])

    def attach(self, host_memory):
        if not self.shares_encoder:
            raise ValueError(f"attach: {self.model_dir.path} has its own encoder (config.json encoder.shared is "
                             f"absent); use encode")
        if not isinstance(host_memory, self._engine.Memory):
            raise TypeError(f"attach: expected a memory of the same GPU engine, got {type(host_memory).__name__}")
        return self._model.attach(host_memory)

    def start(self, memory):
        self._require_ar("start")
        return self._model.start(memory)

    def draft(self, memory, prefix: list[list[int]], k: int | None = None) -> Draft:
        if self.arch != "nat-drafter":
            raise ValueError(f"draft: {self.model_dir.path} is not a drafter (arch {self.arch!r})")
        ids, logprobs = self._model.draft(memory, [list(map(int, p)) for p in prefix], int(k or self.block_size))
        return Draft(ids, logprobs)


    def step(self, state, tokens: np.ndarray, want: Want = Want()) -> StepOut:
        self._require_ar("step")
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        if tokens.ndim != 2:
            raise ValueError(f"step: tokens must be [rows, n], got {tokens.ndim} dimensions")
        if not 0 <= want.topk <= 64:
            raise ValueError(f"step: topk {want.topk} outside [0, 64]")
        ids = None if want.ids is None else np.ascontiguousarray(want.ids, dtype=np.int64)
        proposals = None
        if want.proposals is not None:
            proposals = check_proposals(want, tokens, self.proposal_heads, self.model_dir.path)
        keep = None
        if want.keep_ids is not None:
            keep = check_keep_ids(want.keep_ids, want.edit_margin, tokens.shape, self.vocab_size)
        out = self._model.step(state, tokens, argmax=want.argmax, topk=want.topk, ids=ids,
                               logprobs=want.logprobs, proposals=proposals,
                               heads=want.heads if proposals is not None else 0, keep_ids=keep,
                               edit_margin=engine_edit_margin(want.edit_margin), logits=want.logits)
        return step_out(out)

    def select(self, state_or_memory, rows: np.ndarray):
        rows = [int(r) for r in np.asarray(rows).reshape(-1)]
        if isinstance(state_or_memory, self._engine.State):
            return self._model.select_state(state_or_memory, rows)
        if isinstance(state_or_memory, self._engine.Memory):
            return self._model.select_memory(state_or_memory, rows)
        raise TypeError(f"select: expected a GPU State or Memory, got {type(state_or_memory).__name__}")
