"""The onnxruntime backend: an ONNX export (export/onnx_export.py) behind the Backend protocol.

Exists so speed is compared side by side with onnxruntime on the same weights; it is a
peer, not pyfastdec's engine, but a peer set up the way a careful user would set it up:
tensors that live across steps stay onnxruntime OrtValues, handed from one run to the
next through IOBinding, never copied through numpy. The directory holds encoder.onnx,
decoder.onnx, config.json and spm.model (graph contract: the docstring of
export/onnx_export.py). onnxruntime is optional (the `bench` extra) and is imported only
when a backend is built; torch is never imported.

State layout
- Cross-attention K/V: the encoder's outputs, kept as OrtValues for the whole sentence.
- Attention self K/V: per decoder layer the graph's present_key/value OrtValues
  [rows, heads, slots, head_dim], fed back as the next step's past. A slot is not a
  position: `slot_pos[b, j]` is the decoder position slot j holds for row b and
  `alive[b, j]` whether row b may attend to it, so truncation only clears `alive` (the
  rolled-back slots are masked by self_keep and leave no trace) and rows of different
  lengths share one buffer. Dead slots cost compute, so the buffer is compacted (one
  numpy gather) once they outnumber the live ones; greedy never creates any.
- SSRU: the cell c of every position, [rows, capacity, d] in numpy (the graph needs only
  the last one per row, a [rows, d] input, so there is nothing worth binding); truncation
  lowers lengths and the next step reads the cell at lengths[b]-1.
`lengths[rows]` counts held positions, BOS included, as in every backend.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pyfastdec.backends.base import BackendBase, StepOut, Want
from pyfastdec.backends.edit_margin import check_keep_ids, kept_argmax
from pyfastdec.model_dir import check_tokenizer, read_config

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
    cross: list  # per decoder layer: cross K, cross V OrtValues, each [rows, h_i, S, hd]
    src_keep: np.ndarray  # bool [rows, S]


@dataclass
class OnnxState:
    memory: OnnxMemory
    lengths: np.ndarray  # int64 [rows], positions held, BOS included
    # attention: per layer K, V OrtValues [rows, h_i, slots, hd] and the slot bookkeeping
    kv: list = field(default_factory=list)
    alive: np.ndarray | None = None  # bool [rows, slots]
    slot_pos: np.ndarray | None = None  # int64 [rows, slots]
    # SSRU: per layer c [rows, capacity, d]
    cells: list[np.ndarray] = field(default_factory=list)


class OnnxBackend(BackendBase):
    """One exported model directory on onnxruntime (CPU).

    threads: intra-op threads; inter-op is 1 and the graphs run sequentially, so the
    thread count means what it means for the other backends.
    """

    def __init__(self, onnx_dir: str | os.PathLike, threads: int = 1):
        ort = _import_onnxruntime()
        self._ort = ort
        onnx_dir = Path(onnx_dir)
        self.path = onnx_dir
        cfg_file = onnx_dir / CONFIG_FILE
        # The exported directory's config.json and spm.model are copies of the model
        # directory's: validated as ModelDir.load validates them (their checksums
        # included); the weights are the graphs, which onnxruntime checks itself.
        cfg = read_config(cfg_file)
        check_tokenizer(onnx_dir, cfg, cfg_file)
        if cfg.arch != "transformer":
            raise ValueError(f"{cfg_file}: arch: {cfg.arch!r} (expected \"transformer\": only those are exported)")
        self.tokens = dict(cfg.tokens)
        self.vocab_size = cfg.vocab_size
        self.arch = "transformer"
        self.block_size = None
        self.d_model, self.head_dim = cfg.d_model, cfg.head_dim
        self.heads = [layer.heads for layer in cfg.decoder_layers]
        self.proposal_heads = 0  # the exported graphs hold no proposal heads (step refuses proposals)
        self.ssru = cfg.decoder_self == "ssru"
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
        # self_keep), so bind exactly the inputs the session declares.
        self._decoder_inputs = {i.name for i in self._decoder.get_inputs()}
        self._decoder_outputs = [o.name for o in self._decoder.get_outputs()]
        if not self.ssru and "present_key_0" not in self._decoder_outputs:
            raise ValueError(f"{onnx_dir / DECODER_FILE}: no present_key_0 output (exported by an older "
                             "pyfastdec); export again: python -m export.onnx_export MODEL_DIR OUT_DIR")
        self._cross_outputs = [o.name for o in self._encoder.get_outputs() if o.name.startswith("cross_")]

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
        binding = self._encoder.io_binding()
        binding.bind_cpu_input("src_ids", ids)
        binding.bind_cpu_input("src_keep", keep)
        for name in self._cross_outputs:  # the encoder output itself is not needed
            binding.bind_output(name, "cpu")
        self._encoder.run_with_iobinding(binding)
        return OnnxMemory(cross=list(binding.get_outputs()), src_keep=keep)

    def start(self, memory: OnnxMemory) -> OnnxState:
        rows = memory.src_keep.shape[0]
        state = OnnxState(memory, np.zeros(rows, dtype=np.int64))
        if self.ssru:
            state.cells = [np.zeros((rows, 0, self.d_model), dtype=np.float32) for _ in self.heads]
        else:
            state.kv = [self._ortvalue(np.zeros((rows, self.heads[i // 2], 0, self.head_dim), dtype=np.float32))
                        for i in range(2 * len(self.heads))]
            state.alive = np.zeros((rows, 0), dtype=bool)
            state.slot_pos = np.zeros((rows, 0), dtype=np.int64)
        return state

    def step(self, state: OnnxState, tokens: np.ndarray, want: Want = Want()) -> StepOut:
        if want.proposals is not None:
            raise ValueError(f"{self.path}: step: proposals (Want.proposals) are not supported by the onnx "
                             f"backend: its graphs hold no proposal heads; use the native or torch backend")
        tokens = np.asarray(tokens)
        rows = state.lengths.shape[0]
        if tokens.ndim != 2 or tokens.shape[0] != rows:
            raise ValueError(f"step: tokens must be [rows={rows}, n], got shape {tokens.shape}")
        n = tokens.shape[1]
        if want.keep_ids is not None:  # refused before the state changes
            check_keep_ids(want.keep_ids, want.edit_margin, tokens.shape, self.vocab_size)
        offsets = state.lengths[:, None] + np.arange(n)  # absolute positions of the new tokens
        binding = self._decoder.io_binding()
        binding.bind_cpu_input("tokens", np.ascontiguousarray(tokens, dtype=np.int64))
        binding.bind_cpu_input("positions", np.ascontiguousarray(offsets, dtype=np.int64))
        binding.bind_cpu_input("src_keep", state.memory.src_keep)
        for i, value in enumerate(state.memory.cross):
            binding.bind_ortvalue_input(f"cross_{'key' if i % 2 == 0 else 'value'}_{i // 2}", value)
        if self.ssru:
            self._bind_cells(state, binding, n)
        else:
            self._bind_kv(state, binding, n)
        for name in self._decoder_outputs:
            binding.bind_output(name, "cpu")
        self._decoder.run_with_iobinding(binding)
        outs = dict(zip(self._decoder_outputs, binding.get_outputs()))
        if self.ssru:
            row_idx = np.arange(rows)[:, None]
            for i in range(len(self.heads)):
                state.cells[i][row_idx, offsets] = outs[f"new_cell_{i}"].numpy()
        else:
            state.kv = [outs[f"present_{'key' if i % 2 == 0 else 'value'}_{i // 2}"]
                        for i in range(2 * len(self.heads))]
            state.alive = np.concatenate([state.alive, np.ones((rows, n), dtype=bool)], axis=1)
            state.slot_pos = np.concatenate([state.slot_pos, offsets], axis=1)
        state.lengths = state.lengths + n
        return self._outputs(outs["logprobs"].numpy(), want)

    def truncate(self, state: OnnxState, lengths: np.ndarray) -> OnnxState:
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.shape != state.lengths.shape or (lengths > state.lengths).any() or (lengths < 0).any():
            raise ValueError(f"truncate: lengths {lengths.tolist()} outside 0..{state.lengths.tolist()}")
        state.lengths = lengths.copy()
        if not self.ssru:
            state.alive &= state.slot_pos < lengths[:, None]
            self._maybe_compact(state)
        return state

    def select(self, state_or_memory, rows: np.ndarray):
        rows = np.asarray(rows, dtype=np.int64)
        if isinstance(state_or_memory, OnnxMemory):
            return self._select_memory(state_or_memory, rows)
        if isinstance(state_or_memory, OnnxState):
            s = state_or_memory
            # Fancy indexing copies, so duplicated rows (beam search) never share a cache.
            out = OnnxState(self._select_memory(s.memory, rows), s.lengths[rows].copy())
            if self.ssru:
                out.cells = [c[rows] for c in s.cells]
            else:
                out.kv = [self._take_rows(v, rows) for v in s.kv]
                out.alive, out.slot_pos = s.alive[rows], s.slot_pos[rows]
            return out
        raise TypeError(f"select: expected OnnxState or OnnxMemory, got {type(state_or_memory).__name__}")

    def draft(self, memory, prefix, k=None):
        raise ValueError("draft: the onnx backend holds a 'transformer' model; drafters are not exported")

    # ---- helpers
    def _ortvalue(self, array: np.ndarray):
        return self._ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))

    def _take_rows(self, value, rows: np.ndarray):
        return self._ortvalue(value.numpy()[rows])  # .numpy() is a view; indexing copies

    def _select_memory(self, memory: OnnxMemory, rows: np.ndarray) -> OnnxMemory:
        return OnnxMemory([self._take_rows(c, rows) for c in memory.cross], memory.src_keep[rows])

    def _bind_kv(self, state: OnnxState, binding, n: int):
        rows = state.lengths.shape[0]
        # Key j is visible to new token t: a live past slot, or a new token at or before t.
        past_keep = np.broadcast_to(state.alive[:, None, :], (rows, n, state.alive.shape[1]))
        new_keep = np.broadcast_to(np.tril(np.ones((n, n), dtype=bool))[None], (rows, n, n))
        binding.bind_cpu_input("self_keep", np.ascontiguousarray(np.concatenate([past_keep, new_keep], axis=2)))
        for i, value in enumerate(state.kv):
            binding.bind_ortvalue_input(f"past_{'key' if i % 2 == 0 else 'value'}_{i // 2}", value)

    def _maybe_compact(self, state: OnnxState):
        """Drop dead slots once they outnumber the live ones: slot p of row b then holds
        position p (dead padding beyond lengths[b]), one gather per K/V tensor."""
        longest = int(state.lengths.max()) if state.lengths.size else 0
        slots = state.alive.shape[1]
        if slots - longest <= max(16, longest):
            return
        index = np.zeros((state.alive.shape[0], longest), dtype=np.int64)
        b, j = np.nonzero(state.alive)  # live slots hold positions 0..lengths[b]-1 once each
        index[b, state.slot_pos[b, j]] = j
        state.kv = [self._ortvalue(np.take_along_axis(v.numpy(), index[:, None, :, None], axis=2))
                    for v in state.kv]
        state.slot_pos = np.broadcast_to(np.arange(longest), index.shape).copy()
        state.alive = state.slot_pos < state.lengths[:, None]

    def _bind_cells(self, state: OnnxState, binding, n: int):
        rows = state.lengths.shape[0]
        self._reserve_cells(state, int(state.lengths.max()) + n if rows else n)
        for i, cells in enumerate(state.cells):
            last = cells[np.arange(rows), np.maximum(state.lengths - 1, 0)]
            binding.bind_cpu_input(f"past_cell_{i}", np.where((state.lengths > 0)[:, None], last, 0.0).astype(np.float32))

    def _reserve_cells(self, state: OnnxState, need: int):
        cap = state.cells[0].shape[1] if state.cells else 0
        if need <= cap:
            return
        grow = max(need, 2 * cap, 16) - cap  # amortised growth, like modeling.DecoderCache
        rows = state.lengths.shape[0]
        state.cells = [np.concatenate([c, np.zeros((rows, grow, self.d_model), dtype=np.float32)], axis=1)
                       for c in state.cells]

    @staticmethod
    def _outputs(logp: np.ndarray, want: Want) -> StepOut:
        out = StepOut()
        if want.argmax:
            out.argmax = logp.argmax(-1).astype(np.int64)
            if want.keep_ids is not None:
                keep = check_keep_ids(want.keep_ids, want.edit_margin, logp.shape[:2], logp.shape[-1])
                out.argmax = kept_argmax(out.argmax, logp, keep, want.edit_margin)
        elif want.keep_ids is not None:
            raise ValueError("step: Want.keep_ids needs argmax=True (they change the argmax)")
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
