"""Marian's n-best list format, which tools parse field by field:

    I ||| TEXT ||| F0= MODEL_SCORE ||| SCORE

I: the input's line number from 0; TEXT: the hypothesis; F0= then the single model's
score, the summed log-prob of the hypothesis (EOS included); SCORE: the score hypotheses
are ranked by, the summed log-prob / length^length_penalty (marian-dev
src/translator/output_printer.h prints " F0= " per scorer and the real score after
" ||| "). Numbers are written as C++ streams write a float by default: 6 significant
digits (%g).
"""
from __future__ import annotations

SEPARATOR = " ||| "


def cpp_float(x: float) -> str:
    """A float as `std::ostream << float` writes it by default (precision 6, %g)."""
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return f"{x:.6g}"


def nbest_line(index: int, text: str, model_score: float, score: float) -> str:
    """One n-best line, without its newline."""
    return f"{index}{SEPARATOR}{text}{SEPARATOR}F0= {cpp_float(model_score)}{SEPARATOR}{cpp_float(score)}"
