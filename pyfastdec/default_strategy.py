"""Which decoding strategy runs when none is asked for, and why.

The default is the fastest lossless strategy the loaded model directories support, so a
user who asks for nothing gets greedy's output, only faster:
- a correction model (`Corrector`, `fastdec correct`): IAD, whose draft is the source;
- a model whose config.json has proposal heads: blockwise (the heads draft on the
  verifier's own pass; no second model);
- a model with a GAD drafter next to it: GAD;
- anything else: greedy.
Each drafting strategy carries a cost policy that may verify nothing on an iteration
(a plain greedy step), so the default is never meant to run slower than greedy
(decoding/policies/draft_length.py, decoding/policies/source_draft_length.py). The reason is a sentence
for `fastdec info` and error messages.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pyfastdec.model_dir import ModelDir


@dataclass(frozen=True)
class StrategyChoice:
    algo: str
    reason: str


def proposal_heads(model_dir: ModelDir) -> int:
    """How many proposal heads the model's config.json declares (0: none)."""
    heads = model_dir.config.heads
    return 0 if heads is None else heads.count


def default_strategy(model_dir: ModelDir, drafter_dir: Optional[ModelDir], role: str,
                     available: tuple[str, ...]) -> StrategyChoice:
    """The lossless strategy for `role` ("translate" or "correct") given the loaded
    directories; `available`: the strategies this build offers."""
    if role == "correct":
        return StrategyChoice("iad", "a correction model: the source is the draft (input-guided aggressive "
                                     "decoding), verified as far as measured costs favour")
    heads = proposal_heads(model_dir)
    if heads and "blockwise" in available:
        return StrategyChoice("blockwise", f"{model_dir.path} has {heads} proposal heads: they draft on the "
                                           f"verifier's own pass (one decoder call per iteration)")
    if drafter_dir is not None and drafter_dir.config.arch == "transformer" and "bild" in available:
        return StrategyChoice("bild", f"a little model ({drafter_dir.path}) drafts over the model's encoder while "
                                      f"confident (BiLD, lossless); a cost policy falls back to plain steps")
    if drafter_dir is not None:
        return StrategyChoice("gad", f"a drafter ({drafter_dir.path}) drafts blocks for the verifier; a cost "
                                     f"policy verifies as many drafted tokens as pay, down to none")
    return StrategyChoice("greedy", f"{model_dir.path} has no proposal heads and no drafter was given")
