"""DecodeStats: derived means, the time split, and the default length limit."""
from __future__ import annotations

import time

import pytest

from pyfastdec.decoding import DecodeStats, Hypothesis, default_max_len
from pyfastdec.decoding.limits import row_limits, sentence_limit


def test_means_divide_by_per_sentence_iterations():
    stats = DecodeStats(iterations=3, row_steps=10, drafted=40, accepted=15, generated=25)
    assert stats.mean_accepted == 1.5 and stats.mean_tokens == 2.5
    assert DecodeStats().mean_accepted == DecodeStats().mean_tokens == 0.0


def test_time_split_adds_up():
    stats = DecodeStats()
    with stats.total():
        with stats.timing("verifier"):
            time.sleep(0.02)
        with stats.timing("encoder"):
            time.sleep(0.01)
        time.sleep(0.01)
    assert stats.verifier_s >= 0.02 and stats.encoder_s >= 0.01 and stats.drafter_s == 0.0
    assert stats.python_s >= 0.01
    assert stats.python_s + stats.verifier_s + stats.encoder_s == pytest.approx(stats.total_s)
    with pytest.raises(ValueError, match="unknown component"), stats.timing("decoder"):
        pass


def test_limits_per_row_and_hypothesis_defaults():
    assert default_max_len(1) == 12  # floor(2.5 * 1) + 10
    assert row_limits([[3], [5, 6, 3]], None) == [12, 17]  # floor(2.5 * 3) + 10
    assert default_max_len(4, 1.5) == 16 and default_max_len(3, 0.1) == 10
    assert sentence_limit(3, None, 2.5) == 17 and sentence_limit(3, 20, None) == 20
    assert sentence_limit(3, 16, 2.5) == 16 and sentence_limit(3, 18, 2.5) == 17  # the smaller wins
    assert row_limits([[3], [5, 6, 3]], 4) == [4, 4]
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        row_limits([[3]], 0)
    assert Hypothesis([5]) == Hypothesis(tokens=[5], score=None, finished=True)
