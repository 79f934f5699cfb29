"""What the API computes over output hypotheses (pyfastdec/hypotheses.py): an input's
n-best list joined from its sentences', the score outputs are ranked by, beam search's
scores turned back into sums, and statistics summed over batches."""
from __future__ import annotations

import math

from pyfastdec.decoding import DecodeStats, Hypothesis
from pyfastdec.hypotheses import Hyp, from_beam, join_units, merge_stats, score


def test_units_join_kth_with_kth_and_scores_add_up():
    first = [Hyp([[5, 6]], -1.0, 3), Hyp([[5]], -2.0, 2)]
    second = [Hyp([[7]], -0.5, 2)]  # one hypothesis: the joined list is as long as the shortest
    joined = join_units([first, second])
    assert joined == [Hyp([[5, 6], [7]], -1.5, 5)]
    assert score(joined[0], 1.0) == -1.5 / 5 and score(joined[0], 0.0) == -1.5
    assert join_units([]) == [Hyp([[]])] and join_units([first]) is first
    assert score(Hyp([[]]), 1.0) == 0.0  # nothing scored


def test_beam_scores_come_back_as_sums():
    finished = Hypothesis(tokens=[8, 9], score=-0.9 / 3 ** 0.6, finished=True)
    cut = Hypothesis(tokens=[8, 8, 8], score=-2.0 / 4 ** 0.6, finished=False)
    rows = from_beam([[finished, cut], []], [[1], [2, 3]], [-0.25, 0.0], 0.6, "pyfastdec")
    assert [h.chunks for h in rows[0]] == [[[1, 8, 9]], [[1, 8, 8, 8]]]
    assert math.isclose(rows[0][0].logprob, -0.9 - 0.25) and rows[0][0].positions == 1 + 3
    assert math.isclose(rows[0][1].logprob, -2.0 - 0.25) and rows[0][1].positions == 1 + 4  # EOS as if it had one
    assert rows[1] == [Hyp([[2, 3]])]  # no hypothesis: the prefix alone
    hf = from_beam([[cut]], [[]], [0.0], 0.6, "hf")[0][0]  # HF counts a cut hypothesis's tokens only
    assert hf.positions == 3 and math.isclose(hf.logprob, -2.0 / 4 ** 0.6 * 3 ** 0.6)


def test_batch_statistics_add_up_and_rows_map_to_inputs():
    total = DecodeStats(sentences=4)
    merge_stats(total, DecodeStats(sentences=2, iterations=3, drafted=5, hit_max_len=[1]), inputs=[3, 0])
    merge_stats(total, DecodeStats(sentences=2, iterations=2, drafted=1, hit_max_len=[0, 1]), inputs=[2, 1])
    assert (total.sentences, total.iterations, total.drafted) == (4, 5, 6)
    assert total.hit_max_len == [0, 1, 2]
