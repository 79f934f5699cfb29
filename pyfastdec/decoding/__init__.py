"""Decoding strategies, written only against the Backend protocol (backends/base.py).

Every strategy takes a backend (plus a drafter for GAD) and a batch of source id lists
(each ending in EOS) and returns (outputs in input order, DecodeStats).
- greedy(backend, src, max_len)                        -> token lists   (the reference)
- beam_search(backend, src, beam_size, nbest, alpha, max_len, rule) -> n-best Hypothesis lists
- iad(backend, src, max_len)                           -> token lists   (= greedy)
- gad(verifier, drafter, src, k, max_len)              -> token lists   (= greedy)
- gad_plus(verifier, drafter, src, beta, tau, k, max_len) -> token lists (lossy GAD++)
- blockwise(backend, src, max_len, policy)             -> token lists   (= greedy; needs proposal heads)
"""
from .beam import beam_search
from .blockwise import blockwise
from .gad import gad, gad_plus
from .greedy import greedy
from .iad import iad
from .limits import default_max_len
from .result import DecodeStats, Hypothesis

__all__ = ["DecodeStats", "Hypothesis", "beam_search", "blockwise", "default_max_len", "gad", "gad_plus", "greedy", "iad"]
