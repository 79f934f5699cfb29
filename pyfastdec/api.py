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

Around this module: sentence_units.py makes the units, translate_options.py checks a
call's options, decoding/strategies.py (the strategy registry) says what each algorithm
needs and runs it, hypotheses.py joins and scores the outputs.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from pyfastdec import sentence_units
from pyfastdec.alternatives import check_alternatives, translate_alternatives
from pyfastdec.backends.base import Backend
from pyfastdec.backends.devices import check_device, model_backends
from pyfastdec.copy_through import CopyThrough, SourcePieces
from pyfastdec.decoding import DecodeStats, strategies
from pyfastdec.decoding.limits import sentence_limit
from pyfastdec.decoding.policies import DraftLengthPolicy, DraftOrPlain, SourceDraftLength
from pyfastdec.decoding.logit_rules import RuledBackend
from pyfastdec.decoding.prefix import PrefixedBackend, PrefixSource, target_prefix
from pyfastdec.decoding.strategies import RULES_OWN, StrategyCall
from pyfastdec.default_strategy import StrategyChoice, default_strategy
from pyfastdec.drafter_check import check_drafter  # noqa: F401  (public here)
from pyfastdec.hypotheses import Hyp, ScoredOutput, forced_scores, from_beam, join_units, merge_stats, score
from pyfastdec.lanes import Lanes, check_inter_threads, lane_threads
from pyfastdec.model_dir import ModelDir, ModelDirError
from pyfastdec.repetition_guard import LoopCheck
from pyfastdec.sentence_units import LongInputWarning, Unit  # noqa: F401  (LongInputWarning: public here)
from pyfastdec.text import WORD_START, Tokenizer, drop_invisible, load_tokenizer
from pyfastdec.token_input import TEXT, as_kind
from pyfastdec.translate_options import CallOptions, check_call

# The algorithms algo= takes (the strategy registry's public entries), as the CLI offers them.
ALGOS = strategies.names()
COMPUTE_TYPES = ("int8", "float32")
# The models shipped inside the package (pyfastdec/models/<name>), by role.
DEFAULT_MODELS = {"translate": "en-de", "drafter": "en-de-drafter", "correct": "uk-gec"}


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


def load_checked(model: str | os.PathLike | ModelDir | None, drafter: str | os.PathLike | ModelDir | None,
                 role: str, compute_type: str, load: Optional[Callable[[Path], ModelDir]] = None
                 ) -> tuple[ModelDir, Optional[ModelDir]]:
    """Validate the model (and drafter) directories without building engines: what the
    CLI checks once before starting worker processes, and what Translator builds on.
    With model=None the packaged default drafter is used too, when it is installed.
    A ModelDir (already loaded, so its files already hashed) is checked as it is, not
    read again: the CLI hands the directories it checked to the Translator it builds.
    load: what reads a directory (a Ray job's driver: model_files.ReadOnce); None:
    ModelDir.load, looked up at the call."""
    load = load or ModelDir.load
    model_dir = model if isinstance(model, ModelDir) else load(resolve_model(model, role))
    check_compute_type(model_dir, compute_type)
    if drafter is None and model is None and role == "translate":
        default = packaged_model_path(DEFAULT_MODELS["drafter"])
        drafter = default if default.is_dir() else None
    drafter_dir = None
    if drafter is not None:
        drafter_dir = drafter if isinstance(drafter, ModelDir) else load(Path(drafter))
        check_compute_type(drafter_dir, compute_type)
    if model_dir.config.arch != "transformer":
        raise ModelDirError(f"{model_dir.path}: arch: {model_dir.config.arch!r} (expected \"transformer\": "
                            f"a drafter is passed as the drafter, next to its verifier model)")
    if model_dir.config.encoder_shared is not None:
        raise ModelDirError(f"{model_dir.path}/config.json: encoder.shared: this model has no encoder of its own "
                            f"(a BiLD little model): pass it as the drafter, next to the model whose encoder it reads")
    if role == "correct" and model_dir.config.task == "translation":
        raise ModelDirError(f"{model_dir.path / 'config.json'}: task: \"translation\": correcting needs a correction "
                            f"model (task \"correction\", e.g. the packaged {DEFAULT_MODELS['correct']}); translate "
                            f"with this one (fastdec translate, Translator)")
    if drafter_dir is not None:
        check_drafter(model_dir, drafter_dir)
    return model_dir, drafter_dir


# ----------------------------------------------------------------------------- translator
class Translator:
    """A model (and optional GAD drafter) on the native engine, translating raw text.

    model: a model directory (default: the packaged model; see resolve_model); model and
        drafter may also be ModelDirs already loaded (load_checked), not read again.
    drafter: a draft model sharing the model's vocabulary: a "nat-drafter" directory
        (algo "gad" and "gad++"; default: the packaged drafter when model is also the
        default), or a little autoregressive model over the model's encoder (config.json
        encoder.shared; algo "bild" and "bild-lossy").
    threads: intra-op threads per model (default: physical cores or FASTDEC_THREADS,
        divided over inter_threads).
    inter_threads: batches decoded at once, each by its own copy of the engines on its own
        thread (CTranslate2's inter_threads; lanes.py): faster than more intra-op threads
        for large jobs of many batches, at the memory of one more model per lane.
    compute_type: "int8" (runs an int8 directory's int8 weights; a float32 directory runs
        float32 with a warning) or "float32" (refused for an int8 directory).
    shortlist: use the directory's shortlist.bin if present (False: full vocabulary).
    draft_policy: how many drafted tokens GAD verifies per iteration when no block is
        given (default: an AdaptiveDraftLength learning this machine's costs, which makes
        the path depend on timings; a FixedDraftLength takes the same path every run).
        Its k_max must be the drafter's block_size.
    device: "cpu" (the native engine) or "cuda" (the GPU model, float16 weights whatever
        compute_type says; pyfastdec/backends/cuda.py).
    """

    _role = "translate"
    _copy_through: CopyThrough | None = None  # Corrector: writes text its outputs copied as it was
    _loop_check: LoopCheck | None = None  # the repetition guard's, made at its first use

    def __init__(self, model: str | os.PathLike | ModelDir | None = None,
                 drafter: str | os.PathLike | ModelDir | None = None,
                 threads: int | None = None, compute_type: str = "int8", shortlist: bool = True,
                 draft_policy: DraftLengthPolicy | None = None, device: str = "cpu", inter_threads: int = 1):
        self.device = check_device(device)  # before the model loads: a bad name costs no load
        inter_threads = check_inter_threads(inter_threads, self.device, draft_policy)
        self.threads = lane_threads(threads, inter_threads)
        self.model_dir, self.drafter_dir = load_checked(model, drafter, self._role, compute_type)
        self.verifier, self.drafter = model_backends(self.model_dir, self.drafter_dir, device, self.threads, shortlist)
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
        self.strategy: StrategyChoice = default_strategy(self.model_dir, self.drafter_dir, self._role, strategies.names())
        self._lanes = Lanes(self, inter_threads, shortlist)

    # ---- public
    @property
    def inter_threads(self) -> int:
        """Batches decoded at once (the constructor's inter_threads)."""
        return self._lanes.count

    def translate(self, texts, algo: str | None = None, beam_size: int = 1, batch_size: int = 32,
                  n_best: int = 1, return_scores: bool = False, return_stats: bool = False,
                  block: int | None = None, beta: int = 1, tau: float = 0.0, *,
                  target_prefix: Sequence | None = None, max_decoding_length: int | None = None,
                  length_penalty: float = 1.0, num_hypotheses: int | None = None, sampling_topk: int = 1,
                  sampling_temperature: float = 1.0, sampling_seed: int | None = None, beam_rule: str = "pyfastdec",
                  edit_margin: float | None = None, fallback: float | None = None, rollback: float | None = None,
                  repetition_guard: bool | None = None, sampling_topp: float = 1.0,
                  repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0, min_decoding_length: int = 0,
                  return_alternatives: bool = False, max_length_factor: float | None = None):
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
            counted); given alone, it is the only limit (as CTranslate2's). A target
            prefix longer than a given max_decoding_length raises ValueError; one
            already as long as the limit (or, with the relative limit only, longer) is
            returned as it is.
        max_length_factor: the relative limit, floor(F * len(source)) + 10 output
            tokens per sentence (len(source) counting EOS; the prefix counted in the
            output). None (default): F = 2.5, which cuts no natural output of the
            shipped models' test sets (decoding/limits.py), unless max_decoding_length
            is given. Both given: the smaller limit wins. stats.hit_max_len lists the inputs cut
            at a limit, stats.looping those whose output repeats a 1-3-gram 4+ times.
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
        return_stats the result is (outputs, DecodeStats) summed over the batches (its times
        over the lanes too, with inter_threads > 1).
        Each text input is split into sentences, decoded one sentence per unit (units of
        all inputs batched together) and rejoined in order with single spaces; scores then
        cover all the input's tokens, and the k-th n-best string joins the k-th hypotheses
        of its sentences. An empty input gives "" without running the model.
        Sizes are bounded (size_limits.py says why): beam_size, n_best and block at most 32,
        batch_size at most 1024, beta at most 64; a larger one raises ValueError.
        """
        if isinstance(texts, (bytes, bytearray, memoryview)) or not isinstance(texts, Iterable):  # bytes: as ints
            hint = " (decode bytes first, e.g. data.decode('utf-8'))" if isinstance(texts, Iterable) else ""
            raise TypeError(f"translate: texts is {type(texts).__name__}, expected a str or a list of str{hint}")
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
                             no_repeat_ngram_size, min_decoding_length, max_length_factor=max_length_factor)
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
                edit_margin: float | None = None, repetition_guard: bool | None = None,
                max_length_factor: float | None = None):
        """Correct `texts` with input-guided aggressive decoding (IAD; = greedy output, then
        the repetition guard): meant for a correction model, whose output mostly copies its
        input. Sentence by sentence, as translate: a line of several sentences is split first,
        because a model trained on single sentences drops sentences from a whole line.
        edit_margin: as in translate (default: the model's own, chosen on its val set).
        repetition_guard, max_length_factor: as in translate (guard default: on for a Corrector)."""
        return self.translate(texts, algo="iad", batch_size=batch_size, return_stats=return_stats,
                              edit_margin=edit_margin, repetition_guard=repetition_guard,
                              max_length_factor=max_length_factor)

    # ---- internals
    def _options(self, *args, **options) -> CallOptions:
        """The checked options of one call (translate_options.py); ValueError/TypeError naming the bad one."""
        return check_call(self, *args, **options)

    def _target_tokenizer(self) -> Tokenizer:
        # A model with a separate target sentencepiece model encodes prefixes with it.
        return getattr(self, "target_tokenizer", None) or self.tokenizer

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

    def _run(self, items: list, prefixes, opts: CallOptions, offset: int = 0):
        """(n-best Hyp list per input, kinds, DecodeStats, warnings) of one call."""
        prefix_ids = sentence_units.prefix_ids(self, items, prefixes)
        for i, ids in enumerate(prefix_ids):
            if opts.max_len is not None and len(ids) > opts.max_len:
                # The limit counts the prefix: returning it whole would exceed the limit, cutting
                # it would drop what the caller asked the output to start with.
                raise ValueError(f"target_prefix: input {i + offset} has {len(ids)} tokens, more than "
                                 f"max_decoding_length={opts.max_len} (which counts the prefix); raise "
                                 f"max_decoding_length or shorten the prefix")
        units, kinds, splits = sentence_units.units(self, items, prefix_ids, offset)
        stats = DecodeStats(sentences=len(items))
        unit_hyps: list[list[Hyp]] = [[] for _ in units]
        # Longest first: a batch holds similar lengths, and the biggest one comes first.
        order = sorted(range(len(units)), key=lambda u: -len(units[u].src))
        for u, unit in enumerate(units):
            if unit.keep is not None:
                unit_hyps[u] = [Hyp([unit.keep])]
        order = [u for u in order if units[u].keep is None]
        batches = [order[start:start + opts.batch_size] for start in range(0, len(order), opts.batch_size)]
        done = self._lanes.map(lambda lane, b: lane._decode_batch([units[u] for u in b], opts), batches)
        for batch, (hyps, part) in zip(batches, done):
            merge_stats(stats, part, [units[u].input for u in batch])
            for u, h in zip(batch, hyps):
                unit_hyps[u] = h
        for backend in self._lanes.backends():  # a native engine frees the scratch a huge batch grew
            backend.release_scratch()
        per_input: list[list[list[Hyp]]] = [[] for _ in items]  # input -> units -> n-best
        for unit, h in zip(units, unit_hyps):
            if unit.source is not None:  # text now: what copied the source is the source's own text
                h = [Hyp([self._copy_through.text(unit.source, x.chunks[0])], x.logprob, x.positions) for x in h]
            per_input[unit.input].append(h)
        return [join_units(u) for u in per_input], kinds, stats, splits

    def _decode_batch(self, units: list[Unit], opts: CallOptions) -> tuple[list[list[Hyp]], DecodeStats]:
        """The n-best hypotheses of every unit of a batch (prefix included) and the batch's
        statistics (hit_max_len and looping as batch rows). Units whose prefix already
        fills their length limit are not decoded: the prefix is their output."""
        limits = [sentence_limit(len(u.src), opts.max_len, opts.length_factor) - len(u.prefix) for u in units]
        run = [r for r, n in enumerate(limits) if n >= 1]
        full = [r for r, n in enumerate(limits) if n < 1]  # the prefix fills the limit: it is the output
        hyps: list[list[Hyp]] = [[Hyp([list(u.prefix)])] for u in units]
        if full and opts.scores:
            logps = forced_scores(self._scorer(opts), [units[r].src for r in full], [units[r].prefix for r in full],
                                  range(len(full)))  # prefixes cut short: no EOS scored
            for r, lp in zip(full, logps):
                hyps[r] = [Hyp([list(units[r].prefix)], lp, len(units[r].prefix) + 1)]
        if not run:
            return hyps, DecodeStats(sentences=len(units), hit_max_len=list(range(len(units))),
                                     looping=self._looping(hyps))
        prefixed = any(units[r].prefix for r in run)
        src = [PrefixSource(units[r].src, units[r].prefix) if prefixed else units[r].src for r in run]
        sub, stats = self._decode_rows(src, opts, [limits[r] for r in run], [units[r].seed for r in run], prefixed)
        stats.hit_max_len = sorted([run[r] for r in stats.hit_max_len] + full)
        for r, h in zip(run, sub):
            hyps[r] = h
        stats.looping = self._looping(hyps)
        return hyps, stats

    def _looping(self, hyps: list[list[Hyp]]) -> list[int]:
        """The rows whose best hypothesis repeats a 1-3-gram 4+ times in a row."""
        return [r for r, h in enumerate(hyps) if self._loops().repeats(h[0].chunks[0])]

    def _loops(self) -> LoopCheck:
        if self._loop_check is None:
            self._loop_check = LoopCheck(self._target_tokenizer())
        return self._loop_check

    def _decode_rows(self, src: list, opts: CallOptions, max_len, seeds, prefixed: bool
                     ) -> tuple[list[list[Hyp]], DecodeStats]:
        verifier, drafter = self.verifier, self.drafter
        if prefixed:  # decoding/prefix.py: every strategy starts after its rows' prefixes
            verifier = PrefixedBackend(verifier)
            drafter = None if drafter is None else PrefixedBackend(drafter)
        prefixes = [target_prefix(s) for s in src]
        strategy = strategies.get(opts.algo)
        if opts.rules.active:  # every step's distribution ruled; lossless strategies: greedy in their place
            verifier = RuledBackend(verifier, opts.rules)
            strategy = strategy if strategy.rules == RULES_OWN else strategies.get("greedy")
        # A strategy's cost policy lives as long as this Translator: its costs are learnt once.
        policy = None if strategy.policy is None else strategy.policy.get(self, opts)
        outs, stats = strategy.run(StrategyCall(verifier, drafter, src, max_len, opts, seeds, policy))
        if strategy.hypotheses:  # beam search: n-best lists, scored as it went
            prefix_logps = [s.prefix_logprob if isinstance(s, PrefixSource) else 0.0 for s in src]
            if prefixed and opts.rules.active:  # the prefix's tokens scored under the rules too
                prefix_logps = forced_scores(self._scorer(opts), [list(s) for s in src], prefixes, range(len(src)))
            hyps = from_beam(outs, prefixes, prefix_logps, opts.length_penalty, opts.beam_rule)
            if prefixed:  # the search normalised by the length after the prefix; rank by the whole output's
                hyps = [sorted(h, key=lambda x: -self._score(x, opts)) for h in hyps]
            return hyps, stats
        outs = [list(p) + o for p, o in zip(prefixes, outs)]
        if opts.repetition_guard:  # no prefixes here (translate_options.check_repetition_guard)
            outs = self._revert_loops(src, outs, stats)
        logps = (forced_scores(self._scorer(opts), [list(s) for s in src], outs, stats.hit_max_len) if opts.scores
                 else [0.0] * len(outs))
        # len + 1 even for rows cut at max_len (no EOS scored), as beam search normalises them
        return [[Hyp([o], lp, len(o) + 1)] for o, lp in zip(outs, logps)], stats

    def _scorer(self, opts: CallOptions) -> Backend:
        """What scores outputs teacher-forced: the model, or with rules its ruled distribution."""
        return RuledBackend(self.verifier, opts.rules) if opts.rules.active else self.verifier

    def _revert_loops(self, src: list[list[int]], outs: list[list[int]], stats: DecodeStats) -> list[list[int]]:
        """outs, each output that loops (repetition_guard.py) replaced by its source; such
        rows leave stats.hit_max_len (a loop usually ran to the limit; the source did not)."""
        guarded, reverted = [], set()
        for row, (s, o) in enumerate(zip(src, outs)):
            source = list(s[:-1]) if s and s[-1] == self.eos else list(s)
            if self._loops().loops(source, o):
                reverted.add(row)
                o = source
            guarded.append(o)
        stats.loops_reverted += len(reverted)
        stats.hit_max_len = [row for row in stats.hit_max_len if row not in reverted]
        return guarded

    def _output(self, hyp: Hyp, kind: str):
        if kind != TEXT:
            return as_kind([t for c in hyp.chunks for t in c], kind, self._target_tokenizer())
        return " ".join(t for t in (c if isinstance(c, str) else self._target_tokenizer().decode(c)
                                    for c in hyp.chunks) if t)

    @staticmethod
    def _score(hyp: Hyp, opts: CallOptions) -> float:
        return score(hyp, opts.length_penalty)

    def _format(self, hyps: list[Hyp], kind: str, opts: CallOptions):
        def one(h: Hyp):
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

    def __init__(self, model: str | os.PathLike | ModelDir | None = None, threads: int | None = None,
                 compute_type: str = "int8", shortlist: bool = True, device: str = "cpu", inter_threads: int = 1):
        super().__init__(model, None, threads, compute_type, shortlist, device=device, inter_threads=inter_threads)
        # Copy-through reads source and output with one sentencepiece model; a model with
        # separate source and target vocabularies (tokenizer "marian") is decoded plainly.
        if isinstance(self.tokenizer, Tokenizer):
            self._copy_through = CopyThrough(self.tokenizer.sp)
