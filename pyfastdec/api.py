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

import math
import os
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

import numpy as np

from pyfastdec.alternatives import check_alternatives, translate_alternatives
from pyfastdec.backends.base import Backend, Want
from pyfastdec.backends.native import NativeBackend
from pyfastdec.copy_through import CopyThrough, SourcePieces
from pyfastdec.decoding import DecodeStats, beam_search, blockwise, default_max_len, gad, gad_plus, greedy, iad
from pyfastdec.decoding.beam import RULES as BEAM_RULES
from pyfastdec.decoding.bild import DEFAULT_FALLBACK, DEFAULT_ROLLBACK, MAX_ROLLBACK, bild
from pyfastdec.decoding.logit_rules import LogitRules, RuledBackend, check_rules, check_rules_algo
from pyfastdec.decoding.prefix import PrefixedBackend, PrefixSource
from pyfastdec.decoding.sampling import check_sampling, sample
from pyfastdec.decoding.policies import AdaptiveDraftLength, DraftLengthPolicy, DraftOrPlain, SourceDraftLength
from pyfastdec.default_strategy import StrategyChoice, default_strategy
from pyfastdec.model_dir import ModelDir, ModelDirError, check_shared_encoder, engine_edit_margin, is_edit_margin
from pyfastdec.repetition_guard import LoopCheck
from pyfastdec.runtime import check_threads, default_threads
from pyfastdec.size_limits import MAX_BATCH_SIZE, MAX_BEAM_SIZE, MAX_BETA, MAX_BLOCK, MAX_N_BEST, check_size
from pyfastdec.text import (WORD_START, Tokenizer, clean_text, cut_ids, drop_invisible, load_tokenizer,
                            sentences_with_ids)
from pyfastdec.token_input import TEXT, as_kind, input_kind, token_ids

ALGOS = ("greedy", "beam", "iad", "gad", "gad++", "blockwise", "bild", "bild-lossy")
BILD_ALGOS = ("bild", "bild-lossy")
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
    build puts it there, see pyproject.toml), or, in a source checkout used in place, in the
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
            f"Write an int8 directory with `fastdec convert int8 MODEL_DIR OUT_DIR` for the int8 engine, or pass "
            f"compute_type='float32' (fastdec: --compute-type float32) to silence this.",
            RuntimeWarning, stacklevel=4)


def is_little(drafter: ModelDir) -> bool:
    """A draft model that decodes autoregressively over the verifier's encoder: BiLD's
    little model (a NAT drafter is GAD's)."""
    return drafter.config.arch == "transformer" and drafter.config.encoder_shared is not None


def check_drafter(verifier: ModelDir, drafter: ModelDir) -> None:
    """The draft model must be a NAT drafter (GAD) or a little autoregressive model that
    reads the verifier's encoder (BiLD), speaking the verifier's vocabulary: same size,
    same special ids and the same sentencepiece pieces (a byte-identical spm.model, or
    one with identical pieces in identical order). One without an encoder must have been
    trained over this verifier's (model_dir.check_shared_encoder)."""
    if drafter.config.arch != "nat-drafter" and not is_little(drafter):
        raise ModelDirError(f"{drafter.path}: arch: {drafter.config.arch!r} (expected \"nat-drafter\" for a GAD "
                            f"drafter, or \"transformer\" with encoder.shared for a BiLD little model)")
    check_shared_encoder(verifier, drafter, "drafter" if drafter.config.arch == "nat-drafter" else "little model")
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
    if model_dir.config.encoder_shared is not None:
        raise ModelDirError(f"{model_dir.path}/config.json: encoder.shared: this model has no encoder of its own "
                            f"(a BiLD little model): pass it as the drafter, next to the model whose encoder it reads")
    if drafter_dir is not None:
        check_drafter(model_dir, drafter_dir)
    return model_dir, drafter_dir


# ----------------------------------------------------------------------------- results
@dataclass
class _Hyp:
    """One output hypothesis: the output ids of each unit of the input (sentence, or part
    of a cut sentence), summed log-prob (EOS included) and the number of scored
    positions, so the scores of units add up to a per-token average."""

    chunks: list[list[int] | str]  # a str: a unit returned as it is (_Unit.keep)
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


def _check_text(index: int, text, what: str = "input") -> None:
    """A TypeError or ValueError naming input `index` unless it is text that sentencepiece
    can take: a str encodable as UTF-8 (a lone surrogate, e.g. from decoding with
    errors="surrogateescape", is not; the CLI refuses such lines as invalid UTF-8 too)."""
    if not isinstance(text, str):
        raise TypeError(f"translate: {what} {index} is {type(text).__name__}, expected str")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"translate: {what} {index}: lone surrogate {text[err.start]!r} at character {err.start} "
                         f"(expected text encodable as UTF-8)") from None


@dataclass
class _Unit:
    """One sequence to decode: its input's index, source ids + EOS, the target prefix ids
    it continues (the first unit of an input only) and its key in the sampling seed."""

    input: int
    src: list[int]
    prefix: list[int]
    seed: tuple[int, int]
    keep: str | None = None  # returned as it is instead of decoded (Corrector: text it cannot read)
    source: SourcePieces | None = None  # Corrector: the source's original text, for copy-through


@dataclass(frozen=True)
class _Options:
    """The checked options of one translate call (Translator._options)."""

    algo: str  # one of ALGOS, or "sample"
    beam_size: int
    batch_size: int
    n_best: int
    scores: bool
    block: Optional[int]
    beta: int
    tau: float
    max_len: Optional[int]  # max_decoding_length
    length_penalty: float
    topk: int
    temperature: float
    seed: int
    beam_rule: str = "pyfastdec"  # decoding/beam.py RULES
    edit_margin: float = 0.0  # greedy / iad: the edit-margin rule (decoding/source_ngrams.py)
    fallback: float = 0.0  # bild: the little model drafts while its top-1 probability is >= this
    rollback: float = 0.0  # bild-lossy: nats a little token may be from the big model (decoding/bild.py)
    repetition_guard: bool = False  # Corrector: a looping output comes back as its source (repetition_guard.py)
    topp: float = 1.0  # sampling: the nucleus (decoding/sampling.py)
    rules: LogitRules = LogitRules()  # repetition penalty, no-repeat n-grams, min length (decoding/logit_rules.py)


class ScoredOutput(NamedTuple):
    """One hypothesis of Translator.translate_scored: the output (its input's kind), the
    summed log-prob of its tokens (EOS included when it ended there), how many tokens
    that sum covers, and the score it is ranked by: logprob / tokens^length_penalty."""

    output: object
    logprob: float
    tokens: int
    score: float


# ----------------------------------------------------------------------------- translator
class Translator:
    """A model (and optional GAD drafter) on the native engine, translating raw text.

    model: a model directory (default: the packaged model; see resolve_model).
    drafter: a draft model sharing the model's vocabulary: a "nat-drafter" directory
        (algo "gad" and "gad++"; default: the packaged drafter when model is also the
        default), or a little autoregressive model over the model's encoder (config.json
        encoder.shared; algo "bild" and "bild-lossy").
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
    _copy_through: CopyThrough | None = None  # Corrector: writes text its outputs copied as it was
    _loop_check: LoopCheck | None = None  # the repetition guard's, made at its first use

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
        self._bild_policy: DraftOrPlain | None = None
        if draft_policy is not None:
            if self.drafter is None or self.drafter.arch != "nat-drafter":
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
    def translate(self, texts, algo: str | None = None, beam_size: int = 1, batch_size: int = 32,
                  n_best: int = 1, return_scores: bool = False, return_stats: bool = False,
                  block: int | None = None, beta: int = 1, tau: float = 0.0, *,
                  target_prefix: Sequence | None = None, max_decoding_length: int | None = None,
                  length_penalty: float = 1.0, num_hypotheses: int | None = None, sampling_topk: int = 1,
                  sampling_temperature: float = 1.0, sampling_seed: int | None = None, beam_rule: str = "pyfastdec",
                  edit_margin: float | None = None, fallback: float | None = None, rollback: float | None = None,
                  repetition_guard: bool | None = None, sampling_topp: float = 1.0,
                  repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0, min_decoding_length: int = 0,
                  return_alternatives: bool = False):
        """Translate `texts` (a list of inputs, or one string) in input order.

        An input is raw text (str), or a list of sentencepiece pieces, or a list of token
        ids (token_input.py); its output has the same kind.
        algo: "greedy", "beam", "iad", "gad" (lossless: = greedy), "gad++" (top-beta, tau),
            "blockwise" (the model's proposal heads; lossless), "bild" (a little model
            drafts while confident; lossless) and "bild-lossy" (BiLD's rollback rule);
            None (default): "beam" when beam_size > 1, random sampling when sampling_topk
            is not 1, else the fastest lossless strategy the model supports
            (self.strategy; default_strategy.py).
        target_prefix: None, or one prefix per input (None, text, pieces or ids): the
            output starts with it and continues from it (every algorithm); it is part of
            the returned output and of its score. With text input it prefixes the
            output's first sentence.
        max_decoding_length: output tokens at most (the prefix included, EOS not
            counted); default 2 * len(source) + 10 per sentence. A target prefix longer
            than a given max_decoding_length raises ValueError; one already as long as
            the limit (or, with the default limit, longer) is returned as it is.
        length_penalty: beam search ranks hypotheses by sum(log p) / length^length_penalty
            (length counting EOS); the returned scores are normalised the same way for
            every algorithm (1.0: the average log-prob per token).
        edit_margin: with algo "greedy" or "iad" (a correction model): keep the source token
            copying would write next unless the model's top-1 beats it by this many nats
            (decoding/source_ngrams.py; raises precision, IAD still equals greedy with the
            same margin); None (default): the model's config.json "decoding.edit_margin"
            for those two algos (0 when absent), else 0. Any number >= 0: a margin above
            float32's largest (3.4e38; inf included) is that, i.e. never edit.
        repetition_guard: a Corrector's output that repeats a word, piece or punctuation
            n-gram 3+ times in a row (more than its source does) comes back as its source
            (repetition_guard.py: a loop is never a correction); per sentence, or per part
            of a sentence too long for the model; None (default): on for a Corrector's
            greedy and IAD without target prefixes, off otherwise. The output is then
            greedy's with that rule. The stats count such outputs (loops_reverted).
        n_best (or num_hypotheses, CTranslate2's name): with algo "beam", up to n_best
            outputs per input, best first.
        beam_rule: when beam search stops (decoding/beam.py): "pyfastdec" (default: at
            beam_size finished hypotheses, or when none still live can win) or "hf":
            as transformers' generate(num_beams=..., length_penalty=...), so a converted
            Hugging Face Marian model gives HF's beam outputs; a hypothesis cut at
            max_decoding_length then counts its tokens without an EOS.
        sampling_topk, sampling_temperature, sampling_seed: random sampling, one token per
            step from the temperature-scaled distribution over the topk best tokens (0:
            all); 1 (default) is greedy. A seed makes a call reproducible (each sentence
            draws from its own generator, so batching does not change it); None draws a
            fresh one. sampling_topp < 1 (with sampling_topk != 1, as in CTranslate2): draw from
            the nucleus only (decoding/sampling.py).
        repetition_penalty, no_repeat_ngram_size, min_decoding_length: CTranslate2's
            (decoding/logit_rules.py; min_decoding_length counts the target prefix, as
            max_decoding_length does, in both): greedy decoding, beam search or sampling
            from the ruled distribution, whose log-probs the scores then sum (as
            CTranslate2's); lossless strategies run greedy with them in their place (their
            output is greedy's), the lossy ones refuse them.
        return_alternatives: the num_hypotheses (n_best) most likely tokens at the first
            position after the target prefix (EOS excluded), each continued by the call's
            decoding: a list of up to n_best outputs per input, in that order
            (alternatives.py).
        Returns one output per input; with n_best > 1 a list of up to n_best outputs per
        input, best first; with return_scores every output becomes (output, score). With
        return_stats the result is (outputs, DecodeStats) summed over the batches.
        Each text input is split into sentences, decoded one sentence per unit (units of
        all inputs batched together) and rejoined in order with single spaces; scores then
        cover all the input's tokens, and the k-th n-best string joins the k-th hypotheses
        of its sentences. An empty input gives "" without running the model.
        Sizes are bounded (size_limits.py says why): beam_size, n_best and block at most 32,
        batch_size at most 1024, beta at most 64; a larger one raises ValueError.
        """
        if isinstance(texts, (bytes, bytearray, memoryview)):  # iterating them would give ints
            raise TypeError(f"translate: texts is {type(texts).__name__}, expected a str or a list of str "
                            f"(decode bytes first, e.g. data.decode('utf-8'))")
        single = isinstance(texts, str)
        items = [texts] if single else list(texts)
        prefixes = None if target_prefix is None else [target_prefix] if single else target_prefix
        alternatives = 0
        if return_alternatives:  # n_best alternatives, each one decoding's single output
            alternatives, n_best, num_hypotheses = check_alternatives(n_best, num_hypotheses), 1, None
        opts = self._options(algo, beam_size, batch_size, n_best, return_scores, block, beta, tau,
                             max_decoding_length, length_penalty, num_hypotheses, sampling_topk,
                             sampling_temperature, sampling_seed, beam_rule, edit_margin, prefixes,
                             fallback, rollback, repetition_guard, sampling_topp, repetition_penalty,
                             no_repeat_ngram_size, min_decoding_length)
        if alternatives:
            result, stats = translate_alternatives(self, items, prefixes, alternatives, opts)
            result = result[0] if single else result
            return (result, stats) if return_stats else result
        hyps, kinds, stats, splits = self._run(items, prefixes, opts)
        for warning in splits:
            warnings.warn(warning, stacklevel=2)
        outputs = [self._format(h, kind, opts) for h, kind in zip(hyps, kinds)]
        result = outputs[0] if single else outputs
        return (result, stats) if return_stats else result

    def translate_scored(self, texts: Sequence, return_stats: bool = False, **options):
        """Like translate (same options; return_scores is not taken), but every input gives
        its n-best list of ScoredOutput (output, summed log-prob, token count, score): what
        an n-best list file (nbest.py) is written from."""
        if isinstance(texts, str):
            raise TypeError("translate_scored: texts is a str, expected a list of inputs")
        prefixes = options.pop("target_prefix", None)
        opts = self._options(**{**options, "return_scores": True}, target_prefix=prefixes)
        hyps, kinds, stats, splits = self._run(list(texts), prefixes, opts)
        for warning in splits:
            warnings.warn(warning, stacklevel=2)
        result = [[ScoredOutput(self._output(h, kind), h.logprob, h.positions, self._score(h, opts))
                   for h in hs[:opts.n_best]] for hs, kind in zip(hyps, kinds)]
        return (result, stats) if return_stats else result

    def score_batch(self, source: Sequence, target: Sequence, batch_size: int = 32):
        """CTranslate2's score_batch: per (source, target) pair a ScoringResult, the target's
        tokens then EOS and the log-prob of each under the model (scoring.py)."""
        from pyfastdec.scoring import score_batch
        return score_batch(self, source, target, batch_size)

    def translate_iterable(self, inputs, target_prefix=None, batch_size: int = 32, read_ahead: int = 4,
                           **options):
        """Translate a stream of inputs (any iterable; e.g. an open file's lines, with their
        newlines stripped) lazily, yielding one result per input in input order, as
        translate would return it. At most read_ahead * batch_size inputs are read ahead
        (then sorted by length and translated), so memory stays bounded on endless input.
        target_prefix: None or an iterable of prefixes, one per input. Other options as in
        translate (return_stats is not taken)."""
        from pyfastdec.streaming import translate_iterable
        return translate_iterable(self, inputs, target_prefix, batch_size, read_ahead, options)

    def translate_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike,
                       target_prefix_path: str | os.PathLike | None = None, batch_size: int = 32,
                       read_ahead: int = 4, **options) -> int:
        """Translate a UTF-8 text file line by line into output_path (one line per input
        line; with n_best > 1 or return_scores, Marian's n-best format, nbest.py), streaming
        as translate_iterable. target_prefix_path: a file with one prefix line per input
        line (an empty line: no prefix). Returns the number of input lines."""
        from pyfastdec.streaming import translate_file
        return translate_file(self, input_path, output_path, target_prefix_path, batch_size, read_ahead, options)

    def correct(self, texts: Sequence[str] | str, batch_size: int = 32, return_stats: bool = False,
                edit_margin: float | None = None, repetition_guard: bool | None = None):
        """Correct `texts` with input-guided aggressive decoding (IAD; = greedy output, then
        the repetition guard): meant for a correction model, whose output mostly copies its
        input. Sentence by sentence, as translate: the shipped uk-gec, given whole lines of
        2-6 UA-GEC test sentences, returned 736 of 946 sentences (every sentence, split first).
        edit_margin: as in translate (default: the model's own, chosen on its val set).
        repetition_guard: as in translate (default: on for a Corrector)."""
        return self.translate(texts, algo="iad", batch_size=batch_size, return_stats=return_stats,
                              edit_margin=edit_margin, repetition_guard=repetition_guard)

    # ---- internals
    def _options(self, algo=None, beam_size=1, batch_size=32, n_best=1, return_scores=False, block=None,
                 beta=1, tau=0.0, max_decoding_length=None, length_penalty=1.0, num_hypotheses=None,
                 sampling_topk=1, sampling_temperature=1.0, sampling_seed=None, beam_rule="pyfastdec",
                 edit_margin=None, target_prefix=None, fallback=None, rollback=None,
                 repetition_guard=None, sampling_topp=1.0, repetition_penalty=1.0, no_repeat_ngram_size=0,
                 min_decoding_length=0, return_alternatives=False) -> _Options:
        """The checked options of one call; ValueError/TypeError naming the bad one."""
        if return_alternatives:  # translate takes it before calling here
            raise ValueError("return_alternatives=True: only Translator.translate returns alternatives (a list of "
                             "outputs per input)")
        if num_hypotheses is not None:
            if n_best != 1 and n_best != num_hypotheses:
                raise ValueError(f"n_best={n_best} and num_hypotheses={num_hypotheses}: two names for the same "
                                 f"option, give one")
            n_best = num_hypotheses
        check_sampling(sampling_topk, sampling_temperature, self.verifier.vocab_size, sampling_topp)
        sampling = sampling_topk != 1
        rules = check_rules(repetition_penalty, no_repeat_ngram_size, min_decoding_length,
                            max_decoding_length if isinstance(max_decoding_length, (int, np.integer)) else None)
        if algo is None:
            algo = "beam" if beam_size > 1 else "sample" if sampling else self.strategy.algo
        elif sampling:
            if algo != "greedy":
                raise ValueError(f"sampling_topk={sampling_topk}: random sampling is greedy-style; it needs "
                                 f"algo 'greedy' (or none), got {algo!r}")
            algo = "sample"
        if rules.active:  # _decode_rows rules every step (RuledBackend)
            check_rules_algo(algo, edit_margin)
            edit_margin = 0.0
        if algo == "sample" and beam_size > 1:
            raise ValueError(f"sampling_topk={sampling_topk} with beam_size={beam_size}: sampling draws one "
                             f"token per step; use beam_size=1")
        self._check_options("greedy" if algo == "sample" else algo, beam_size, batch_size, n_best, block, beta, tau)
        if max_decoding_length is not None:
            if isinstance(max_decoding_length, bool) or not isinstance(max_decoding_length, (int, np.integer)) \
                    or max_decoding_length < 1:
                raise ValueError(f"max_decoding_length must be an int >= 1 (output tokens, the target prefix "
                                 f"included, EOS not counted), got {max_decoding_length!r}")
        if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)) \
                or not math.isfinite(length_penalty):
            raise ValueError(f"length_penalty must be a finite number, got {length_penalty!r}")
        if beam_rule not in BEAM_RULES:
            raise ValueError(f"beam_rule must be one of {', '.join(map(repr, BEAM_RULES))}, got {beam_rule!r}")
        if sampling_seed is not None and (isinstance(sampling_seed, bool)
                                          or not isinstance(sampling_seed, (int, np.integer)) or sampling_seed < 0):
            raise ValueError(f"sampling_seed must be an int >= 0 or None, got {sampling_seed!r}")
        # Fresh entropy only when sampling: the OS call is a cost every other call would pay for nothing.
        seed = int(sampling_seed) if sampling_seed is not None else \
            int(np.random.SeedSequence().entropy) if algo == "sample" else 0
        return _Options(algo, beam_size, batch_size, n_best, return_scores, block, beta, tau,
                        None if max_decoding_length is None else int(max_decoding_length), float(length_penalty),
                        int(sampling_topk), float(sampling_temperature), seed, beam_rule,
                        self._edit_margin(algo, edit_margin, target_prefix), *self._bild(algo, fallback, rollback),
                        self._repetition_guard(algo, repetition_guard, target_prefix), float(sampling_topp), rules)

    def _repetition_guard(self, algo: str, guard, target_prefix) -> bool:
        """Whether a call reverts looping outputs to their sources: a correction rule, on by
        default for a Corrector's greedy and IAD (the outputs the rule was measured on)."""
        if guard is None:
            return self._role == "correct" and algo in ("greedy", "iad") and target_prefix is None
        if not isinstance(guard, (bool, np.bool_)):
            raise TypeError(f"repetition_guard must be True, False or None, got {guard!r}")
        if guard and self._role != "correct":
            raise ValueError("repetition_guard=True: a looping output is reverted to its source, which only a "
                             "correction model's output may be (use Corrector)")
        if guard and algo not in ("greedy", "iad"):
            raise ValueError(f"repetition_guard=True applies to algo 'greedy' and 'iad' only, got {algo!r}")
        if guard and target_prefix is not None:
            raise ValueError("repetition_guard=True with target_prefix: a reverted output would lose its prefix; "
                             "give one or the other")
        return bool(guard)

    def _bild(self, algo: str, fallback, rollback) -> tuple[float, float]:
        """The checked (fallback, rollback) of a call: explicit, or the little model's own
        (config.json decoding; bild.DEFAULT_FALLBACK without). bild is lossless (rollback 0)."""
        if algo not in BILD_ALGOS:
            if fallback is not None or rollback is not None:
                raise ValueError(f"fallback={fallback}, rollback={rollback}: BiLD thresholds apply to algo "
                                 f"'bild' and 'bild-lossy' only, got {algo!r}")
            return 0.0, 0.0
        own = self.drafter_dir.config.bild or {}
        if algo == "bild":
            if rollback:
                raise ValueError(f"rollback={rollback}: algo 'bild' is lossless (rollback 0); use 'bild-lossy'")
            rollback, default = 0.0, own.get("fallback", DEFAULT_FALLBACK)
        else:
            default = own.get("lossy_fallback", DEFAULT_FALLBACK)
            rollback = own.get("rollback", DEFAULT_ROLLBACK) if rollback is None else rollback
        fallback = default if fallback is None else fallback
        for name, value, top in (("fallback", fallback, 1.0), ("rollback", rollback, MAX_ROLLBACK)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= top:
                raise ValueError(f"{name} must be a number in [0, {top:.4g}], got {value!r}")
        return float(fallback), float(rollback)

    def _edit_margin(self, algo: str, edit_margin, target_prefix) -> float:
        """The checked edit margin of a call: explicit, or the model's own for greedy/iad."""
        if edit_margin is None:
            if algo not in ("greedy", "iad") or target_prefix is not None:
                return 0.0
            return engine_edit_margin(self.model_dir.config.edit_margin)
        if not is_edit_margin(edit_margin):
            raise ValueError(f"edit_margin must be a number >= 0 (nats; inf: never edit), got {edit_margin!r}")
        if edit_margin and algo not in ("greedy", "iad"):
            raise ValueError(f"edit_margin={edit_margin}: the edit-margin rule applies to algo 'greedy' and 'iad' "
                             f"only, got {algo!r}")
        if edit_margin and target_prefix is not None:
            raise ValueError(f"edit_margin={edit_margin} with target_prefix: the rule aligns the output with its "
                             f"source from the first token; give one or the other")
        return engine_edit_margin(edit_margin)

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
        if algo in BILD_ALGOS and (self.drafter is None or self.drafter.arch != "transformer"):
            raise ValueError(f"algo {algo!r} needs a little model: Translator(model, drafter='path/to/little') "
                             f"(CLI: --drafter DIR), an autoregressive model with config.json encoder.shared "
                             f"(export.train_shared little); or use algo='greedy'")
        if algo in ("gad", "gad++"):
            if self.drafter is None or self.drafter.arch != "nat-drafter":
                raise ValueError(f"algo {algo!r} needs a drafter (arch nat-drafter): "
                                 f"Translator(model, drafter='path/to/drafter') (CLI: --drafter DIR), or use algo='greedy'")
            if block is not None:
                check_size("block", block, MAX_BLOCK)
            if algo == "gad++":
                check_size("beta", beta, MAX_BETA)
        elif block is not None:
            raise ValueError(f"block={block}: a draft block size applies to algo 'gad' and 'gad++' only")
        if algo != "gad++" and (beta != 1 or tau != 0.0):
            raise ValueError(f"beta={beta}, tau={tau}: acceptance thresholds apply to algo 'gad++' only")

    def _target_tokenizer(self) -> Tokenizer:
        # A model with a separate target sentencepiece model encodes prefixes with it.
        return getattr(self, "target_tokenizer", None) or self.tokenizer

    def _prefix_ids(self, items: list, prefixes) -> list[list[int]]:
        """The target prefix ids of every input ([] without one); errors name the input."""
        if prefixes is None:
            return [[] for _ in items]
        if isinstance(prefixes, (str, bytes)) or not isinstance(prefixes, Sequence):
            raise TypeError(f"translate: target_prefix is {type(prefixes).__name__}, expected a list with one "
                            f"prefix (None, text, pieces or ids) per input")
        if len(prefixes) != len(items):
            raise ValueError(f"translate: {len(prefixes)} target prefixes for {len(items)} inputs (expected one "
                             f"per input; None for no prefix)")
        ids = []
        for i, p in enumerate(prefixes):
            if p is None:
                ids.append([])
                continue
            kind = input_kind(i, p, "target_prefix")
            if kind == TEXT:
                _check_text(i, p, "target_prefix")
                ids.append(self._target_tokenizer().encode(clean_text(p)))
            else:
                ids.append(token_ids(i, p, kind, self._target_tokenizer(), self.verifier.vocab_size, "target_prefix"))
        return ids

    def _units(self, items: list, prefixes: list[list[int]], offset: int = 0
               ) -> tuple[list[_Unit], list[str], list[LongInputWarning]]:
        """Every unit to decode (in input then sentence order), the kind of every input,
        and a warning per input with a sentence that had to be cut (indices shifted by
        `offset`, the position of items[0] in a stream). Empty inputs give no unit, unless
        they have a target prefix: then one with an empty source."""
        units, kinds, cuts = [], [], []
        for i, item in enumerate(items):
            kind = input_kind(i + offset, item)
            kinds.append(kind)
            keeps: list[str | None] = []
            sources: list[SourcePieces | None] = []  # per chunk
            if kind == TEXT:
                _check_text(i + offset, item)
                found = sentences_with_ids(self._source_text(clean_text(item)), self.tokenizer,
                                           self.max_source_len - 1)
                sentences = [chunks for _, chunks in found]
                keeps = [self._kept_as_is(sentence, chunks) for sentence, chunks in found]
                sources = [source for (sentence, chunks), keep in zip(found, keeps)
                           for source in self._copy_sources(sentence, chunks, keep)]
            else:
                ids = token_ids(i + offset, item, kind, self.tokenizer, self.verifier.vocab_size)
                sentences = [cut_ids(ids, self.max_source_len - 1, self.tokenizer.starts_word)] if ids else []
            keeps = keeps or [None] * len(sentences)
            cut = [chunks for chunks, keep in zip(sentences, keeps) if len(chunks) > 1 and keep is None]
            if cut:
                n_ids = max(sum(len(c) for c in chunks) for chunks in cut) + 1
                parts = sum(len(chunks) for chunks in cut)
                cuts.append(LongInputWarning(
                    f"input {i + offset}: a sentence of {n_ids} source tokens exceeds the model's max_source_len "
                    f"{self.max_source_len}; cut between words into {parts} parts, translated separately "
                    f"and joined with a space", index=i + offset, n_ids=n_ids, chunks=parts,
                    limit=self.max_source_len))
            chunks = [c for s in sentences for c in s]
            # a kept sentence cut into chunks comes back once, with its first chunk
            kept = [keep if j == 0 or keep is None else "" for s, keep in zip(sentences, keeps) for j in range(len(s))]
            sources = sources or [None] * len(chunks)
            if not chunks and prefixes[i]:
                chunks, kept, sources = [[]], [None], [None]
            units += [_Unit(i, c + [self.eos], prefixes[i] if k == 0 else [], (i + offset, k), keep, source)
                      for k, (c, keep, source) in enumerate(zip(chunks, kept, sources))]
        return units, kinds, cuts

    def _kept_as_is(self, sentence: str, chunks: list[list[int]]) -> str | None:
        """The text to return for a sentence instead of decoding it (Corrector), or None."""
        return None

    def _source_text(self, text: str) -> str:
        """The text a translation reads: without the invisible characters its tokenizer has
        no piece for (text.drop_invisible), so they neither show up as invented words nor
        change the translation of the visible text."""
        return drop_invisible(text, self._has_piece)

    def _has_piece(self, char: str) -> bool:
        cache = self.__dict__.setdefault("_pieces_of_invisible", {})
        if char not in cache:
            unk = self.verifier.tokens["unk"]
            cache[char] = any(i != unk and self.tokenizer.piece(i) != WORD_START for i in self.tokenizer.encode(char))
        return cache[char]

    def _copy_sources(self, sentence: str, chunks: list[list[int]], keep: str | None) -> list[SourcePieces | None]:
        """Per chunk of a sentence, the source whose original text its output copies
        (Corrector: copy_through.py), or None: the output ids are decoded."""
        return [None] * len(chunks)

    def _run(self, items: list, prefixes, opts: _Options, offset: int = 0):
        """(n-best _Hyp list per input, kinds, DecodeStats, warnings) of one call."""
        prefix_ids = self._prefix_ids(items, prefixes)
        for i, ids in enumerate(prefix_ids):
            if opts.max_len is not None and len(ids) > opts.max_len:
                # The limit counts the prefix: returning it whole would exceed the limit, cutting
                # it would drop what the caller asked the output to start with.
                raise ValueError(f"target_prefix: input {i + offset} has {len(ids)} tokens, more than "
                                 f"max_decoding_length={opts.max_len} (which counts the prefix); raise "
                                 f"max_decoding_length or shorten the prefix")
        units, kinds, splits = self._units(items, prefix_ids, offset)
        stats = DecodeStats(sentences=len(items))
        unit_hyps: list[list[_Hyp]] = [[] for _ in units]
        # Longest first: a batch holds similar lengths, and the biggest one comes first.
        order = sorted(range(len(units)), key=lambda u: -len(units[u].src))
        for u, unit in enumerate(units):
            if unit.keep is not None:
                unit_hyps[u] = [_Hyp([unit.keep])]
        order = [u for u in order if units[u].keep is None]
        for start in range(0, len(order), opts.batch_size):
            batch = [units[u] for u in order[start:start + opts.batch_size]]
            hyps, part = self._decode_batch(batch, opts)
            merge_stats(stats, part, [u.input for u in batch])
            for u, h in zip(order[start:start + opts.batch_size], hyps):
                unit_hyps[u] = h
        for backend in (self.verifier, self.drafter):
            # Native engines free scratch a huge batch grew (a no-op otherwise); other
            # backends (the Backend protocol has no such call) keep their own memory.
            release = getattr(backend, "release_scratch", None)
            if release is not None:
                release()
        per_input: list[list[list[_Hyp]]] = [[] for _ in items]  # input -> units -> n-best
        for unit, h in zip(units, unit_hyps):
            if unit.source is not None:  # text now: what copied the source is the source's own text
                h = [_Hyp([self._copy_through.text(unit.source, x.chunks[0])], x.logprob, x.positions) for x in h]
            per_input[unit.input].append(h)
        return [self._join(u) for u in per_input], kinds, stats, splits

    def _policy(self, block: int | None) -> DraftLengthPolicy | None:
        """No block given: the drafter drafts its block_size and a draft-length policy,
        kept for this Translator's lifetime so it learns the costs once, decides how much
        of it to verify (decoding/policies/draft_length.py). A given block is used as is."""
        if block is not None:
            return None
        if self._draft_policy is None:
            self._draft_policy = AdaptiveDraftLength(self.drafter.block_size)
        return self._draft_policy

    def _decode_batch(self, units: list[_Unit], opts: _Options) -> tuple[list[list[_Hyp]], DecodeStats]:
        """The n-best hypotheses of every unit of a batch (prefix included) and the batch's
        statistics (hit_max_len as batch rows). Units whose prefix already fills their
        length limit are not decoded: the prefix is their output."""
        limits = [(opts.max_len or default_max_len(len(u.src))) - len(u.prefix) for u in units]
        run = [r for r, n in enumerate(limits) if n >= 1]
        hyps: list[list[_Hyp]] = [[_Hyp([list(u.prefix)])] for u in units]
        if len(run) < len(units) and opts.scores:
            full = [r for r in range(len(units)) if r not in set(run)]
            logps = forced_scores(self._scorer(opts), [units[r].src for r in full], [units[r].prefix for r in full],
                                  range(len(full)))  # prefixes cut short: no EOS scored
            for r, lp in zip(full, logps):
                hyps[r] = [_Hyp([list(units[r].prefix)], lp, len(units[r].prefix) + 1)]
        if not run:
            return hyps, DecodeStats(sentences=len(units), hit_max_len=list(range(len(units))))
        prefixed = any(units[r].prefix for r in run)
        src = [PrefixSource(units[r].src, units[r].prefix) if prefixed else units[r].src for r in run]
        max_len = [limits[r] for r in run] if prefixed or opts.max_len is not None else None
        sub, stats = self._decode_rows(src, opts, max_len, [units[r].seed for r in run], prefixed)
        stats.hit_max_len = sorted([run[r] for r in stats.hit_max_len]
                                   + [r for r in range(len(units)) if limits[r] < 1])
        for r, h in zip(run, sub):
            hyps[r] = h
        return hyps, stats

    def _decode_rows(self, src: list, opts: _Options, max_len, seeds, prefixed: bool
                     ) -> tuple[list[list[_Hyp]], DecodeStats]:
        verifier, drafter = self.verifier, self.drafter
        if prefixed:  # decoding/prefix.py: every strategy starts after its rows' prefixes
            verifier = PrefixedBackend(verifier)
            drafter = None if drafter is None else PrefixedBackend(drafter)
        prefixes = [getattr(s, "target_prefix", []) for s in src]
        algo = opts.algo
        if opts.rules.active:  # every step's distribution ruled; lossless strategies: greedy in their place
            verifier = RuledBackend(verifier, opts.rules)
            algo = algo if algo in ("beam", "sample") else "greedy"
        if algo == "beam":
            results, stats = beam_search(verifier, src, beam_size=opts.beam_size, nbest=opts.n_best,
                                         alpha=opts.length_penalty, max_len=max_len, rule=opts.beam_rule)
            # score = logprob / positions^alpha: the sum comes back exactly. Positions count
            # EOS, or (default rule) the EOS a hypothesis cut at max_len is scored as if it had.
            cut_extra = 0 if opts.beam_rule == "hf" else 1

            def positions(h):
                return len(h.tokens) + (1 if h.finished else cut_extra)
            prefix_logps = [getattr(s, "prefix_logprob", 0.0) for s in src]
            if prefixed and opts.rules.active:  # the prefix's tokens scored under the rules too
                prefix_logps = forced_scores(self._scorer(opts), [list(s) for s in src], prefixes, range(len(src)))
            hyps = [[_Hyp([p + h.tokens], h.score * positions(h) ** opts.length_penalty + lp, len(p) + positions(h))
                     for h in r] or [_Hyp([list(p)])] for r, p, lp in zip(results, prefixes, prefix_logps)]
            if prefixed:  # the search normalised by the length after the prefix; rank by the whole output's
                hyps = [sorted(h, key=lambda x: -self._score(x, opts)) for h in hyps]
            return hyps, stats
        if algo == "sample":
            outs, stats = sample(verifier, src, [[opts.seed, *key] for key in seeds], opts.topk,
                                 opts.temperature, max_len, topp=opts.topp)
        elif algo == "greedy":
            outs, stats = greedy(verifier, src, max_len, edit_margin=opts.edit_margin)
        elif algo == "iad":
            if self._iad_policy is None:  # one for the Translator's lifetime: costs are learnt once
                self._iad_policy = SourceDraftLength(self.max_source_len)
            outs, stats = iad(verifier, src, max_len, policy=self._iad_policy, edit_margin=opts.edit_margin)
        elif algo == "blockwise":
            if self._heads_policy is None:  # one for the Translator's lifetime: costs are learnt once
                self._heads_policy = SourceDraftLength(self.verifier.proposal_heads)
            outs, stats = blockwise(verifier, src, max_len, policy=self._heads_policy)
        elif algo in BILD_ALGOS:
            if self._bild_policy is None:  # one for the Translator's lifetime: costs are learnt once
                self._bild_policy = DraftOrPlain()
            outs, stats = bild(verifier, drafter, src, fallback=opts.fallback, rollback=opts.rollback,
                               max_len=max_len, policy=self._bild_policy)
        elif algo == "gad":
            outs, stats = gad(verifier, drafter, src, k=opts.block, max_len=max_len, policy=self._policy(opts.block))
        else:
            outs, stats = gad_plus(verifier, drafter, src, beta=opts.beta, tau=opts.tau, k=opts.block,
                                   max_len=max_len, policy=self._policy(opts.block))
        outs = [list(p) + o for p, o in zip(prefixes, outs)]
        if opts.repetition_guard:  # no prefixes here (_repetition_guard)
            outs = self._revert_loops(src, outs, stats)
        logps = (forced_scores(self._scorer(opts), [list(s) for s in src], outs, stats.hit_max_len) if opts.scores
                 else [0.0] * len(outs))
        # len + 1 even for rows cut at max_len (no EOS scored), as beam search normalises them
        return [[_Hyp([o], lp, len(o) + 1)] for o, lp in zip(outs, logps)], stats

    def _scorer(self, opts: _Options) -> Backend:
        """What scores outputs teacher-forced: the model, or with rules its ruled distribution."""
        return RuledBackend(self.verifier, opts.rules) if opts.rules.active else self.verifier

    def _revert_loops(self, src: list[list[int]], outs: list[list[int]], stats: DecodeStats) -> list[list[int]]:
        """outs, each output that loops (repetition_guard.py) replaced by its source; such
        rows leave stats.hit_max_len (a loop usually ran to the limit; the source did not)."""
        if self._loop_check is None:
            self._loop_check = LoopCheck(self._target_tokenizer())
        guarded, reverted = [], set()
        for row, (s, o) in enumerate(zip(src, outs)):
            source = list(s[:-1]) if s and s[-1] == self.eos else list(s)
            if self._loop_check.loops(source, o):
                reverted.add(row)
                o = source
            guarded.append(o)
        stats.loops_reverted += len(reverted)
        stats.hit_max_len = [row for row in stats.hit_max_len if row not in reverted]
        return guarded

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

    def _output(self, hyp: _Hyp, kind: str):
        if kind != TEXT:
            return as_kind([t for c in hyp.chunks for t in c], kind, self._target_tokenizer())
        return " ".join(t for t in (c if isinstance(c, str) else self._target_tokenizer().decode(c)
                                    for c in hyp.chunks) if t)

    @staticmethod
    def _score(hyp: _Hyp, opts: _Options) -> float:
        return hyp.logprob / hyp.positions ** opts.length_penalty if hyp.positions else 0.0

    def _format(self, hyps: list[_Hyp], kind: str, opts: _Options):
        def one(h: _Hyp):
            out = self._output(h, kind)
            return (out, self._score(h, opts)) if opts.scores else out
        return one(hyps[0]) if opts.n_best == 1 else [one(h) for h in hyps[:opts.n_best]]


class Corrector(Translator):
    """A correction model (default: the packaged one) decoding with IAD: correct(texts).

    Text the model copies comes back as the user wrote it (copy_through.py): decoding
    the output ids would normalise it as sentencepiece does ("№" -> "No", "³" -> "3",
    "…" -> "...", double spaces -> one); only the model's edits are decoded text.
    A sentence with characters the model cannot read (ids that are unk: another script,
    emoji the vocabulary lacks) comes back as it is: the model could only drop or replace
    what it cannot read, and a correction tool must not lose text (the shipped uk-gec
    turned Japanese into a Ukrainian word; it never writes the unk id, so copy-through
    could not bring such text back: on the UA-GEC test set it dropped or replaced the
    unknown characters of all 22 sentences that have any)."""

    _role = "correct"

    def _source_text(self, text: str) -> str:
        # Kept: a sentence the model cannot read comes back as it was written (_kept_as_is),
        # invisible characters included, which a correction must not drop.
        return text

    def _kept_as_is(self, sentence: str, chunks: list[list[int]]) -> str | None:
        unk = self.verifier.tokens["unk"]
        return sentence if any(unk in c for c in chunks) else None

    def _copy_sources(self, sentence: str, chunks: list[list[int]], keep: str | None) -> list[SourcePieces | None]:
        if keep is not None or self._copy_through is None:
            return [None] * len(chunks)
        source = self._copy_through.source_of(sentence, [t for c in chunks for t in c])
        if source is None or len(chunks) == 1:
            return [source] * len(chunks)
        parts, start = [], 0
        for c in chunks:  # a sentence cut into chunks: each copies from its own pieces
            parts.append(source.slice(start, start + len(c)))
            start += len(c)
        return parts

    def __init__(self, model: str | os.PathLike | None = None, threads: int | None = None,
                 compute_type: str = "int8", shortlist: bool = True):
        super().__init__(model, None, threads, compute_type, shortlist)
        # Copy-through reads source and output with one sentencepiece model; a model with
        # separate source and target vocabularies (tokenizer "marian") is decoded plainly.
        if isinstance(self.tokenizer, Tokenizer):
            self._copy_through = CopyThrough(self.tokenizer.sp)
