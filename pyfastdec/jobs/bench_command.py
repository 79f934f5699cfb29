"""`fastdec bench`: batch-1 latency and batched throughput of a model on the lines of a
file, with the options `fastdec translate` would use."""
from __future__ import annotations

import time
import warnings
from typing import Callable

import numpy as np

from pyfastdec.api import LongInputWarning, Translator
from pyfastdec.jobs.decode import long_input_note
from pyfastdec.jobs.errors import PROG, CliError, warn
from pyfastdec.jobs.lines import InputLines, print_out
from pyfastdec.jobs.options import DecodeOptions, ModelSpec


def run_bench(args, spec: ModelSpec, options_for: Callable[[Translator], DecodeOptions]) -> int:
    """Latency at batch 1 and throughput at --batch-size on the lines of -i, printed to
    stdout. options_for: the command line's decode options for the built translator (its
    default strategy is the model's)."""
    source = InputLines(args.input)
    lines = [line for line in source.all() if line.text.strip()]
    texts = [line.text for line in lines]
    if not texts:
        raise CliError(f"{args.input}: no non-empty lines to decode")
    translator = spec.build()
    options = options_for(translator)
    kwargs = dict(options.kwargs(), return_scores=False, n_best=1)
    print_out(f"{PROG} bench: {translator.model_dir.path}"
              + (f" + drafter {translator.drafter_dir.path}" if translator.drafter_dir else "")
              + f"; {options.describe()}; threads {translator.threads}"
              + (f" x inter_threads {translator.inter_threads}" if translator.inter_threads > 1 else "")
              + f"; compute type {spec.compute_type}; "
              f"shortlist {'on' if spec.shortlist else 'off'}; {len(texts)} sentences from {args.input}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LongInputWarning)  # the throughput run names their lines below
        translator.translate(texts[:1], **dict(kwargs, batch_size=1))  # warm-up: page in weights, grow buffers
        latency = []
        for text in texts[:args.latency_sentences]:
            start = time.perf_counter()
            translator.translate([text], **dict(kwargs, batch_size=1))
            latency.append((time.perf_counter() - start) * 1000)
    p50, p90 = np.percentile(latency, [50, 90])
    print_out(f"latency, batch 1 ({len(latency)} sentences): p50 {p50:.2f} ms, p90 {p90:.2f} ms, "
              f"mean {np.mean(latency):.2f} ms")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LongInputWarning)
        start = time.perf_counter()
        _, stats = translator.translate(texts, **kwargs)
        seconds = max(time.perf_counter() - start, 1e-9)
    for w in caught:  # by file line: the API's input index skips the empty lines
        warn(long_input_note(w.message, lines) if isinstance(w.message, LongInputWarning) else str(w.message))
    print_out(f"throughput, batch {options.batch_size} ({len(texts)} sentences): {len(texts) / seconds:.1f} "
              f"sentences/s, {stats.generated / seconds:.1f} tokens/s, mean accepted tokens per iteration "
              f"{stats.mean_accepted:.2f}")
    return 0
