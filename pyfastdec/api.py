"""The Python API: raw text in, raw text out.

    from pyfastdec import Translator
    t = Translator("path/to/en-de", drafter="path/to/en-de-drafter")
    t.translate(["A man rides a bike down the street."])          # GAD, = greedy output
    t.translate(texts, algo="beam", beam_size=5, n_best=3, return_scores=True)

A Translator holds one verifier model (and optionally a GAD drafter) on the native
engine. Each call encodes with the model directory's sentencepiece model, appends EOS,
sorts the sources by length so a batch holds sources of similar length (little padding,
rows finishing together), decodes batch by batch and returns the outputs in input order.
Every input is decoded sentence by sentence (the models are trained on single
sentences): control characters become spaces, the text is split at sentence boundaries
(text.split_sentences), each sentence is one unit, and the units of all inputs are
batched together by length; a line's outputs are rejoined in order with single spaces.
A single sentence longer than the model's max_source_len is cut between words
(text.cut_ids) and a LongInputWarning names the input.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from pyfastdec.backends.base import Backend, Want
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import DecodeStats, beam_search, blockwise, gad, gad_plus, greedy, iad
from pyfastdec.decoding.draft_length import AdaptiveDraftLength, DraftLengthPolicy
from pyfastdec.decoding.source_draft_length import SourceDraftLength
from pyfastdec.default_strategy import StrategyChoice, default_strategy
from pyfastdec.model_dir import ModelDir, ModelDirError
from pyfastdec.runtime import check_threads, default_threads
from pyfastdec.size_limits import MAX_BATCH_SIZE, MAX_BEAM_SIZE, MAX_BETA, MAX_BLOCK, MAX_N_BEST, check_size
from pyfastdec.text import Tokenizer, clean_text, load_tokenizer, sentence_units

ALGOS = ("greedy", "beam", "iad", "gad", "gad++", "blockwise")
COMPUTE_TYPES = ("int8", "float32")
# The models shipped inside the package (pyfastdec/models/<name>), by role.
DEFAULT_MODELS = {"translate": "en-de", "drafter": "en-de-drafter", "correct": "uk-gec"}


class LongInputWarning(UserWarning):
    """A sentence of input `index` longer than the model's max_source_len was cut between
    words: n_ids is the longest such sentence's length (EOS included), chunks the number
    of parts that input's over-long sentences were cut into."""

    def __init__(self, message: str, index: int, n_ids: int, chunks: int, limit: int):
        super().__init__(message)
        self.index, self.n_ids, self.chunks, self.limit = index, n_ids, chunks, limit


# ----------------------------------------------------------------------------- model paths
def packaged_model_path(name: str) -> Path:
    """Where the default model `name` lives: inside the installed package (the wheel
    build copies it there, see setup.py), or, in a source checkout used in place, in the
    repository's models/ directory. The one place that knows the layout of shipped models."""
    package = Path(__file__).resolve().parent
    installed = package / "models" / name
    checkout = package.parent / "models" / name
    if not installed.is_dir() and (checkout / "config.json").is_file():
        return checkout
    return installed


def resolve_model(model: str | os.PathLike | None, role: str) -> Path:
    """The directory of `model`, or of the packaged default model for `role`
    ("translate", "drafter", "correct") when model is None; a ModelDirError naming the
    expected path when that default is not installed."""
    if model is not None:
        return Path(model)
    path = packaged_model_path(DEFAULT_MODELS[role])
    if not path.is_dir():
        raise ModelDirError(
            f"{path}: (directory): the default {role} model {DEFAULT_MODELS[role]!r} is not installed "
            f"in this pyfastdec package; pass a model directory: Translator(model='path/to/model') "
            f"in Python, or -m path/to/model on the command line")
    return path


def check_compute_type(model_dir: ModelDir, compute_type: str) -> None:
    """int8 directories run int8 only; float32 directories run float32 (with a warning
    when int8 was asked for: int8 needs calibrated activation scales, which only export
    can measure)."""
    if compute_type not in COMPUTE_TYPES:
        raise ValueError(f"compute_type must be one of {', '.join(COMPUTE_TYPES)}, got {compute_type!r}")
    int8 = model_dir.config.quantization is not None
    if compute_type == "float32" and int8:
        raise ModelDirError(
            f"{model_dir.path}: compute_type float32: this directory holds int8 weights "
            f"(config.json quantization); pass the float32 model directory, or use compute_type int8")
    if compute_type == "int8" and not int8:
        warnings.warn(
            f"{model_dir.path} holds float32 weights (config.json quantization: null); running float32. "
            f"Write an int8 directory with `python -m export.write --int8` for the int8 engine, or pass "
            f"compute_type='float32' (fastdec: --compute-type float32) to silence this.",
            RuntimeWarning, stacklevel=4)


def check_drafter(verifier: ModelDir, drafter: ModelDir) -> None:
    """The drafter must be a NAT drafter speaking the verifier's vocabulary: same size,
    same special ids and the same sentencepiece pieces (a byte-identical spm.model, or
    one with identical pieces in identical order)."""
    if drafter.config.arch != "nat-drafter":
        raise ModelDirError(f"{drafter.path}: arch: {drafter.config.arch!r} (expected \"nat-drafter\" for a drafter)")
    if drafter.config.vocab_size != verifier.config.vocab_size:
        raise ModelDirError(f"{drafter.path}: vocab_size: {drafter.config.vocab_size} differs from the "
                            f"verifier's {verifier.config.vocab_size} ({verifier.path}); a drafter must share "
                            f"the verifier's vocabulary")
    if drafter.config.tokens != verifier.config.tokens:
        raise ModelDirError(f"{drafter.path}: tokens: {drafter.config.tokens} differ from the verifier's "
                            f"{verifier.config.tokens} ({verifier.path})")
    if drafter.config.tokenizer != "spm" or verifier.config.tokenizer != "spm":
        # Foreign vocabularies (tokenizer "marian"): the very same files, nothing looser.
        for name, path in verifier.tokenizer_files.items():
            other = drafter.tokenizer_files.get(name)
            if other is None or other.read_bytes() != path.read_bytes():
                raise ModelDirError(f"{drafter.path}: {name}: differs from the verifier's {path} (expected the "
                                    f"verifier's tokenizer {verifier.config.tokenizer!r} files, byte-identical)")
        return
    if drafter.spm_path.read_bytes() == verifier.spm_path.read_bytes():
        return
    mine, theirs = Tokenizer(drafter.spm_path).pieces(), Tokenizer(verifier.spm_path).pieces()
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            raise ModelDirError(f"{drafter.spm_path}: piece {i} is {a!r} but the verifier's is {b!r} "
                                f"({verifier.spm_path}); a drafter must share the verifier's vocabulary")


def load_checked(model: str | os.PathLike | None, drafter: str | os.PathLike | None, role: str,
                 compute_type: str) -> tuple[ModelDir, Optional[ModelDir]]:
    """Validate the model (and drafter) directories without building engines: what the
    CLI checks once before starting worker processes, and what Translator builds on.
    With model=None the packaged default drafter is used too, when it is installed."""
    model_dir = ModelDir.load(resolve_model(model, role))
    check_compute_type(model_dir, compute_type)
    if drafter is None and model is None and role == "translate":
        default = packaged_model_path(DEFAULT_MODELS["drafter"])
        drafter = default if default.is_dir() else None
    drafter_dir = None
    if drafter is not None:
        drafter_dir = ModelDir.load(drafter)
        check_compute_type(drafter_dir, compute_type)
    if model_dir.config.arch != "transformer":
        raise ModelDirError(f"{model_dir.path}: arch: {model_dir.config.arch!r} (expected \"transformer\": "
                            f"a drafter is passed as the drafter, next to its verifier model)")
    if drafter_dir is not None:
        check_drafter(model_dir, drafter_dir)
    return model_dir, drafter_dir


# ----------------------------------------------------------------------------- results
@dataclass
class _Hyp:
    """One output hypothesis: the output ids of each unit of the input (sentence, or part
    of a cut sentence), summed log-prob (EOS included) and the number of scored
    positions, so the scores of units add up to a per-token average."""

    chunks: list[list[int]]
    logprob: float = 0.0
    positions: int = 0


def merge_stats(total: DecodeStats, part: DecodeStats, inputs: Sequence[int]) -> None:
    """Add one batch's counters and times to `total`; part.hit_max_len holds batch row
    indices, mapped here to input indices (`inputs[row]`)."""
    for f in fields(DecodeStats):
        if f.name == "hit_max_len":
            total.hit_max_len = sorted(set(total.hit_max_len) | {int(inputs[r]) for r in part.hit_max_len})
        elif f.name != "sentences":
            setattr(total, f.name, getattr(total, f.name) + getattr(part, f.name))


def forced_scores(backend: Backend, src_ids: list[list[int]], outs: list[list[int]],
                  unfinished: Sequence[int] = ()) -> list[float]:
    """Summed log-prob of each output followed by EOS under `backend` (teacher-forced in
    one step per batch): the scores of strategies that do not score as they go. Rows in
    `unfinished` (stopped at max_len) sum their tokens only, as beam search does."""
    bos, eos, pad = backend.tokens["bos"], backend.tokens["eos"], backend.tokens["pad"]
    width = 1 + max(len(o) for o in outs)
    tokens = np.full((len(outs), width), pad, dtype=np.int64)
    targets = np.full((len(outs), width), eos, dtype=np.int64)
    for r, out in enumerate(outs):
        tokens[r, :1 + len(out)] = [bos] + list(out)
        targets[r, :len(out)] = out
    state = backend.start(backend.encode(src_ids))
    logp = backend.step(state, tokens, Want(argmax=False, ids=targets)).id_logprobs
    cut = set(int(r) for r in unfinished)
    return [float(np.sum(logp[r, :len(out) + (r not in cut)], dtype=np.float64)) for r, out in enumerate(outs)]


def _check_text(index: int, text) -> None:
    """A TypeError or ValueError naming input `index` unless it is text that sentencepiece
    can take: a str encodable as UTF-8 (a lone surrogate, e.g. from decoding with
    errors="surrogateescape", is not; the CLI refuses such lines as invalid UTF-8 too)."""
    if not isinstance(text, str):
        raise TypeError(f"translate: input {index} is {type(text).__name__}, expected str")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"translate: input {index}: lone surrogate {text[err.start]!r} at character {err.start} "
                         f"(expected text encodable as UTF-8)") from None


# ----------------------------------------------------------------------------- translator
class Translator:
    """A model (and optional GAD drafter) on the native engine, translating raw text.

    model: a model directory (default: the packaged model; see resolve_model).
    drafter: a "nat-drafter" directory sharing the model's vocabulary (needed by algo
        "gad" and "gad++"; default: the packaged drafter when model is also the default).
    threads: intra-op threads per model (default: physical cores or FASTDEC_THREADS).
    compute_type: "int8" (runs an int8 directory's int8 weights; a float32 directory runs
        float32 with a warning) or "float32" (refused for an int8 directory).
    shortlist: use the directory's shortlist.bin if present (False: full vocabulary).
    draft_policy: how many drafted tokens GAD verifies per iteration when no block is
        given (default: an AdaptiveDraftLength learning this machine's costs, which makes
        the path depend on timings; a FixedDraftLength takes the same path every run).
        Its k_max must be the drafter's block_size.
    """

    _role = "translate"

    def __init__(self, model: str | os.PathLike | None = None, drafter: str | os.PathLike | None = None,
                 threads: int | None = None, compute_type: str = "int8", shortlist: bool = True,
                 draft_policy: DraftLengthPolicy | None = None):
        self.threads = default_threads() if threads is None else check_threads(threads)
        self.model_dir, self.drafter_dir = load_checked(model, drafter, self._role, compute_type)
        self.verifier = NativeBackend(self.model_dir, threads=self.threads, shortlist=shortlist)
        self.drafter = None
        if self.drafter_dir is not None:
            self.drafter = NativeBackend(self.drafter_dir, threads=self.threads, shortlist=shortlist)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.eos = self.verifier.tokens["eos"]
        limits = [self.model_dir.config.max_source_len]
        if self.drafter_dir is not None:
            limits.append(self.drafter_dir.config.max_source_len)
        self.max_source_len = min(limits)  # ids per source, EOS included
        if draft_policy is not None:
            if self.drafter is None:
                raise ValueError("draft_policy: applies to GAD, which needs a drafter (Translator(model, drafter=...))")
            if draft_policy.k_max != self.drafter.block_size:
                raise ValueError(f"draft_policy: k_max {draft_policy.k_max} differs from the drafter's block_size "
                                 f"{self.drafter.block_size} ({self.drafter_dir.path})")
        self._draft_policy: DraftLengthPolicy | None = draft_policy
        self._iad_policy: SourceDraftLength | None = None
        self._heads_policy: SourceDraftLength | None = None
        # What translate() runs when no algo is given, and why (fastdec info prints it).
        self.strategy: StrategyChoice = default_strategy(self.model_dir, self.drafter_dir, self._role, ALGOS)

    # ---- public
    def translate(self, texts: Sequence[str] | str, algo: str | None = None, beam_size: int = 1,
                  batch_size: int = 32, n_best: int = 1, return_scores: bool = False,
                  return_stats: bool = False, block: int | None = None, beta: int = 1, tau: float = 0.0):
        """Translate `texts` (a list of strings, or one string) in input order.

        algo: "greedy", "beam", "iad", "gad" (lossless: = greedy), "gad++" (top-beta, tau),
            "blockwise" (the model's proposal heads; lossless);
            None (default): "beam" when beam_size > 1, else the fastest lossless
            strategy the model supports (self.strategy; default_strategy.py).
        Returns one string per input; with n_best > 1 (algo "beam") a list of up to n_best
        strings per input, best first; with return_scores every string becomes
        (string, score), the score being the output's average log-prob per token, EOS
        included (beam search's own length-normalised score; other algorithms are
        rescored by the model in one teacher-forced step). With return_stats the result
        is (outputs, DecodeStats) summed over the batches.
        Each input is split into sentences, decoded one sentence per unit (units of all
        inputs batched together) and rejoined in order with single spaces; scores then
        average over all the input's tokens, and the k-th n-best string joins the k-th
        hypotheses of its sentences. An empty input (nothing but whitespace and control
        characters) gives "" without running the model.
        Sizes are bounded (size_limits.py says why): beam_size, n_best and block at most 32,
        batch_size at most 1024, beta at most 64; a larger one raises ValueError.
        """
        if isinstance(texts, (bytes, bytearray, memoryview)):  # iterating them would give ints
            raise TypeError(f"translate: texts is {type(texts).__name__}, expected a str or a list of str "
                            f"(decode bytes first, e.g. data.decode('utf-8'))")
        single = isinstance(texts, str)
        items = [texts] if single else list(texts)
        for i, t in enumerate(items):
            _check_text(i, t)
        if algo is None:
            algo = "beam" if beam_size > 1 else self.strategy.algo
        self._check_options(algo, beam_size, batch_size, n_best, block, beta, tau)
        hyps, stats, splits = self._decode(items, algo, beam_size, batch_size, n_best, return_scores,
                                           block, beta, tau)
        for warning in splits:
            warnings.warn(warning, stacklevel=2)
        outputs = [self._format(h, n_best, return_scores) for h in hyps]
        result = outputs[0] if single else outputs
        return (result, stats) if return_stats else result

    def correct(self, texts: Sequence[str] | str, batch_size: int = 32, return_stats: bool = False):
        """Correct `texts` with input-guided aggressive decoding (IAD; = greedy output):
        meant for a correction model, whose output mostly copies its input. Sentence by
        sentence, as translate: the shipped uk-gec, given whole lines of 2-6 UA-GEC test
        sentences, returned 736 of 946 sentences (every sentence, split first)."""
        return self.translate(texts, algo="iad", batch_size=batch_size, return_stats=return_stats)

    # ---- internals
    def _check_options(self, algo, beam_size, batch_size, n_best, block, beta, tau) -> None:
        if algo not in ALGOS:
            raise ValueError(f"algo must be one of {', '.join(ALGOS)}, got {algo!r}")
        check_size("beam_size", beam_size, MAX_BEAM_SIZE)
        check_size("batch_size", batch_size, MAX_BATCH_SIZE)
        check_size("n_best", n_best, MAX_N_BEST)
        if algo != "beam" and (beam_size > 1 or n_best > 1):
            raise ValueError(f"beam_size={beam_size}, n_best={n_best}: beam sizes and n-best lists need algo='beam'")
        if n_best > beam_size:
            raise ValueError(f"n_best={n_best} exceeds beam_size={beam_size}")
        if algo == "blockwise" and not self.verifier.proposal_heads:
            raise ValueError(f"algo 'blockwise' needs proposal heads in the model: {self.model_dir.path}/config.json "
                             f"has no \"heads\" (add them with python -m export.train_heads), or use algo='greedy'")
        if algo in ("gad", "gad++"):
            if self.drafter is None:
                raise ValueError(f"algo {algo!r} needs a drafter: Translator(model, drafter='path/to/drafter') "
                                 f"(CLI: --drafter DIR), or use algo='greedy'")
            if block is not None:
                check_size("block", block, MAX_BLOCK)
            if algo == "gad++":
                check_size("beta", beta, MAX_BETA)
        elif block is not None:
            raise ValueError(f"block={block}: a draft block size applies to algo 'gad' and 'gad++' only")
        if algo != "gad++" and (beta != 1 or tau != 0.0):
            raise ValueError(f"beta={beta}, tau={tau}: acceptance thresholds apply to algo 'gad++' only")

    def _units(self, texts: list[str]) -> tuple[list[tuple[int, list[int]]], list[LongInputWarning]]:
        """(input index, source ids + EOS) of every unit to decode, in input then sentence
        order, and a warning per input with a sentence that had to be cut. Empty inputs
        (nothing but whitespace and control characters) give no unit."""
        units, cuts = [], []
        for i, text in enumerate(texts):
            sentences = sentence_units(clean_text(text), self.tokenizer, self.max_source_len - 1)
            cut = [chunks for chunks in sentences if len(chunks) > 1]
            if cut:
                n_ids = max(sum(len(c) for c in chunks) for chunks in cut) + 1
                parts = sum(len(chunks) for chunks in cut)
                cuts.append(LongInputWarning(
                    f"input {i}: a sentence of {n_ids} source tokens exceeds the model's max_source_len "
                    f"{self.max_source_len}; cut between words into {parts} parts, translated separately "
                    f"and joined with a space", index=i, n_ids=n_ids, chunks=parts, limit=self.max_source_len))
            units += [(i, c + [self.eos]) for chunks in sentences for c in chunks]
        return units, cuts

    def _decode(self, texts, algo, beam_size, batch_size, n_best, scores, block, beta, tau):
        units, splits = self._units(texts)
        stats = DecodeStats(sentences=len(texts))
        unit_hyps: list[list[_Hyp]] = [[] for _ in units]
        # Longest first: a batch holds similar lengths, and the biggest one comes first.
        order = sorted(range(len(units)), key=lambda u: -len(units[u][1]))
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            src = [units[u][1] for u in batch]
            hyps, part = self._decode_batch(src, algo, beam_size, n_best, scores, block, beta, tau)
            merge_stats(stats, part, [units[u][0] for u in batch])
            for u, h in zip(batch, hyps):
                unit_hyps[u] = h
        for backend in (self.verifier, self.drafter):
            # Native engines free scratch a huge batch grew (a no-op otherwise); other
            # backends (the Backend protocol has no such call) keep their own memory.
            release = getattr(backend, "release_scratch", None)
            if release is not None:
                release()
        per_input: list[list[list[_Hyp]]] = [[] for _ in texts]  # input -> units -> n-best
        for (i, _), h in zip(units, unit_hyps):
            per_input[i].append(h)
        return [self._join(u) for u in per_input], stats, splits

    def _policy(self, block: int | None) -> DraftLengthPolicy | None:
        """No block given: the drafter drafts its block_size and a draft-length policy,
        kept for this Translator's lifetime so it learns the costs once, decides how much
        of it to verify (decoding/draft_length.py). A given block is used as is."""
        if block is not None:
            return None
        if self._draft_policy is None:
            self._draft_policy = AdaptiveDraftLength(self.drafter.block_size)
        return self._draft_policy

    def _decode_batch(self, src, algo, beam_size, n_best, scores, block, beta, tau
                      ) -> tuple[list[list[_Hyp]], DecodeStats]:
        if algo == "beam":
            results, stats = beam_search(self.verifier, src, beam_size=beam_size, nbest=n_best)
            # alpha = 1: score = logprob / (len + 1), so the sum comes back exactly.
            return [[_Hyp([h.tokens], h.score * (len(h.tokens) + 1), len(h.tokens) + 1) for h in r]
                    or [_Hyp([[]])] for r in results], stats
        if algo == "greedy":
            outs, stats = greedy(self.verifier, src)
        elif algo == "iad":
            if self._iad_policy is None:  # one for the Translator's lifetime: costs are learnt once
                self._iad_policy = SourceDraftLength(self.max_source_len)
            outs, stats = iad(self.verifier, src, policy=self._iad_policy)
        elif algo == "blockwise":
            if self._heads_policy is None:  # one for the Translator's lifetime: costs are learnt once
                self._heads_policy = SourceDraftLength(self.verifier.proposal_heads)
            outs, stats = blockwise(self.verifier, src, policy=self._heads_policy)
        elif algo == "gad":
            outs, stats = gad(self.verifier, self.drafter, src, k=block, policy=self._policy(block))
        else:
            outs, stats = gad_plus(self.verifier, self.drafter, src, beta=beta, tau=tau, k=block,
                                   policy=self._policy(block))
        logps = forced_scores(self.verifier, src, outs, stats.hit_max_len) if scores else [0.0] * len(outs)
        return [[_Hyp([o], lp, len(o) + 1)] for o, lp in zip(outs, logps)], stats

    def _join(self, units: list[list[_Hyp]]) -> list[_Hyp]:
        """The n-best list of one input from those of its units: the k-th hypotheses of
        every unit joined (as many as the shortest unit list has); an input without
        units (empty) gives one empty hypothesis."""
        if not units:
            return [_Hyp([[]])]
        if len(units) == 1:
            return units[0]
        joined = []
        for k in range(min(len(u) for u in units)):
            parts = [u[k] for u in units]
            joined.append(_Hyp([c for p in parts for c in p.chunks], sum(p.logprob for p in parts),
                               sum(p.positions for p in parts)))
        return joined

    def _text(self, hyp: _Hyp) -> str:
        return " ".join(t for t in (self.tokenizer.decode(c) for c in hyp.chunks) if t)

    def _format(self, hyps: list[_Hyp], n_best: int, scores: bool):
        def one(h: _Hyp):
            text = self._text(h)
            return (text, h.logprob / h.positions if h.positions else 0.0) if scores else text
        return one(hyps[0]) if n_best == 1 else [one(h) for h in hyps[:n_best]]


class Corrector(Translator):
    """A correction model (default: the packaged one) decoding with IAD: correct(texts)."""

    _role = "correct"

    def __init__(self, model: str | os.PathLike | None = None, threads: int | None = None,
                 compute_type: str = "int8", shortlist: bool = True):
        super().__init__(model, None, threads, compute_type, shortlist)
