"""The `torch` backend: the reference implementation of pyfastdec's Backend protocol.

Wraps an export.modeling.Seq2Seq (float32; int8 model directories are dequantised by the
reader, optionally with simulated activation quantisation) so every decoding strategy can
be checked against plain PyTorch. Semantics of positions, lengths and `want`: see
pyfastdec/backends/base.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pyfastdec.backends.base import BackendBase, Draft, StepOut, Want
from pyfastdec.backends.edit_margin import check_keep_ids, kept_argmax
from pyfastdec.backends.proposals import accepted_prefix, check_proposals

from .decode import pad_batch
from .decoder_cache import DecoderCache
from .modeling import Seq2Seq


@dataclass
class TorchMemory:
    memory: torch.Tensor  # [rows, S, d]
    keep: torch.Tensor  # [rows, S] bool, False at padding


@dataclass
class TorchState:
    cache: DecoderCache

    @property
    def lengths(self) -> np.ndarray:
        return self.cache.lengths.numpy().copy()


class TorchBackend(BackendBase):
    def __init__(self, model: Seq2Seq, name: str | Path | None = None):
        """name: what errors call the model (from_dir: its directory)."""
        self.model = model.eval()
        cfg = model.cfg
        self.tokens = dict(cfg.tokens)
        self.vocab_size = cfg.vocab_size
        self.arch = cfg.arch
        self.block_size = cfg.block_size
        self.proposal_heads = cfg.heads[0] if cfg.heads else 0  # K; 0: Want.proposals is refused
        self.shares_encoder = cfg.encoder_shared is not None  # memory from attach(host memory)
        self.name = str(name) if name is not None else "this torch model"

    @classmethod
    def from_dir(cls, path: str | Path, simulate_int8: bool = False) -> "TorchBackend":
        from .writer import read_model_dir

        model, _ = read_model_dir(path, simulate_int8=simulate_int8)
        return cls(model, path)

    # ---- protocol
    @torch.no_grad()
    def encode(self, src_ids: list[list[int]]) -> TorchMemory:
        if self.shares_encoder:  # as the native backend: memory comes from the host's (attach)
            raise ValueError(f"encode: {self.name} has no encoder (config encoder.shared); attach it to the "
                             f"memory of the model whose encoder it reads")
        if not src_ids:
            raise ValueError("encode: empty batch")
        for i, s in enumerate(src_ids):
            if len(s) == 0:
                raise ValueError(f"encode: source row {i} is empty (it must at least hold EOS)")
        memory, keep = self.model.encode(pad_batch([list(map(int, s)) for s in src_ids], self.model.pad))
        return TorchMemory(memory, keep)

    def attach(self, host_memory: TorchMemory) -> TorchMemory:
        """A shared-encoder model reads the host's encoder output as it is: its decoder
        projects its own cross-attention K/V from it at every use."""
        if not self.shares_encoder:
            raise ValueError(f"attach: {self.name} has its own encoder (config encoder.shared is absent); use encode")
        return TorchMemory(host_memory.memory, host_memory.keep)

    def start(self, memory: TorchMemory) -> TorchState:
        self._require_ar("start")
        return TorchState(self.model.start_cache(memory.memory, memory.keep))

    @torch.no_grad()
    def step(self, state: TorchState, tokens: np.ndarray, want: Want = Want()) -> StepOut:
        self._require_ar("step")
        tokens = np.asarray(tokens)
        rows = state.cache.lengths.shape[0]
        if tokens.ndim != 2 or tokens.shape[0] != rows:
            raise ValueError(f"step: tokens must be [rows={rows}, n], got shape {tokens.shape}")
        lengths = None
        if want.proposals is not None:  # checked before the state changes
            lengths = check_proposals(want, tokens, self.proposal_heads, self.name)
        if want.keep_ids is not None:
            check_keep_ids(want.keep_ids, want.edit_margin, tokens.shape, self.vocab_size)
        h = self.model.decode_step(torch.from_numpy(tokens.astype(np.int64)), state.cache)
        logp = torch.log_softmax(self.model.logits(h).float(), dim=-1)
        out = self._outputs(logp, want)
        if lengths is not None:
            # The heads read the final state at the accepted position j of each row only.
            j = accepted_prefix(out.argmax, tokens, lengths)
            s = h[torch.arange(rows), torch.from_numpy(j)]
            heads = want.heads or self.proposal_heads
            out.proposals = self.model.proposal_logits(s)[:, :heads].argmax(-1).numpy().astype(np.int64)
            out.accepted = j
        return out

    def truncate(self, state: TorchState, lengths: np.ndarray) -> TorchState:
        state.cache.truncate(torch.as_tensor(np.asarray(lengths), dtype=torch.long))
        return state

    def select(self, state_or_memory, rows: np.ndarray):
        idx = torch.as_tensor(np.asarray(rows), dtype=torch.long)
        if isinstance(state_or_memory, TorchMemory):
            return TorchMemory(state_or_memory.memory[idx], state_or_memory.keep[idx])
        if isinstance(state_or_memory, TorchState):
            return TorchState(state_or_memory.cache.selected(idx))
        raise TypeError(f"select: expected TorchState or TorchMemory, got {type(state_or_memory).__name__}")

    @torch.no_grad()
    def draft(self, memory: TorchMemory, prefix: list[list[int]], k: int | None = None) -> Draft:
        if self.arch != "nat-drafter":
            raise ValueError(f"draft: this backend holds a {self.arch!r} model, not a 'nat-drafter'")
        if len(prefix) != memory.memory.shape[0]:
            raise ValueError(f"draft: {len(prefix)} prefixes for {memory.memory.shape[0]} memory rows")
        k = k or self.block_size
        logits = self.model.draft_logits(memory.memory, memory.keep, [list(map(int, p)) for p in prefix], k)
        best = torch.log_softmax(logits.float(), dim=-1).max(-1)
        return Draft(best.indices.numpy().astype(np.int64), best.values.numpy().astype(np.float32))

    # ---- helpers
    def _require_ar(self, what: str):
        if self.arch != "transformer":
            raise ValueError(f"{what}: a {self.arch!r} model has no incremental decoder; use draft()")

    @staticmethod
    def _outputs(logp: torch.Tensor, want: Want) -> StepOut:
        out = StepOut()
        if want.argmax:
            out.argmax = logp.argmax(-1).numpy().astype(np.int64)
            if want.keep_ids is not None:
                keep = check_keep_ids(want.keep_ids, want.edit_margin, tuple(logp.shape[:2]), logp.shape[-1])
                out.argmax = kept_argmax(out.argmax, logp.numpy(), keep, want.edit_margin)
        elif want.keep_ids is not None:
            raise ValueError("step: Want.keep_ids needs argmax=True (they change the argmax)")
        if want.topk:
            v, i = logp.topk(want.topk, dim=-1)
            out.topk_ids, out.topk_logprobs = i.numpy().astype(np.int64), v.numpy().astype(np.float32)
        if want.ids is not None:
            ids = torch.as_tensor(np.asarray(want.ids), dtype=torch.long)
            if ids.shape != logp.shape[:2]:
                raise ValueError(f"step: want.ids must be [rows, n] = {tuple(logp.shape[:2])}, got {tuple(ids.shape)}")
            out.id_logprobs = logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1).numpy().astype(np.float32)
        if want.logprobs:
            out.logprobs = logp.numpy().astype(np.float32)
        return out
