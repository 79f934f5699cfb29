"""The onnxruntime backend: an ONNX export (export/onnx_export.py) behind the Backend protocol.

Exists so speed is compared side by side with onnxruntime on the same weights; it is a
peer, not pyfastdec's engine, so clarity and exactness beat speed here. The directory
holds encoder.onnx, decoder.onnx, config.json and spm.model (graph contract: the
docstring of export/onnx_export.py). onnxruntime is optional (the `bench` extra) and is
imported only when a backend is built; torch is never imported.

State layout: per decoder layer, K and V of every position held, padded per batch as
[rows, capacity, heads, head_dim] (SSRU: the cell c of every position, [rows, capacity, d]),
plus lengths[rows] (BOS included). A step hands the graph the first max(lengths) slots
and a mask hiding each row's slots >= lengths[b]; the graph returns only the new
positions' K/V, which are written at each row's own offset. Truncation therefore just
lowers lengths: stale slots are masked (attention) or never read (SSRU reads the cell at
lengths[b]-1), so they leave no trace.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pyfastdec.backends.base import StepOut, Want

ENCODER_FILE, DECODER_FILE, CONFIG_FILE = "encoder.onnx", "decoder.onnx", "config.json"


def _import_onnxruntime():
    try:
        import onnxruntime
    except ImportError as err:
        raise ImportError("the onnx backend needs onnxruntime: pip install 'pyfastdec[bench]' "
                          "(or pip install onnxruntime)") from err
    return onnxruntime


@dataclass
class OnnxMemory:
    cross: list[np.ndarray]  # per decoder layer: cross K, cross V, ... each [rows, h_i, S, hd]
    src_keep: np.ndarray  # bool [rows, S]


@dataclass
class OnnxState:
    memory: OnnxMemory
    lengths: np.ndarray  # int64 [rows], positions held, BOS included
    # attention: per layer (K, V) [rows, cap, h_i, hd]; SSRU: per layer c [rows, cap, d]
    caches: list[np.ndarray] = field(default_factory=list)


class OnnxBackend:
    """One exported model directory on onnxruntime (CPU).

    threads: intra-op threads; inter-op is 1 and the graphs run sequentially, so the
    thread count means what it means for the other backends.
    """

    def __init__(self, onnx_dir: str | os.PathLike, threads: int = 1):
        ort = _import_onnxruntime()
        onnx_dir = Path(onnx_dir)
        cfg_file = onnx_dir / CONFIG_FILE
        try:
            cfg = json.loads(cfg_file.read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"{cfg_file}: unreadable ({err})") from None
        if cfg.get("arch") != "transformer":
            raise ValueError(f"{cfg_file}: field 'arch' is {cfg.get('arch')!r}; only 'transformer' is exported")
        self.tokens = dict(cfg["tokens"])
        self.vocab_size = int(cfg["vocab_size"])
        self.arch = "transformer"
        self.block_size = None
        self.d_model, self.head_dim = int(cfg["d_model"]), int(cfg["head_dim"])
        self.heads = [int(layer["heads"]) for layer in cfg["decoder"]["layers"]]
        self.ssru = cfg["decoder"]["self"] == "ssru"
        self.threads = threads
        info_file = onnx_dir / "onnx_export.json"  # which weights the graphs hold (float32 / int8)
        self.export_info = json.loads(info_file.read_text()) if info_file.is_file() else {}

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sessions = []
        for name in (ENCODER_FILE, DECODER_FILE):
            path = onnx_dir / name
            if not path.is_file():
                raise ValueError(f"{path}: missing")
            sessions.append(ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]))
        self._encoder, self._decoder = sessions
        # The exporter drops graph inputs a model does not use (SSRU graphs have no
        # self_keep), so feed exactly the inputs the session declares.
        self._decoder_inputs = {i.name for i in self._decoder.get_inputs()}
        self._decoder_outputs = [o.name for o in self._decoder.get_outputs()]

    # ---- protocol
    def encode(self, src_ids: list[list[int]]) -> OnnxMemory:
        if not src_ids:
            raise ValueError("encode: empty batch")
        for i, s in enumerate(src_ids):
            if len(s) == 0:
                raise ValueError(f"encode: source row {i} is empty (it must at least hold EOS)")
        width = max(len(s) for s in src_ids)
        ids = np.full((len(src_ids), width), self.tokens["pad"], dtype=np.int64)
        for i, s in enumerate(src_ids):
            ids[i, : len(s)] = np.asarray(s, dtype=np.int64)
        keep = ids != self.tokens["pad"]
        outs = self._encoder.run(None, {"src_ids": ids, "src_keep": keep})
        return OnnxMemory(cross=outs[1:], src_keep=keep)

    def start(self, memory: OnnxMemory) -> OnnxState:
        rows = memory.src_keep.shape[0]
        return OnnxState(memory, np.zeros(rows, dtype=np.int64), [self._empty_cache(rows, i, 0)
                                                                    for i in range(self._per_layer_count())])

    def step(self, state: OnnxState, tokens: np.ndarray, want: Want = Want()) -> StepOut:
        tokens = np.asarray(tokens)
        rows = state.lengths.shape[0]
        if tokens.ndim != 2 or tokens.shape[0] != rows:
            raise ValueError(f"step: tokens must be [rows={rows}, n], got shape {tokens.shape}")
        n = tokens.shape[1]
        past = int(state.lengths.max()) if rows else 0
        self._reserve(state, past + n)  # before reading: an SSRU row at length 0 reads slot 0
        offsets = state.lengths[:, None] + np.arange(n)  # absolute positions of the new tokens
        feed = {"tokens": tokens.astype(np.int64), "positions": offsets.astype(np.int64),
                "src_keep": state.memory.src_keep}
        if "self_keep" in self._decoder_inputs:
            past_keep = np.arange(past)[None, None, :] < state.lengths[:, None, None]  # [rows,1,P]
            new_keep = np.tril(np.ones((n, n), dtype=bool))[None]  # causal among the new tokens
            feed["self_keep"] = np.concatenate([np.broadcast_to(past_keep, (rows, n, past)),
                                                np.broadcast_to(new_keep, (rows, n, n))], axis=2)
        for i in range(len(self.heads)):
            feed[f"cross_key_{i}"], feed[f"cross_value_{i}"] = state.memory.cross[2 * i], state.memory.cross[2 * i + 1]
            if self.ssru:
                cells = state.caches[i]
                last = cells[np.arange(rows), np.maximum(state.lengths - 1, 0)]
                feed[f"past_cell_{i}"] = np.where((state.lengths > 0)[:, None], last, 0.0).astype(np.float32)
            else:
                # [rows, P, h, hd] slots -> the graph's [rows, h, P, hd]
                feed[f"past_key_{i}"] = np.ascontiguousarray(state.caches[2 * i][:, :past].transpose(0, 2, 1, 3))
                feed[f"past_value_{i}"] = np.ascontiguousarray(state.caches[2 * i + 1][:, :past].transpose(0, 2, 1, 3))
        outs = dict(zip(self._decoder_outputs, self._decoder.run(None, feed)))
        row_idx = np.arange(rows)[:, None]
        for i in range(len(self.heads)):
            if self.ssru:
                state.caches[i][row_idx, offsets] = outs[f"new_cell_{i}"]
            else:  # new K/V [rows, h, n, hd] -> slots [rows, n, h, hd] at each row's offset
                state.caches[2 * i][row_idx, offsets] = outs[f"new_key_{i}"].transpose(0, 2, 1, 3)
                state.caches[2 * i + 1][row_idx, offsets] = outs[f"new_value_{i}"].transpose(0, 2, 1, 3)
        state.lengths = state.lengths + n
        return self._outputs(outs["logprobs"], want)

    def truncate(self, state: OnnxState, lengths: np.ndarray) -> OnnxState:
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.shape != state.lengths.shape or (lengths > state.lengths).any() or (lengths < 0).any():
            raise ValueError(f"truncate: lengths {lengths.tolist()} outside 0..{state.lengths.tolist()}")
        state.lengths = lengths.copy()
        return state

    def select(self, state_or_memory, rows: np.ndarray):
        rows = np.asarray(rows, dtype=np.int64)
        if isinstance(state_or_memory, OnnxMemory):
            return self._select_memory(state_or_memory, rows)
        if isinstance(state_or_memory, OnnxState):
            s = state_or_memory
            # Fancy indexing copies, so duplicated rows (beam search) never share a cache.
            return OnnxState(self._select_memory(s.memory, rows), s.lengths[rows].copy(),
                             [c[rows] for c in s.caches])
        raise TypeError(f"select: expected OnnxState or OnnxMemory, got {type(state_or_memory).__name__}")

    def draft(self, memory, prefix, k=None):
        raise ValueError("draft: the onnx backend holds a 'transformer' model; drafters are not exported")

    # ---- helpers
    @staticmethod
    def _select_memory(memory: OnnxMemory, rows: np.ndarray) -> OnnxMemory:
        return OnnxMemory([c[rows] for c in memory.cross], memory.src_keep[rows])

    def _per_layer_count(self) -> int:
        return len(self.heads) * (1 if self.ssru else 2)

    def _empty_cache(self, rows: int, index: int, capacity: int) -> np.ndarray:
        if self.ssru:
            return np.zeros((rows, capacity, self.d_model), dtype=np.float32)
        return np.zeros((rows, capacity, self.heads[index // 2], self.head_dim), dtype=np.float32)

    def _reserve(self, state: OnnxState, need: int):
        cap = state.caches[0].shape[1] if state.caches else 0
        if need <= cap:
            return
        grow = max(need, 2 * cap, 16) - cap  # amortised growth, like modeling.DecoderCache
        rows = state.lengths.shape[0]
        state.caches = [np.concatenate([c, self._empty_cache(rows, i, grow)], axis=1)
                        for i, c in enumerate(state.caches)]

    @staticmethod
    def _outputs(logp: np.ndarray, want: Want) -> StepOut:
        out = StepOut()
        if want.argmax:
            out.argmax = logp.argmax(-1).astype(np.int64)
        if want.topk:
            order = np.argsort(-logp, axis=-1, kind="stable")[..., : want.topk]
            out.topk_ids = order.astype(np.int64)
            out.topk_logprobs = np.take_along_axis(logp, order, -1).astype(np.float32)
        if want.ids is not None:
            ids = np.asarray(want.ids, dtype=np.int64)
            if ids.shape != logp.shape[:2]:
                raise ValueError(f"step: want.ids must be [rows, n] = {logp.shape[:2]}, got {ids.shape}")
            out.id_logprobs = np.take_along_axis(logp, ids[..., None], -1)[..., 0].astype(np.float32)
        if want.logprobs:
            out.logprobs = logp.astype(np.float32)
        return out
