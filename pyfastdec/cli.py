"""The `fastdec` command: translate, correct, info, bench.

Line discipline of translate/correct: exactly one output line per input line, in input
order, written only as whole lines (so a pipe cut short or a Ctrl-C leaves complete
lines behind). Input is read as bytes and decoded line by line, so an invalid UTF-8 line
is reported by number; a file given with -i is checked completely before anything is
translated, so a bad file produces no output at all.
"""
from __future__ import annotations

import sys

import pyfastdec

PROG = "fastdec"
EXIT_ERROR, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 2, 130, 143  # 128 + SIGINT, SIGTERM

# numpy, sentencepiece and the engine take a few hundred milliseconds to load, before
# main() runs. Ctrl-C is held back while they load (a KeyboardInterrupt inside a C
# extension's import comes out as an ImportError) and delivered right after, ending the
# program as one during main() does: one line, exit 130, no traceback. The command holds
# it from the first line of pyfastdec/__init__ (_hold_sigint_for_the_command); an import
# of this module after the package's holds it from here.
try:
    _held = pyfastdec.__dict__.pop("_MASK_BEFORE_CLI", None)
    try:
        import signal
        import threading

        if _held is None and hasattr(signal, "pthread_sigmask") and \
                threading.current_thread() is threading.main_thread():
            _held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        import argparse
        import math
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures import TimeoutError as FutureTimeout
        from concurrent.futures.process import BrokenProcessPool
        import os
        import time
        import warnings
        from contextlib import contextmanager
        from dataclasses import dataclass
        from pathlib import Path
        from typing import BinaryIO, Iterator, Optional

        import numpy as np

        from pyfastdec._version import __version__
        from pyfastdec.api import (ALGOS, DEFAULT_MODELS, Corrector, LongInputWarning, Translator, load_checked,
                                   merge_stats, packaged_model_path)
        from pyfastdec.decoding import DecodeStats
        from pyfastdec.decoding.beam import RULES as BEAM_RULES
        from pyfastdec.nbest import nbest_line
        from pyfastdec.default_strategy import StrategyChoice, default_strategy
        from pyfastdec.model_dir import CONFIG_FILE, ModelDir, ModelDirError, read_config
        from pyfastdec.runtime import check_threads, check_workers, cpu_info, default_threads
        from pyfastdec.size_limits import (ENGINE_MAX_TOPK, MAX_BATCH_SIZE, MAX_BEAM_SIZE, MAX_BETA, MAX_BLOCK,
                                           MAX_N_BEST, MAX_WORKERS)
    finally:
        if _held is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, _held)  # a Ctrl-C meanwhile is raised here
except KeyboardInterrupt:
    print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_INTERRUPTED) from None

BEAM_BOUND = f"beam search takes the top 2 x beam size from an engine limited to top-{ENGINE_MAX_TOPK}"
BATCH_BOUND = "memory grows with every sentence of a batch"
SHORTLIST_FILE = "shortlist.bin"
RAY_LOCAL = "local"  # --ray with no address: start a local cluster


class Terminated(KeyboardInterrupt):
    """SIGTERM (`timeout`, `kill`, a job scheduler), raised as Ctrl-C is so that it ends the
    command the same way: between whole output lines, workers stopped, one line on stderr."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated


class CliError(Exception):
    """A problem reported as one line on stderr; `code` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------------------- options
@dataclass(frozen=True)
class ModelSpec:
    """What a (worker) process needs to build its Translator; picklable."""

    role: str  # "translate" or "correct"
    model: Optional[str]
    drafter: Optional[str]
    threads: Optional[int]
    compute_type: str
    shortlist: bool

    def build(self) -> Translator:
        if self.role == "correct":
            return Corrector(self.model, self.threads, self.compute_type, self.shortlist)
        return Translator(self.model, self.drafter, self.threads, self.compute_type, self.shortlist)


@dataclass(frozen=True)
class DecodeOptions:
    """Keyword arguments of Translator.translate chosen on the command line."""

    algo: str
    beam_size: int = 1
    batch_size: int = 32
    n_best: int = 1
    block: Optional[int] = None
    beta: Optional[int] = None
    tau: Optional[float] = None
    max_decoding_length: Optional[int] = None
    length_penalty: float = 1.0
    sampling_topk: int = 1
    sampling_temperature: float = 1.0
    sampling_seed: Optional[int] = None
    beam_rule: str = "pyfastdec"
    edit_margin: Optional[float] = None  # None: the model's own (config.json decoding.edit_margin)
    fallback: Optional[float] = None  # bild: None = the little model's own (config.json decoding)
    rollback: Optional[float] = None  # bild-lossy: likewise
    repetition_guard: Optional[bool] = None  # correct: None = on (Translator.translate)
    sampling_topp: float = 1.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    min_decoding_length: int = 0

    def kwargs(self) -> dict:
        kw = dict(algo=self.algo, beam_size=self.beam_size, batch_size=self.batch_size, n_best=self.n_best,
                  return_scores=self.n_best > 1, return_stats=True, block=self.block,
                  max_decoding_length=self.max_decoding_length, length_penalty=self.length_penalty,
                  sampling_topk=self.sampling_topk, sampling_temperature=self.sampling_temperature,
                  sampling_seed=self.sampling_seed, beam_rule=self.beam_rule, sampling_topp=self.sampling_topp,
                  repetition_penalty=self.repetition_penalty, no_repeat_ngram_size=self.no_repeat_ngram_size,
                  min_decoding_length=self.min_decoding_length)
        if self.beta is not None:
            kw["beta"] = self.beta
        if self.tau is not None:
            kw["tau"] = self.tau
        if self.edit_margin is not None:
            kw["edit_margin"] = self.edit_margin
        if self.fallback is not None:
            kw["fallback"] = self.fallback
        if self.rollback is not None:
            kw["rollback"] = self.rollback
        if self.repetition_guard is not None:
            kw["repetition_guard"] = self.repetition_guard
        return kw

    def describe(self) -> str:
        parts = [f"algo {self.algo}", f"batch size {self.batch_size}"]
        if self.algo == "beam":
            parts.append(f"beam size {self.beam_size}, n-best {self.n_best}")
        if self.algo in ("gad", "gad++"):
            parts.append(f"block {self.block if self.block is not None else 'drafter default'}")
        if self.algo == "gad++":
            beta, tau = (1 if self.beta is None else self.beta), (0.0 if self.tau is None else self.tau)
            parts.append(f"beta {beta}, tau {tau}")
        if self.sampling_topk != 1:
            parts.append(f"sampling top-{self.sampling_topk or 'all'}, temperature {self.sampling_temperature}, "
                         f"seed {self.sampling_seed}")
        if self.edit_margin is not None:
            parts.append(f"edit margin {self.edit_margin}")
        if (self.repetition_penalty, self.no_repeat_ngram_size, self.min_decoding_length) != (1.0, 0, 0):
            parts.append(f"repetition penalty {self.repetition_penalty}, no repeat n-gram size "
                         f"{self.no_repeat_ngram_size}, min decoding length {self.min_decoding_length}")
        if self.repetition_guard is False:
            parts.append("no repetition guard")
        if self.algo in ("bild", "bild-lossy"):
            parts.append(f"fallback {'model default' if self.fallback is None else self.fallback}")
        if self.algo == "bild-lossy":
            parts.append(f"rollback {'model default' if self.rollback is None else self.rollback}")
        if self.max_decoding_length is not None:
            parts.append(f"max decoding length {self.max_decoding_length}")
        if self.length_penalty != 1.0:
            parts.append(f"length penalty {self.length_penalty}")
        if self.algo == "beam" and self.beam_rule != "pyfastdec":
            parts.append(f"beam rule {self.beam_rule}")
        return ", ".join(parts)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def bounded_int(maximum: int, why: str):
    """An argparse type: an integer in [1, maximum]; `why` explains the bound in the error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not 1 <= value <= maximum:
            raise argparse.ArgumentTypeError(f"expected an integer in [1, {maximum}] ({why}), got {text!r}")
        return value

    return parse


def thread_count(text: str) -> int:
    value = positive_int(text)
    try:
        return check_threads(value, "--threads")
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text}: " + str(e).split(": ", 1)[1]) from None


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def unit_interval(text: str) -> float:
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def _add_model_args(p: argparse.ArgumentParser, role: str, drafter: bool) -> None:
    default = packaged_model_path(DEFAULT_MODELS[role])
    p.add_argument("-m", "--model", metavar="MODEL", help=f"model directory (default: the packaged {default})")
    if drafter:
        p.add_argument("--drafter", metavar="DIR",
                       help="GAD drafter directory (arch nat-drafter, same vocabulary as the model; default with "
                            "no -m: the packaged drafter, if installed)")
    p.add_argument("--threads", type=thread_count, metavar="N",
                   help="intra-op threads per process (default: physical cores divided by --workers, "
                        "or FASTDEC_THREADS)")
    p.add_argument("--compute-type", choices=("int8", "float32"), default="int8",
                   help="int8 (default; a float32 model runs float32 with a warning) or float32 "
                        "(refused for an int8 model directory)")
    p.add_argument("--no-shortlist", action="store_true", help="score the full vocabulary even if the model "
                                                                "directory has a shortlist.bin")


def _add_algo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--algo", choices=ALGOS,
                   help="decoding algorithm (default: beam with --beam-size > 1 or --n-best > 1, else the "
                        "fastest lossless one the model supports: blockwise with proposal heads, gad with a drafter, "
                        "bild with a little model, else greedy; `fastdec info -m MODEL` says which); greedy, iad, "
                        "gad, blockwise and bild give identical output; gad++ trades exactness for speed with "
                        "--beta/--tau, bild-lossy with --rollback")
    p.add_argument("--beam-size", type=bounded_int(MAX_BEAM_SIZE, BEAM_BOUND), metavar="N",
                   help=f"beam size for --algo beam (default 5, at least --n-best; at most {MAX_BEAM_SIZE})")
    p.add_argument("--n-best", type=bounded_int(MAX_N_BEST, "at most the largest beam size"), default=1,
                   metavar="N",
                   help="print the N best translations of every input line (implies --algo beam) in Marian's "
                        "n-best format: 'I ||| TEXT ||| F0= LOGPROB ||| SCORE', one line per hypothesis, best "
                        "first, where I is the 0-based input line index, LOGPROB the summed log-probability "
                        "(EOS included) and SCORE = LOGPROB / tokens^length-penalty (the average log-probability "
                        "per token by default); up to N lines per input line; N at most --beam-size")
    p.add_argument("--max-decoding-length", type=positive_int, metavar="N",
                   help="at most N output tokens per sentence, EOS not counted (default: 2 * source tokens + 10)")
    p.add_argument("--length-penalty", type=non_negative_float, default=1.0, metavar="A",
                   help="beam search ranks by log-probability / length^A (default 1: per-token average; 0: none)")
    p.add_argument("--beam-rule", choices=BEAM_RULES, default="pyfastdec",
                   help="when beam search stops: pyfastdec (default: at beam-size finished hypotheses, or when no "
                        "live one can still win) or hf (as Hugging Face transformers' generate with num_beams: a "
                        "converted HF Marian model gives HF's beam outputs)")
    p.add_argument("--sampling-topk", type=non_negative_int, default=1, metavar="K",
                   help="sample each token at random from the K most likely (0: all; default 1: greedy, no "
                        "sampling); greedy-style, one token per step")
    p.add_argument("--sampling-temperature", type=positive_float, default=1.0, metavar="T",
                   help="with --sampling-topk: sample from softmax(logits / T) (default 1)")
    p.add_argument("--sampling-seed", type=non_negative_int, metavar="S",
                   help="with --sampling-topk: the random seed (default: a fresh one every run)")
    p.add_argument("--sampling-topp", type=unit_interval, default=1.0, metavar="P",
                   help="with --sampling-topk: sample only from the most likely tokens whose probability before "
                        "them is below P (nucleus; default 1: off)")
    p.add_argument("--repetition-penalty", type=positive_float, default=1.0, metavar="R",
                   help="divide positive / multiply negative logits of tokens already output by R (> 1 penalises "
                        "repeats; default 1: off); drafting strategies then run greedy")
    p.add_argument("--no-repeat-ngram-size", type=non_negative_int, default=0, metavar="N",
                   help="never output an N-gram twice (default 0: off); drafting strategies then run greedy")
    p.add_argument("--min-decoding-length", type=non_negative_int, default=0, metavar="N",
                   help="no EOS before N output tokens per sentence (default 0); drafting strategies then run greedy")
    p.add_argument("--block", type=bounded_int(MAX_BLOCK, "longer drafts cost memory and are rarely accepted"),
                   metavar="K", help=f"GAD/GAD++: tokens drafted per iteration (default: the drafter's "
                                     f"block_size; at most {MAX_BLOCK})")
    p.add_argument("--beta", type=bounded_int(MAX_BETA, "the engine's top-k limit"), metavar="B",
                   help=f"GAD++: accept a drafted token within the verifier's top-B (default 1; paper: 3; "
                        f"at most {MAX_BETA})")
    p.add_argument("--tau", type=non_negative_float, metavar="T",
                   help="GAD++: ... and within T of the top-1 log-probability (default 0; paper: 1.0)")
    p.add_argument("--fallback", type=non_negative_float, metavar="P",
                   help="BiLD: the little model (--drafter) drafts while its top-1 probability is at least P, in "
                        "[0, 1] (default: the little model's config.json decoding, chosen on val)")
    p.add_argument("--rollback", type=non_negative_float, metavar="R",
                   help="bild-lossy: keep a little token while the big model's -log p of it is at most R nats "
                        "(at most ln 64; default: the little model's config.json decoding)")


def _add_io_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--input", metavar="IN",
                   help="input file, one text per line, one or more sentences each (default: stdin)")
    p.add_argument("-o", "--output", metavar="OUT", help="output file (default: stdout)")
    p.add_argument("--batch-size", type=bounded_int(MAX_BATCH_SIZE, BATCH_BOUND), default=32, metavar="N",
                   help=f"sentences per batch (default 32, at most {MAX_BATCH_SIZE}); the sentences of a block of "
                        f"lines are sorted by length")
    p.add_argument("--workers", type=bounded_int(MAX_WORKERS, "each worker loads its own models"), default=None,
                   metavar="N", help=f"N processes over contiguous shards of the input, each with --threads "
                                     f"threads; output in input order (reads the whole input first; at most "
                                     f"{MAX_WORKERS}, and one per CPU this process may use); with --ray: N "
                                     f"actors (default: as many as the cluster has room for)")
    p.add_argument("--ray", nargs="?", const=RAY_LOCAL, default=None, metavar="ADDRESS",
                   help="decode on a Ray cluster (pip install 'pyfastdec[ray]'): the one at ADDRESS (e.g. auto, "
                        "ray://head:10001), else a local one; needs -i IN and -o OUT, a file or a directory of "
                        "shards; --threads per actor (default 1); a killed run resumes, rerun the same command")
    p.add_argument("--line-by-line", action="store_true",
                   help="translate and flush every line as soon as it is read (default when stdin is a terminal)")
    p.add_argument("--stats", action="store_true",
                   help="print sentences/s, tokens/s and mean accepted tokens per iteration to stderr")
    progress = p.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="show a progress bar on stderr for -i FILE even when stderr is not a terminal")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never show it")


def epilog(command: str) -> str:
    nbest = (" (with --n-best N: up to N lines per input line, 'I ||| TEXT ||| F0= LOGPROB ||| SCORE')"
             if command == "translate" else "")
    example = ('echo "A man rides a bike down the street." | fastdec translate' if command == "translate"
               else "fastdec correct -i essays.txt -o corrected.txt")
    return f"""\
One output line per input line, in order{nbest}; an empty line (or one of only
control characters) gives an empty line. Every line is split into sentences, each
sentence is decoded on its own and the results are rejoined with single spaces; a
single sentence longer than the model's max_source_len is cut between words, and a
warning names the line on stderr. Output is written in whole lines only, whatever stops it.
Exit status: 0 done; 1 error (model directory, files) or output closed early (e.g. by
`| head`); 2 usage or invalid UTF-8 input (the error names the line); 130 interrupted
(Ctrl-C); 143 terminated (SIGTERM).

example: {example}
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Fast CPU decoding of seq2seq translation and "
                                                            "correction models (pyfastdec).")
    parser.add_argument("--version", action="version", version=f"{PROG} (pyfastdec) {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("translate", help="translate lines (stdin -> stdout by default)", epilog=epilog("translate"),
                       description="Translate text line by line, sentence by sentence, with a model directory "
                                   "(default: the packaged En->De model and drafter).",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_model_args(p, "translate", drafter=True)
    _add_algo_args(p)
    _add_io_args(p)
    p.set_defaults(run=run_translate, role="translate")

    p = sub.add_parser("correct", help="correct lines with IAD (input-guided aggressive decoding)",
                       epilog=epilog("correct"), formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Correct text line by line, sentence by sentence, with a correction model "
                                   "(default: the packaged uk-gec), decoding with IAD (output identical to greedy).")
    _add_model_args(p, "correct", drafter=False)
    p.add_argument("--edit-margin", type=non_negative_float, metavar="M",
                   help="keep the source token unless the model's best edit beats it by M nats (higher: fewer, "
                        "surer edits; 0: plain greedy; default: the model's own, config.json decoding.edit_margin)")
    p.add_argument("--no-repetition-guard", action="store_true",
                   help="keep corrections that loop: that repeat a word, piece or punctuation n-gram (n <= 3) "
                        "3+ times in a row, more often than the sentence does (by default such a correction is "
                        "dropped and the sentence comes back as it was)"),
    _add_io_args(p)
    p.set_defaults(run=run_translate, role="correct")

    p = sub.add_parser("info", help="version, CPU and ISA, threads, the default models and the strategy "
                                    "that runs; with -m a model summary")
    p.add_argument("-m", "--model", metavar="MODEL", help="summarise this model directory")
    p.add_argument("--drafter", metavar="DIR", help="with -m: the GAD drafter that would run beside it")
    p.set_defaults(run=run_info)

    p = sub.add_parser("bench", help="latency (batch 1: p50/p90 ms) and throughput (sentences/s) on a file")
    _add_model_args(p, "translate", drafter=True)
    _add_algo_args(p)
    p.add_argument("-i", "--input", metavar="FILE", required=True, help="sentences to decode, one per line")
    p.add_argument("--batch-size", type=bounded_int(MAX_BATCH_SIZE, BATCH_BOUND), default=32, metavar="N",
                   help=f"batch size of the throughput run (default 32, at most {MAX_BATCH_SIZE})")
    p.add_argument("--latency-sentences", type=positive_int, default=100, metavar="N",
                   help="sentences timed one at a time for the latency figures (default 100)")
    p.set_defaults(run=run_bench, role="translate")

    # The converters keep their own parser (python -m pyfastdec.convert); this forwards to it.
    p = sub.add_parser("convert", add_help=False,
                       help="import a model (marian: a Hugging Face MarianMTModel) or export one (ctranslate2); "
                            "fastdec convert --help for the details")
    p.add_argument("convert_args", nargs=argparse.REMAINDER)
    p.set_defaults(run=run_convert)
    return parser


def run_convert(args) -> int:
    from pyfastdec.convert.command import main as convert_main

    return convert_main(args.convert_args, prog=f"{PROG} convert")


def model_spec(args) -> ModelSpec:
    threads = args.threads
    workers = getattr(args, "workers", None) or 1
    if threads is None and getattr(args, "ray", None) is not None:
        threads = 1  # an actor asks Ray for --threads CPUs; Ray scales by actors
    elif threads is None and workers > 1:
        threads = max(1, default_threads() // workers)
    return ModelSpec(args.role, args.model, getattr(args, "drafter", None), threads, args.compute_type,
                     not args.no_shortlist)


def decode_options(args, default: StrategyChoice) -> DecodeOptions:
    """The options of the command line; with no --algo, beam when a beam or n-best list is
    asked for, else the model's default lossless strategy (default_strategy.py)."""
    if args.role == "correct":
        return DecodeOptions(default.algo, batch_size=args.batch_size, edit_margin=args.edit_margin,
                             repetition_guard=False if args.no_repetition_guard else None)
    algo = args.algo
    if algo is None:
        wants_beam = args.n_best > 1 or (args.beam_size or 1) > 1
        algo = "beam" if wants_beam else "greedy" if args.sampling_topk != 1 else default.algo
    beam_size = args.beam_size if args.beam_size is not None else (max(5, args.n_best) if algo == "beam" else 1)
    return DecodeOptions(algo, beam_size, args.batch_size, args.n_best, args.block, args.beta, args.tau,
                         args.max_decoding_length, args.length_penalty, args.sampling_topk,
                         args.sampling_temperature, args.sampling_seed, args.beam_rule, None, args.fallback,
                         args.rollback, sampling_topp=args.sampling_topp, repetition_penalty=args.repetition_penalty,
                         no_repeat_ngram_size=args.no_repeat_ngram_size, min_decoding_length=args.min_decoding_length)


# ----------------------------------------------------------------------------- input
@dataclass
class Line:
    number: int  # 1-based
    text: str


def decode_line(raw: bytes, number: int) -> str:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CliError(f"line {number}: invalid UTF-8 at byte {err.start + 1} of the line", EXIT_BAD_INPUT) from None
    return text[1:] if number == 1 and text.startswith("\ufeff") else text  # a byte-order mark is no text


def numbered_lines(data: bytes) -> list[Line]:
    """A whole input's lines, numbered from 1 and checked (decode_line)."""
    raws = data.split(b"\n")
    if raws and raws[-1] == b"":
        raws.pop()  # the newline ending the last line starts no new line
    return [Line(n, decode_line(raw, n)) for n, raw in enumerate(raws, 1)]


class InputLines:
    """The input as numbered lines. A file is read and checked whole (so it is known to be
    valid, and its length is known, before anything is translated); stdin is read as it
    comes, block by block, or line by line."""

    def __init__(self, path: Optional[str]):
        self.lines: Optional[list[Line]] = None
        self.stream: Optional[BinaryIO] = None
        if path is None or path == "-":
            self.stream = sys.stdin.buffer
            return
        try:
            data = Path(path).read_bytes()
        except OSError as err:
            raise CliError(f"cannot read input {path}: {err.strerror or err}") from None
        self.lines = numbered_lines(data)

    @property
    def total(self) -> Optional[int]:
        return None if self.lines is None else len(self.lines)

    def interactive(self) -> bool:
        return self.stream is not None and self.stream.isatty()

    def all(self) -> list[Line]:
        return [line for block in self.blocks(1 << 30) for line in block]

    def blocks(self, size: int) -> Iterator[list[Line]]:
        if self.lines is not None:
            for start in range(0, len(self.lines), size):
                yield self.lines[start:start + size]
            return
        block: list[Line] = []
        number = 0
        while True:
            raw = self.stream.readline()
            if not raw:
                break
            number += 1
            try:
                block.append(Line(number, decode_line(raw, number)))
            except CliError:
                if block:  # the lines before the bad one are translated and written first
                    yield block
                raise
            if len(block) >= size:
                yield block
                block = []
        if block:
            yield block


# ----------------------------------------------------------------------------- output
@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back while a block of lines is written (or workers start),
    so an interrupt lands between whole lines (it is delivered as soon as the block is
    out). Also while a write to a pipe waits for a slow reader: whole lines are what
    --help promises, and SIGKILL still stops the process at once."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = mask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, old)


def write_failed(name: str, err: OSError, stdout: bool) -> CliError:
    """The one-line error for output that cannot be written (a full disk, an I/O error).
    Callers let BrokenPipeError pass: a closed pipe is no error, main exits quietly."""
    if stdout:
        _stdout_to_devnull()  # what is still buffered must not fail again at exit
    return CliError(f"cannot write output {name}: {err.strerror or err}")


class LineWriter:
    """Writes whole lines as UTF-8 bytes and flushes after each block."""

    def __init__(self, path: Optional[str]):
        self.path = path
        self.failed = False
        if path is None or path == "-":
            self.stream = sys.stdout.buffer
            self.owned, self.name = False, "stdout"
        else:
            try:
                self.stream = open(path, "wb")
            except OSError as err:
                raise CliError(f"cannot write output {path}: {err.strerror or err}") from None
            self.owned, self.name = True, path

    def write(self, lines: list[str]) -> None:
        data = "".join(lines).encode("utf-8")
        with sigint_deferred():
            try:
                self.stream.write(data)
                self.stream.flush()
            except BrokenPipeError:
                raise
            except OSError as err:
                self.failed = True
                raise write_failed(self.name, err, not self.owned) from None

    def close(self) -> None:
        if not self.owned:
            return
        try:
            self.stream.close()
        except BrokenPipeError:
            raise
        except OSError as err:
            if not self.failed:  # else the failed write was reported, and close retried its bytes
                raise write_failed(self.name, err, False) from None


def print_out(text: str) -> None:
    """A report line of info or bench on stdout."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        raise
    except OSError as err:
        raise write_failed("stdout", err, True) from None


class Progress:
    """`\\r1234/5000 lines 45.1 lines/s` on stderr, at most ten times a second."""

    def __init__(self, total: Optional[int], enabled: bool):
        self.total, self.enabled = total, enabled and total is not None
        self.done, self.start, self.shown = 0, time.perf_counter(), 0.0
        self.width = 0

    def update(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if self.enabled and (now - self.shown >= 0.1 or self.done == self.total):
            self.shown = now
            rate = self.done / max(now - self.start, 1e-9)
            text = f"\r{self.done}/{self.total} lines {rate:.1f} lines/s"
            self.width = max(self.width, len(text))
            sys.stderr.write(text)
            sys.stderr.flush()

    def clear(self) -> None:
        if self.enabled and self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")

    def finish(self) -> None:
        if self.enabled and self.width:
            sys.stderr.write("\n")
            sys.stderr.flush()


# ----------------------------------------------------------------------------- translating
def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def decode_rows(translator: Translator, lines: list[Line], options: DecodeOptions
                ) -> tuple[list[list[str]], DecodeStats, list[tuple[Optional[int], str]]]:
    """The output lines (with their newlines) of each input line of a block, the block's
    statistics, and its warnings: (index in the block, or None, message), a line with a
    sentence that had to be cut named by its line number."""
    texts = [line.text for line in lines]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LongInputWarning)
        if options.n_best > 1:
            kw = {k: v for k, v in options.kwargs().items() if k != "return_scores"}
            outputs, stats = translator.translate_scored(texts, **kw)
        else:
            outputs, stats = translator.translate(texts, **options.kwargs())
    notes = []
    for w in caught:
        if isinstance(w.message, LongInputWarning):
            m = w.message
            notes.append((m.index, f"line {lines[m.index].number}: a sentence of {m.n_ids} source tokens exceeds "
                                   f"the model's max_source_len {m.limit}; cut between words into {m.chunks} parts, "
                                   f"translated separately and joined with a space"))
        else:
            notes.append((None, str(w.message)))
    rows = []
    for line, result in zip(lines, outputs):
        if options.n_best > 1:
            rows.append([nbest_line(line.number - 1, _one_line(h.output), h.logprob, h.score) + "\n"
                         for h in result])
        else:
            rows.append([_one_line(result) + "\n"])
    return rows, stats, notes


def translate_block(translator: Translator, lines: list[Line], options: DecodeOptions
                    ) -> tuple[list[str], DecodeStats, list[str]]:
    """decode_rows, flattened: the block's output lines, statistics and warnings."""
    rows, stats, notes = decode_rows(translator, lines, options)
    return [text for row in rows for text in row], stats, [note for _, note in notes]


def warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


def print_stats(stats: DecodeStats, lines: int, seconds: float) -> None:
    """Counts input lines (each may hold several sentences, decoded one by one)."""
    seconds = max(seconds, 1e-9)
    print(f"{PROG}: {lines} lines in {seconds:.2f} s: {lines / seconds:.1f} lines/s, "
          f"{stats.generated / seconds:.1f} tokens/s ({stats.generated} output tokens, EOS included); "
          f"mean accepted tokens per iteration {stats.mean_accepted:.2f} "
          f"(output tokens per iteration {stats.mean_tokens:.2f}, {stats.iterations} iterations)"
          + (f"; looping corrections dropped: {stats.loops_reverted} (those sentences, or parts of sentences "
             f"too long for the model, kept as they were)" if stats.loops_reverted else ""),
          file=sys.stderr, flush=True)


# Worker processes (--workers): each builds its own Translator at its first shard (not in
# the pool initializer: an initializer that raises makes the pool respawn it forever,
# while an error in a job reaches the parent).
_worker_spec: Optional[ModelSpec] = None
_worker_translator: Optional[Translator] = None


def _worker_init(spec: ModelSpec) -> None:
    global _worker_spec
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    if hasattr(signal, "pthread_sigmask"):
        # Started with Ctrl-C and SIGTERM blocked (_start_workers): Ctrl-C is now ignored,
        # and SIGTERM (`timeout` to the process group, or _stop_workers) ends the worker
        # silently, as its default action does.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    _worker_spec = spec


def _start_workers(spec: ModelSpec, jobs: list, processes: int):
    """Worker processes (a ProcessPoolExecutor) and the futures of `jobs`, in order.
    The workers never see Ctrl-C: a terminal sends it to every process of the group, and a
    worker still starting up (importing, before _worker_init) would print a traceback; they
    start with SIGINT (and SIGTERM) blocked, a mask that fork and exec pass on, and unblock
    it once they ignore it. The executor starts its processes as jobs are submitted, so the
    submitting is what runs under the mask.

    Not multiprocessing.Pool: a worker that SIGTERM ends (`timeout` signals the whole
    process group) can die holding one of the pool's queue locks, and Pool.terminate()
    then waits on that lock forever (seen: the parent hung in _terminate_pool). The
    executor notices a dead worker by its process sentinel and never waits on its locks."""
    if hasattr(signal, "pthread_sigmask"):
        # The pool starts multiprocessing's resource tracker, which unblocks SIGINT when it
        # is up: started first, it leaves the mask below alone.
        from multiprocessing import resource_tracker
        resource_tracker.ensure_running()
    with sigint_deferred():
        executor = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_worker_init, initargs=(spec,))
        return executor, [executor.submit(_worker_translate, job) for job in jobs]


def _stop_workers(executor: ProcessPoolExecutor) -> None:
    """End the workers now, whatever they are doing (an interrupt, an error)."""
    kill = getattr(executor, "kill_workers", None)  # Python 3.14
    if kill is not None:
        kill()
        return
    for process in list((getattr(executor, "_processes", None) or {}).values()):  # 3.10-3.13: no public way
        process.kill()  # a no-op for one that has exited


def _worker_translate(job: tuple[list[Line], DecodeOptions]):
    global _worker_translator
    if _worker_translator is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the parent already reported them once
            _worker_translator = _worker_spec.build()
    lines, options = job
    return translate_block(_worker_translator, lines, options)


def _results_in_one_process(spec: ModelSpec, source: InputLines, options: DecodeOptions, interactive: bool):
    translator = spec.build()
    size = 1 if interactive else (options.batch_size * 8 if source.total is not None else options.batch_size)
    for block in source.blocks(size):
        yield block, translate_block(translator, block, options)


def _result(future):
    """A worker's result, waited for in short slices: a signal that the kernel hands to
    another thread of this process (one started before SIGTERM was caught, e.g. a BLAS
    thread) only flags Python's handler, which the main thread runs when it next executes
    bytecode; a wait with no timeout never returns to it, and `timeout` hung forever."""
    while True:
        try:
            return future.result(timeout=0.2)
        except FutureTimeout:
            continue
        except BrokenProcessPool:
            # A worker ended abruptly. When a SIGTERM or Ctrl-C to the process group ended it,
            # this process has the same signal pending: let its handler run first.
            time.sleep(0.2)
            raise CliError("a worker process ended abruptly (killed, or out of memory); no output after the "
                           "lines already written") from None


def _results_in_workers(spec: ModelSpec, source: InputLines, options: DecodeOptions, workers: int):
    lines = source.all()
    if not lines:
        return
    # Contiguous shards, several per worker so that the output flows and a slow shard
    # does not hold the others' results back for long.
    shard = max(1, min(math.ceil(len(lines) / workers), options.batch_size * 8))
    jobs = [(lines[s:s + shard], options) for s in range(0, len(lines), shard)]
    executor, futures = _start_workers(spec, jobs, min(workers, len(jobs)))
    finished = False
    try:
        for (block, _), future in zip(jobs, futures):
            yield block, _result(future)
        finished = True
    finally:
        if not finished:
            _stop_workers(executor)
        executor.shutdown(wait=True, cancel_futures=True)


def run_translate(args) -> int:
    if args.ray is not None:
        return _run_on_ray(args)
    if args.workers:  # with --ray, --workers counts actors of the cluster, not processes here
        try:
            check_workers(args.workers)
        except ValueError as err:
            raise CliError(str(err), EXIT_BAD_INPUT) from None
    source = InputLines(args.input)  # a missing or invalid input file fails before the model loads
    spec = model_spec(args)
    model_dir, drafter_dir = load_checked(spec.model, spec.drafter, spec.role, spec.compute_type)
    options = decode_options(args, default_strategy(model_dir, drafter_dir, spec.role, ALGOS))
    interactive = args.line_by_line or source.interactive()
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = Progress(source.total, show)
    writer = LineWriter(args.output)
    total = DecodeStats()
    start = time.perf_counter()
    results = (_results_in_workers(spec, source, options, args.workers) if (args.workers or 1) > 1
               else _results_in_one_process(spec, source, options, interactive))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # load_checked has reported the model warnings once
            for block, (out, stats, notes) in results:
                for note in notes:
                    progress.clear()
                    warn(note)
                writer.write(out)
                merge_stats(total, stats, [line.number - 1 for line in block])
                total.sentences += len(block)
                progress.update(len(block))
    finally:
        results.close()  # stops worker processes at once on an error or interrupt
        progress.finish()
        writer.close()
    if args.stats:
        print_stats(total, total.sentences, time.perf_counter() - start)
    return 0


def _run_on_ray(args) -> int:
    """--ray: pyfastdec.ray_cli, imported only here (it imports Ray)."""
    if args.line_by_line:
        raise CliError("--line-by-line and --ray: a Ray job decodes whole files (-i IN -o OUT)", EXIT_BAD_INPUT)
    if args.input and not os.path.isdir(args.input):
        InputLines(args.input)  # a missing or invalid input file fails before Ray and the model load
    spec = model_spec(args)
    model_dir, drafter_dir = load_checked(spec.model, spec.drafter, spec.role, spec.compute_type)
    options = decode_options(args, default_strategy(model_dir, drafter_dir, spec.role, ALGOS))
    from pyfastdec import ray_cli  # raises CliError saying how to install the extra
    return ray_cli.run(args, spec, options, None if args.ray == RAY_LOCAL else args.ray, model_dir.path,
                       None if drafter_dir is None else drafter_dir.path)


# ----------------------------------------------------------------------------- info, bench
def model_summary(path: str) -> list[str]:
    md = ModelDir.load(path)
    c = md.config
    heads = lambda layers: ",".join(str(s.heads) for s in layers)  # noqa: E731
    ffns = lambda layers: ",".join(str(s.ffn) for s in layers)  # noqa: E731
    params = sum(int(np.prod(t.shape)) for name, t in md.tensors.items() if not name.endswith("weight_scale"))
    q = c.quantization
    shortlist = md.path / SHORTLIST_FILE
    lines = [
        f"model: {md.path}",
        f"  arch: {c.arch} (decoder self-attention: {c.decoder_self}, {c.norm}-norm, {c.activation})",
        f"  layers: {len(c.encoder_layers)} encoder, {len(c.decoder_layers)} decoder",
        f"  d_model: {c.d_model} (head_dim {c.head_dim}; heads enc {heads(c.encoder_layers)} dec "
        f"{heads(c.decoder_layers)}; ffn enc {ffns(c.encoder_layers)} dec {ffns(c.decoder_layers)})",
        f"  vocab: {c.vocab_size} ({', '.join(md.tokenizer_files)})",
        f"  max_source_len: {c.max_source_len}",
        "  quantization: " + (f"{q.weights} weights ({q.weight_scale}), {q.activations} activations, embedding "
                              + ("int8 per row" if q.embedding else "float32 (int8 per row at load)") if q
                              else "none (float32)"),
        "  shortlist: " + (f"present ({SHORTLIST_FILE}, {shortlist.stat().st_size} bytes)" if shortlist.is_file()
                            else "none"),
        f"  parameters: {params}",
    ]
    if c.block_size is not None:
        lines.append(f"  block_size: {c.block_size}")
    if c.edit_margin:
        lines.append(f"  edit margin: {c.edit_margin:g} nats (correct's default; config.json decoding.edit_margin)")
    return lines


def strategy_line(role: str, model: Optional[str], drafter: Optional[str]) -> str:
    """What `fastdec translate` (or correct) runs with no --algo on these directories."""
    model_dir, drafter_dir = load_checked(model, drafter, role, "int8" if model is None else _compute_type(model))
    choice = default_strategy(model_dir, drafter_dir, role, ALGOS)
    command = f"{PROG} {role}" + (f" -m {model}" if model else "") + (f" --drafter {drafter}" if drafter else "")
    return f"strategy of `{command}`: {choice.algo} ({choice.reason})"


def _compute_type(model: str) -> str:
    """The compute type a directory runs without --compute-type, without the int8 warning."""
    # config.json alone: the whole directory (weights hashed) is loaded once, by load_checked
    return "int8" if read_config(Path(model) / CONFIG_FILE).quantization is not None else "float32"


def run_info(args) -> int:
    info = cpu_info()
    forced = f" (forced by FASTDEC_ISA={info['requested']})" if info.get("forced") else ""
    lines = [
        f"pyfastdec {__version__}",
        f"cpu: {info.get('brand', '?')}",
        f"isa: detected {info['detected']}, chosen {info['isa']}{forced}; available: "
        f"{', '.join(info.get('available', []))}",
        "kernels: " + ", ".join(f"{k} {v}" for k, v in info.get("kernels", {}).items()),
        f"threads: {info['default_threads']} by default ({info['physical_cores']} physical cores; "
        f"FASTDEC_THREADS or --threads to change)",
    ]
    for role, name in DEFAULT_MODELS.items():
        path = packaged_model_path(name)
        lines.append(f"default {role} model: {path} ({'installed' if path.is_dir() else 'not installed'})")
    if args.drafter and not args.model:
        raise CliError("info: --drafter needs -m MODEL (the verifier it would draft for)", EXIT_BAD_INPUT)
    if args.model:
        lines += model_summary(args.model)
        lines.append(strategy_line("translate", args.model, args.drafter))
    else:
        for role in ("translate", "correct"):
            if packaged_model_path(DEFAULT_MODELS[role]).is_dir():
                lines.append(strategy_line(role, None, None))
    print_out("\n".join(lines))
    return 0


def run_bench(args) -> int:
    source = InputLines(args.input)
    texts = [line.text for line in source.all() if line.text.strip()]
    if not texts:
        raise CliError(f"{args.input}: no non-empty lines to decode")
    spec = model_spec(args)
    translator = spec.build()
    options = decode_options(args, translator.strategy)
    kwargs = dict(options.kwargs(), return_scores=False, n_best=1)
    print_out(f"{PROG} bench: {translator.model_dir.path}"
              + (f" + drafter {translator.drafter_dir.path}" if translator.drafter_dir else "")
              + f"; {options.describe()}; threads {translator.threads}; compute type {spec.compute_type}; "
              f"shortlist {'on' if spec.shortlist else 'off'}; {len(texts)} sentences from {args.input}")
    translator.translate(texts[:1], **dict(kwargs, batch_size=1))  # warm-up: page in weights, grow buffers
    latency = []
    for text in texts[:args.latency_sentences]:
        start = time.perf_counter()
        translator.translate([text], **dict(kwargs, batch_size=1))
        latency.append((time.perf_counter() - start) * 1000)
    p50, p90 = np.percentile(latency, [50, 90])
    print_out(f"latency, batch 1 ({len(latency)} sentences): p50 {p50:.2f} ms, p90 {p90:.2f} ms, "
              f"mean {np.mean(latency):.2f} ms")
    start = time.perf_counter()
    _, stats = translator.translate(texts, **kwargs)
    seconds = max(time.perf_counter() - start, 1e-9)
    print_out(f"throughput, batch {options.batch_size} ({len(texts)} sentences): {len(texts) / seconds:.1f} "
              f"sentences/s, {stats.generated / seconds:.1f} tokens/s, mean accepted tokens per iteration "
              f"{stats.mean_accepted:.2f}")
    return 0


# ----------------------------------------------------------------------------- main
def _stdout_to_devnull() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush
    does not fail again (the recipe of Python's signal module documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Optional[list[str]] = None) -> int:
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if on_main_thread else None
    try:
        return _main(argv)
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _main(argv: Optional[list[str]]) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["convert"]:  # forwarded whole: REMAINDER would not take a leading --help
        return run_convert(argparse.Namespace(convert_args=argv[1:]))
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_BAD_INPUT
        if getattr(args, "beam_size", None) is not None and args.n_best > args.beam_size:
            parser.error(f"argument --n-best: {args.n_best} exceeds --beam-size {args.beam_size} (a beam keeps "
                         f"at most beam size hypotheses)")
        if getattr(args, "sampling_topk", 1) != 1 and (args.algo not in (None, "greedy") or args.n_best > 1
                                                       or (args.beam_size or 1) > 1):
            parser.error(f"argument --sampling-topk: sampling is greedy-style (one token per step); it takes no "
                         f"--algo {args.algo or 'beam'}, --beam-size or --n-best")
        with warnings.catch_warnings():
            warnings.showwarning = lambda message, *rest, **kw: warn(str(message))
            return args.run(args)
    except (CliError, ModelDirError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
        return err.code if isinstance(err, CliError) else EXIT_ERROR
    except Terminated:
        print(f"{PROG}: terminated", file=sys.stderr, flush=True)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except MemoryError as err:  # the engine's std::bad_alloc, or Python's own
        print(f"{PROG}: error: out of memory ({err or 'allocation failed'}); try a smaller --batch-size "
              f"or fewer --threads/--workers", file=sys.stderr, flush=True)
        return EXIT_ERROR
    except RuntimeError as err:  # the engine's own errors (e.g. threads that cannot start) say what to do
        print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_ERROR
    except OSError as err:  # what was not reported more precisely where it happened
        where = f"{err.filename}: " if err.filename else ""
        print(f"{PROG}: error: {where}{err.strerror or err}", file=sys.stderr, flush=True)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
