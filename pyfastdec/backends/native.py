"""The native backend: pyfastdec's C++ engine behind the Backend protocol (base.py).

Weights are read zero-copy from the model directory (a memory map) and packed for the
running ISA at load; int8 directories run int8 GEMMs with their calibrated activation
scales. A `shortlist.bin` in the directory (or given explicitly) restricts each row's
output layer to the candidates of its own source sentence, so a row's output never
depends on the other rows of its batch.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pyfastdec.backends.base import BackendBase, Draft, StepOut, Want, step_out
from pyfastdec.backends.proposals import check_proposals
from pyfastdec.model_dir import (CONFIG_FILE, SHORTLIST_FILE, ModelConfig, ModelDir, ModelDirError,
                                 check_shortlist_content, engine_edit_margin)
from pyfastdec.runtime import _engine, check_threads, default_threads  # runtime explains a missing engine
from pyfastdec.model_dir.shortlist import Shortlist

# The engine keeps its scratch (which grows with a call's rows) between calls. Above this
# it is freed after a translate call: the default batch at max_source_len fits under it
# on the packaged models, a batch of thousands of rows does not (bench/README.md).
SCRATCH_KEEP_BYTES = 128 * 2**20


def engine_config(cfg: ModelConfig) -> dict:
    """The config as the C++ engine reads it (config.json's field names)."""
    return {
        "arch": cfg.arch, "d_model": cfg.d_model, "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size, "norm": cfg.norm,
        "encoder": {"layers": [{"heads": s.heads, "ffn": s.ffn} for s in cfg.encoder_layers],
                    "shared": cfg.encoder_shared},
        "decoder": {"self": cfg.decoder_self,
                    "layers": [{"heads": s.heads, "ffn": s.ffn} for s in cfg.decoder_layers]},
        "tokens": dict(cfg.tokens), "block_size": cfg.block_size,
        "quantization": None if cfg.quantization is None else {"weights": cfg.quantization.weights},
        "heads": None if cfg.heads is None else {"count": cfg.heads.count, "hidden": cfg.heads.hidden},
        "activation": cfg.activation, "layer_norm_eps": cfg.layer_norm_eps, "positions": cfg.positions,
        "suppress": list(cfg.suppress),
    }


def load_shortlist(model_dir: ModelDir, shortlist) -> tuple[Shortlist | None, object | None]:
    """The shortlist a backend of model_dir runs with, checked, and the engine's index of
    it (None, None: full vocabulary). shortlist: True = the directory's shortlist.bin if
    present (checked against config.json's checksum); False or None = none; a path = that
    file. The index computes each row's candidates inside the engine (microseconds per
    sentence); Shortlist.candidates stays the reference it is tested against."""
    if shortlist is False or shortlist is None:
        return None, None
    model_path, config = model_dir.path, model_dir.config
    file = model_path / SHORTLIST_FILE if shortlist is True else Path(shortlist)
    own = shortlist is True  # the directory's own file is checked against its config.json checksum
    config_path = model_path / CONFIG_FILE
    if own and not os.path.lexists(file):  # lexists: a dangling link is a broken file
        check_shortlist_content(None, file, config, config_path)
        return None, None
    if not file.is_file():
        what = ("a directory" if file.is_dir() else "a dangling symbolic link" if file.is_symlink()
                else "missing" if not os.path.lexists(file) else "not a regular file")
        raise ModelDirError(f"{file}: (file): {what} (expected a shortlist file, export/SHORTLIST_FORMAT.md"
                            + ("; or no shortlist.bin in the model directory)" if shortlist is True else ")"))
    try:
        if own:
            check_shortlist_content(file.read_bytes(), file, config, config_path)
        loaded = Shortlist.load(file)
    except OSError as err:
        raise ModelDirError(f"{file}: (file): unreadable ({err.strerror})") from None
    except ValueError as err:  # Shortlist.load's messages name the file and the field
        raise ModelDirError(str(err)) from None
    if loaded.vocab_size != config.vocab_size:
        raise ModelDirError(f"{file}: vocab_size: {loaded.vocab_size} differs from the model's "
                            f"{config.vocab_size} ({model_path})")
    index = _engine.ShortlistIndex(loaded.vocab_size, loaded.frequent, loaded.indptr, loaded.targets,
                                   loaded.first_fill_id)
    return loaded, index


class NativeBackend(BackendBase):
    """One model directory on the native engine.

    path: the directory, or a ModelDir already loaded (validated) from it: a loaded one is
    not read again, which spares a second checksum pass over the weights.
    threads: intra-op threads (default: physical cores, or FASTDEC_THREADS).
    shortlist: True = use the directory's shortlist.bin if present; False = full
    vocabulary; a path = that shortlist file.
    """

    def __init__(self, path: str | os.PathLike | ModelDir, threads: int | None = None,
                 shortlist: bool | str | os.PathLike = True):
        # ModelDir instances only come from ModelDir.load, so the engine never sees an
        # unvalidated directory either way.
        self._read_model_dir(path if isinstance(path, ModelDir) else ModelDir.load(path))
        cfg = self.config
        scales = cfg.quantization.activation_scales if cfg.quantization else {}
        self.threads = default_threads() if threads is None else check_threads(threads)
        self._model = _engine.Model(engine_config(cfg), self.model_dir.tensors, dict(scales), self.threads)
        self.shortlist, self._shortlist_index = load_shortlist(self.model_dir, shortlist)

    # ---- Backend protocol
    def encode(self, src_ids: list[list[int]]):
        if self.shares_encoder:
            raise ValueError(f"encode: {self.model_dir.path} has no encoder (config.json encoder.shared); "
                             f"attach it to the memory of the model whose encoder it reads")
        sources = [list(map(int, s)) for s in src_ids]
        return self._model.encode(sources, self._shortlist_index)

    def encode_full_vocabulary(self, src_ids: list[list[int]]):
        """encode without the shortlist: every id of the vocabulary gets its log-prob
        (scoring given targets, Translator.score_batch, must not give -inf to a token
        outside a row's shortlist)."""
        if self.shares_encoder:
            raise ValueError(f"encode: {self.model_dir.path} has no encoder (config.json encoder.shared)")
        return self._model.encode([list(map(int, s)) for s in src_ids], None)

    def attach(self, host_memory):
        """This model's memory of the host's rows (a shared-encoder model): its own
        cross-attention K/V from the host's encoder output, the host's shortlists. The
        host must be the model whose encoder config.json encoder.shared names
        (model_dir.check_shared_encoder, checked where the two are paired)."""
        if not self.shares_encoder:
            raise ValueError(f"attach: {self.model_dir.path} has its own encoder (config.json encoder.shared is "
                             f"absent); use encode")
        return self._model.attach(host_memory)

    def start(self, memory):
        self._require_ar("start")
        return self._model.start(memory)

    def step(self, state, tokens: np.ndarray, want: Want = Want()) -> StepOut:
        self._require_ar("step")
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        ids = None if want.ids is None else np.ascontiguousarray(want.ids, dtype=np.int64)
        proposals = None
        if want.proposals is not None and tokens.ndim == 2:  # other shapes: the engine names the error
            proposals = check_proposals(want, tokens, self.proposal_heads, self.model_dir.path)
        keep = None if want.keep_ids is None else np.ascontiguousarray(want.keep_ids, dtype=np.int64)
        out = self._model.step(state, tokens, argmax=want.argmax, topk=want.topk, ids=ids,
                               logprobs=want.logprobs, proposals=proposals,
                               heads=want.heads if proposals is not None else 0, keep_ids=keep,
                               edit_margin=engine_edit_margin(want.edit_margin), logits=want.logits)
        return step_out(out)

    def draft_greedy(self, state, tokens: np.ndarray, widths: np.ndarray, max_new: int, min_logprob: float):
        """BiLD's little-model drafting in one engine call (decoding/bild.py; the loop it
        replaces is bild's own, which other backends run): (drafts [rows, max_new] with -1
        past each row's count, counts [rows], fed [rows]); see Model::draft_greedy."""
        self._require_ar("draft_greedy")
        return self._model.draft_greedy(state, np.ascontiguousarray(tokens, dtype=np.int64),
                                        np.ascontiguousarray(widths, dtype=np.int64), int(max_new), float(min_logprob))

    def select(self, state_or_memory, rows: np.ndarray):
        rows = [int(r) for r in np.asarray(rows).reshape(-1)]
        if isinstance(state_or_memory, _engine.State):
            return self._model.select_state(state_or_memory, rows)
        if isinstance(state_or_memory, _engine.Memory):
            return self._model.select_memory(state_or_memory, rows)
        raise TypeError(f"select: expected a native State or Memory, got {type(state_or_memory).__name__}")

    def draft(self, memory, prefix: list[list[int]], k: int | None = None) -> Draft:
        ids, logprobs = self._model.draft(memory, [list(map(int, p)) for p in prefix], k or self.block_size)
        return Draft(ids, logprobs)

    def scratch_bytes(self) -> int:
        """Bytes of scratch the engine keeps between calls."""
        return self._model.scratch_bytes()

    def release_scratch(self, keep_bytes: int | None = None) -> int:
        """Frees the engine's scratch if it holds more than keep_bytes (default
        SCRATCH_KEEP_BYTES), as after a batch far beyond the usual size, and returns the
        freed heap pages to the system; the next call grows it again. Returns the bytes
        freed (0: nothing done)."""
        return self._model.release_scratch(SCRATCH_KEEP_BYTES if keep_bytes is None else keep_bytes)
