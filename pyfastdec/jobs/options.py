"""What a job decodes with: the model directories (ModelSpec, picklable, so a worker
process or a Ray actor builds its own Translator) and Translator.translate's options."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

from pyfastdec.api import Corrector, Translator
from pyfastdec.decoding import strategies
from pyfastdec.jobs.errors import EXIT_BAD_INPUT, CliError
from pyfastdec.model_dir import ModelDir


@dataclass(frozen=True)
class ModelSpec:
    """What a (worker) process needs to build its Translator; picklable."""

    role: str  # "translate" or "correct"
    model: Optional[str]
    drafter: Optional[str]
    threads: Optional[int]
    compute_type: str
    shortlist: bool
    device: str = "cpu"  # "cuda": the GPU model (backends/devices.py)
    inter_threads: int = 1  # batches decoded at once by copies of the engines (lanes.py)

    def build(self, loaded: Optional[tuple[ModelDir, Optional[ModelDir]]] = None) -> Translator:
        """loaded: the directories of this spec as load_checked gave them (model, drafter),
        so that a process that checked them does not read and hash them again."""
        model, drafter = loaded if loaded is not None else (self.model, self.drafter)
        if self.role == "correct":
            return Corrector(model, self.threads, self.compute_type, self.shortlist, device=self.device,
                             inter_threads=self.inter_threads)
        return Translator(model, drafter, self.threads, self.compute_type, self.shortlist, device=self.device,
                          inter_threads=self.inter_threads)


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
    max_length_factor: Optional[float] = None  # None: the API's default (decoding/limits.py)

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
        if self.max_length_factor is not None:
            kw["max_length_factor"] = self.max_length_factor
        return kw

    def describe(self) -> str:
        return strategies.describe(self)


def checked_translator(spec: ModelSpec, loaded: Optional[tuple[ModelDir, Optional[ModelDir]]], options: DecodeOptions
                       ) -> Translator:
    """spec's translator (loaded: its directories, already checked and their warnings
    reported) with `options` checked as translate checks them: a combination it refuses
    (--beta without gad++, bild without a little model) is a usage error (exit 2), raised
    before the job decodes or writes anything."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        translator = spec.build(loaded)
    try:
        translator._options(**{k: v for k, v in options.kwargs().items() if k != "return_stats"})
    except (ValueError, TypeError) as err:
        raise CliError(str(err), EXIT_BAD_INPUT) from None
    return translator
