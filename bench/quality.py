"""Translation quality figures shared by the benchmarks: sacreBLEU and chrF (13a
tokenizer, cased, detokenized output against the raw references, as models/README.md
reports), and how many outputs are token-identical to a reference decoding."""
from __future__ import annotations

from collections.abc import Sequence


def bleu_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    import sacrebleu

    refs = [list(references)]
    return {"bleu": sacrebleu.corpus_bleu(list(hypotheses), refs).score,
            "chrf": sacrebleu.corpus_chrf(list(hypotheses), refs).score}


def identical_share(outputs: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> float:
    """Share of rows whose token ids equal the reference's (the lists must align)."""
    if len(outputs) != len(reference):
        raise ValueError(f"identical_share: {len(outputs)} outputs against {len(reference)} reference rows")
    if not outputs:
        return float("nan")
    return sum(list(a) == list(b) for a, b in zip(outputs, reference)) / len(outputs)
