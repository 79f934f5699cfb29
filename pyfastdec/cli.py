"""The `fastdec` command: translate, correct, info, bench (convert and train-heads forwarded).

Line discipline of translate/correct: exactly one output line per input line, in input
order, written only as whole lines (so a pipe cut short or a Ctrl-C leaves complete
lines behind). Input is read as bytes and decoded line by line, so an invalid UTF-8 line
is reported by number; a file given with -i is checked completely before anything is
translated, so a bad file produces no output at all.
"""
from __future__ import annotations

import sys

import pyfastdec
# Light (sys only), and first: the handler below names PROG and the exit status.
from pyfastdec.jobs.errors import EXIT_BAD_INPUT, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED, PROG, CliError, warn

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
        import warnings

        # A warning while the engine loads (FASTDEC_ISA above this CPU) is one line of the
        # command's own, not Python's two with a source line.
        with warnings.catch_warnings(record=True) as _import_warnings:
            import argparse
            import math
            import os
            import time
            from typing import Optional

            from pyfastdec._version import __version__
            from pyfastdec.api import ALGOS, DEFAULT_MODELS, load_checked, packaged_model_path
            from pyfastdec.backends.devices import DEVICES
            from pyfastdec.decoding import DecodeStats
            from pyfastdec.decoding.beam import RULES as BEAM_RULES
            from pyfastdec.hypotheses import merge_stats
            from pyfastdec.decoding.limits import DEFAULT_MAX_LENGTH_FACTOR, MAX_LENGTH_CONSTANT
            from pyfastdec.default_strategy import StrategyChoice, default_strategy
            from pyfastdec.jobs.interrupts import Terminated, raise_terminated
            from pyfastdec.jobs.lines import InputLines, LineWriter, print_out, stdout_to_devnull
            from pyfastdec.jobs.options import DecodeOptions, ModelSpec, checked_translator
            from pyfastdec.jobs.progress import Progress, print_stats
            from pyfastdec.jobs.workers import results_in_one_process, results_in_workers
            from pyfastdec.model_dir import ModelDir, ModelDirError
            from pyfastdec.model_dir.model_files import ReadOnce
            from pyfastdec.model_summary import default_model_line, model_summary, strategy_line
            from pyfastdec.runtime import check_threads, check_workers, cpu_info, default_threads
            from pyfastdec.size_limits import (ENGINE_MAX_TOPK, MAX_BATCH_SIZE, MAX_BEAM_SIZE, MAX_BETA, MAX_BLOCK,
                                               MAX_N_BEST, MAX_WORKERS)
        for _w in _import_warnings:
            warn(str(_w.message))
    finally:
        if _held is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, _held)  # a Ctrl-C meanwhile is raised here
except KeyboardInterrupt:
    print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_INTERRUPTED) from None
except ImportError as _err:  # e.g. the engine refusing FASTDEC_ISA: its message says what to set or install
    print(f"{PROG}: error: {_err}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_ERROR) from None

BEAM_BOUND = f"beam search takes the top 2 x beam size from an engine limited to top-{ENGINE_MAX_TOPK}"
BATCH_BOUND = "memory grows with every sentence of a batch"
RAY_LOCAL = "local"  # --ray with no address: start a local cluster
PROGRESS_DELAY = 1.0  # seconds before progress shows on a terminal unasked: quick jobs show none


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


def thread_count(text: str, what: str = "--threads") -> int:
    value = positive_int(text)
    try:
        return check_threads(value, what)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text}: " + str(e).split(": ", 1)[1]) from None


def lane_count(text: str) -> int:
    return thread_count(text, "--inter-threads")


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def edit_margin(text: str) -> float:
    """--edit-margin: nats >= 0, or inf (never edit), as Corrector takes it."""
    return math.inf if text.strip().lower() in ("inf", "+inf", "infinity") else non_negative_float(text)


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


def length_factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0 (output tokens per source token), "
                                         f"got {text!r}")
    return value


def add_length_factor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-length-factor", type=length_factor, metavar="F",
                   help=f"at most floor(F * source tokens) + {MAX_LENGTH_CONSTANT} output tokens per sentence, "
                        f"EOS counted in the source, not in the output (default {DEFAULT_MAX_LENGTH_FACTOR:g}: cuts "
                        f"runaway loops, never a natural output of the shipped models' test sets; "
                        f"--max-decoding-length alone replaces it); with both, the smaller limit wins")


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
                   help="intra-op threads per process, or per --inter-threads copy (default: physical cores, "
                        "or FASTDEC_THREADS, divided by --workers and --inter-threads)")
    p.add_argument("--inter-threads", type=lane_count, default=1, metavar="N",
                   help="batches decoded at once in this process, each by its own copy of the model on its own "
                        "thread, as CTranslate2's inter_threads (default 1): on several cores usually faster than "
                        "as many more --threads at --batch-size 16 and up; memory grows by a model per copy. "
                        "A file is decoded in blocks of 8 batches, a pipe in blocks of N batches")
    p.add_argument("--compute-type", choices=("int8", "float32"), default="int8",
                   help="int8 (default; a float32 model runs float32 with a warning) or float32 "
                        "(refused for an int8 model directory)")
    p.add_argument("--device", choices=DEVICES, default="cpu",
                   help="cpu (default: the native engine) or cuda (the GPU model, float16 weights; a build with "
                        "FASTDEC_CUDA=1, README 'GPU (CUDA) build')")
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
                   help="at most N output tokens per sentence, EOS not counted (default: only the relative "
                        "limit of --max-length-factor)")
    add_length_factor(p)
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
                   help="print sentences/s, tokens/s, mean accepted tokens per iteration and the lines cut at the "
                        "length limit or looping (a 1-3-gram 4+ times in a row) to stderr")
    progress = p.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="show progress on stderr (lines done, of the total with -i FILE) even when stderr "
                               "is not a terminal")
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
    p.add_argument("--edit-margin", type=edit_margin, metavar="M",
                   help="keep the source token unless the model's best edit beats it by M nats (higher: fewer, "
                        "surer edits; 0: plain greedy; inf: never edit; default: the model's own, config.json "
                        "decoding.edit_margin)")
    p.add_argument("--no-repetition-guard", action="store_true",
                   help="keep corrections that loop: that repeat a word, piece or punctuation n-gram (n <= 3) "
                        "3+ times in a row, more often than the sentence does (by default such a correction is "
                        "dropped and the sentence comes back as it was)"),
    add_length_factor(p)
    _add_io_args(p)
    p.set_defaults(run=run_translate, role="correct")

    p = sub.add_parser("info", help="version, CPU and ISA, threads, the default models and the strategy "
                                    "that runs; with -m a model summary")
    p.add_argument("-m", "--model", metavar="MODEL", help="summarise this model directory")
    p.add_argument("model_path", nargs="?", metavar="MODEL", help="the same as -m MODEL")
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

    # Likewise its own parser (pyfastdec/training/heads_command.py), which needs torch only
    # once it trains: --help and the missing-torch line work without it.
    p = sub.add_parser("train-heads", add_help=False,
                       help="train blockwise proposal heads for a model directory on your source text (needs "
                            "pip install \"pyfastdec[train]\"); fastdec train-heads --help for the details")
    p.add_argument("train_args", nargs=argparse.REMAINDER)
    p.set_defaults(run=run_train_heads)
    return parser


def run_train_heads(args) -> int:
    from pyfastdec.training.heads_command import main as train_heads_main

    return train_heads_main(args.train_args, prog=f"{PROG} train-heads")


def run_convert(args) -> int:
    from pyfastdec.convert.command import main as convert_main

    return convert_main(args.convert_args, prog=f"{PROG} convert")


def model_spec(args) -> ModelSpec:
    threads = args.threads
    workers = getattr(args, "workers", None) or 1
    if threads is None and getattr(args, "ray", None) is not None:
        threads = 1  # an actor asks Ray for --threads CPUs; Ray scales by actors
    inter = args.inter_threads
    if inter > 1 and getattr(args, "ray", None) is not None:
        raise CliError("--inter-threads with --ray: a Ray actor decodes one batch at a time; scale with --workers "
                       "(actors) instead", EXIT_BAD_INPUT)
    if inter > 1 and getattr(args, "device", "cpu") != "cpu":
        raise CliError(f"--inter-threads {inter} with --device {args.device}: the GPU model runs one batch at a "
                       f"time; leave out --inter-threads", EXIT_BAD_INPUT)
    if threads is None and workers * inter > 1:
        threads = max(1, default_threads() // (workers * inter))
    return ModelSpec(args.role, args.model, getattr(args, "drafter", None), threads, args.compute_type,
                     not args.no_shortlist, getattr(args, "device", "cpu"), inter)


def decode_options(args, default: StrategyChoice) -> DecodeOptions:
    """The options of the command line; with no --algo, beam when a beam or n-best list is
    asked for, else the model's default lossless strategy (default_strategy.py)."""
    if args.role == "correct":
        return DecodeOptions(default.algo, batch_size=args.batch_size, edit_margin=args.edit_margin,
                             repetition_guard=False if args.no_repetition_guard else None,
                             max_length_factor=args.max_length_factor)
    algo = args.algo
    if algo is None:
        wants_beam = args.n_best > 1 or (args.beam_size or 1) > 1
        algo = "beam" if wants_beam else "greedy" if args.sampling_topk != 1 else default.algo
    beam_size = args.beam_size if args.beam_size is not None else (max(5, args.n_best) if algo == "beam" else 1)
    return DecodeOptions(algo, beam_size, args.batch_size, args.n_best, args.block, args.beta, args.tau,
                         args.max_decoding_length, args.length_penalty, args.sampling_topk,
                         args.sampling_temperature, args.sampling_seed, args.beam_rule, None, args.fallback,
                         args.rollback, sampling_topp=args.sampling_topp, repetition_penalty=args.repetition_penalty,
                         no_repeat_ngram_size=args.no_repeat_ngram_size, min_decoding_length=args.min_decoding_length,
                         max_length_factor=args.max_length_factor)



def run_translate(args) -> int:
    if args.ray is not None:
        return _run_on_ray(args)
    if args.workers:  # with --ray, --workers counts actors of the cluster, not processes here
        try:
            check_workers(args.workers)
        except ValueError as err:
            raise CliError(str(err), EXIT_BAD_INPUT) from None
    source = InputLines(args.input, args.output)  # a missing or invalid input file fails before the model loads
    spec = model_spec(args)
    model_dir, drafter_dir = load_checked(spec.model, spec.drafter, spec.role, spec.compute_type)
    options = decode_options(args, default_strategy(model_dir, drafter_dir, spec.role, ALGOS))
    # Workers build their own translators: a refused option then comes from the first one.
    translator = checked_translator(spec, (model_dir, drafter_dir), options) if (args.workers or 1) == 1 else None
    interactive = args.line_by_line or source.interactive()
    show = (args.progress if args.progress is not None else sys.stderr.isatty()) and not (
        interactive and source.total is None)  # typed or line-by-line stdin: each line's output is its progress
    progress = Progress(source.total, show, delay=0.0 if args.progress else PROGRESS_DELAY)
    total = DecodeStats()
    start = time.perf_counter()
    results = (results_in_workers(spec, source, options, args.workers) if translator is None
               else results_in_one_process(translator, source, options, interactive))
    writer = LineWriter(args.output, in_place=source.is_output)  # just before the try that closes it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # load_checked has reported the model warnings once
            for block, (out, stats, notes) in results:
                for note in notes:
                    progress.clear()
                    warn(note)
                if not writer.owned:  # stdout: on a terminal, the lines would run on after the bar's text
                    progress.clear()
                writer.write(out)
                merge_stats(total, stats, [line.number - 1 for line in block])
                total.sentences += len(block)
                progress.update(len(block))
        writer.finish()
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
    read = ReadOnce()  # each directory read once: checked here, then shipped as the same bytes
    model_dir, drafter_dir = load_checked(spec.model, spec.drafter, spec.role, spec.compute_type, read)
    options = decode_options(args, default_strategy(model_dir, drafter_dir, spec.role, ALGOS))
    from pyfastdec import ray_cli  # raises CliError saying how to install the extra
    return ray_cli.run(args, spec, options, None if args.ray == RAY_LOCAL else args.ray, read.files(model_dir),
                       read.files(drafter_dir))


# ----------------------------------------------------------------------------- info, bench
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
        lines.append(default_model_line(role, path))
    if args.model_path and args.model and args.model_path != args.model:
        raise CliError(f"info: two models given, -m {args.model} and {args.model_path} (expected one)",
                       EXIT_BAD_INPUT)
    args.model = args.model or args.model_path
    if args.drafter and not args.model:
        raise CliError("info: --drafter needs -m MODEL (the verifier it would draft for)", EXIT_BAD_INPUT)
    if args.model:
        model_dir = ModelDir.load(args.model)
        lines += model_summary(model_dir)
        lines.append(strategy_line("translate", args.model, args.drafter, model_dir))
    else:
        for role in ("translate", "correct"):
            if packaged_model_path(DEFAULT_MODELS[role]).is_dir():
                lines.append(strategy_line(role, None, None))
    print_out("\n".join(lines))
    return 0


def run_bench(args) -> int:
    from pyfastdec.jobs.bench_command import run_bench as bench

    return bench(args, model_spec(args), lambda translator: decode_options(args, translator.strategy))


def main(argv: Optional[list[str]] = None) -> int:
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, raise_terminated) if on_main_thread else None
    try:
        return _main(argv)
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _main(argv: Optional[list[str]]) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["convert"]:  # forwarded whole: REMAINDER would not take a leading --help
        return run_convert(argparse.Namespace(convert_args=argv[1:]))
    if argv[:1] == ["train-heads"]:
        return run_train_heads(argparse.Namespace(train_args=argv[1:]))
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
        stdout_to_devnull()
        return EXIT_ERROR
    except OSError as err:  # what was not reported more precisely where it happened
        where = f"{err.filename}: " if err.filename else ""
        print(f"{PROG}: error: {where}{err.strerror or err}", file=sys.stderr, flush=True)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
