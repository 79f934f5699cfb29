"""export.general_report: its figures are those of what users get (Translator on the text),
its length check holds every output against its sentence's limit from outside the
decoder, and each issue 32 target is judged met or missed at its threshold."""
import pytest

from export import general_report
from export.data import load_pairs
from pyfastdec.api import Translator, packaged_model_path

MODEL = packaged_model_path("en-de")


@pytest.fixture(scope="module")
def translator():
    if not MODEL.is_dir():
        pytest.skip(f"{MODEL}: not installed")
    return Translator(MODEL, threads=1)


def test_figures_are_those_of_the_text_translation(translator):
    # FLORES sentences: long news ones, on which the caption model loops to its limit
    pairs = load_pairs("flores200_devtest", "en", "de", "general-en-de")[:24]
    pairs.append(("A man rides a bike. Two dogs play in the snow.", "Ein Mann fährt Fahrrad. Zwei Hunde spielen."))
    # control characters: Translator cleans text before it splits it, and so must the report
    pairs.append(("A dog\x07runs\x0bon the\x1bbeach.", "Ein Hund rennt am Strand."))
    got = general_report.score_set(translator, pairs)
    with pytest.warns(Warning):  # one source is cut into two parts
        outputs, stats = translator.translate([s for s, _ in pairs], return_stats=True)
    assert got["outputs"] == outputs
    assert (got["looping"], got["at_limit"]) == (len(stats.looping), len(stats.hit_max_len))
    assert got["at_limit"] > 0 and got["over_limit"] == 0
    import sacrebleu

    assert got["bleu"] == pytest.approx(sacrebleu.corpus_bleu(outputs, [[t for _, t in pairs]]).score)


def test_outputs_over_a_tighter_limit_are_counted(translator, monkeypatch):
    pairs = load_pairs("flores200_devtest", "en", "de", "general-en-de")[:24]
    base = general_report.score_set(translator, pairs)
    # the report holding outputs to a limit below the decoder's: those cut at the decoder's are over it
    monkeypatch.setattr(general_report, "DEFAULT_MAX_LENGTH_FACTOR", 2.0)
    assert general_report.score_set(translator, pairs)["over_limit"] >= base["at_limit"] > 0


def scores(news_bleu, news_chrf, flores_bleu, flickr_bleu, news_loops=0, flickr_loops=0, over=0):
    row = dict(bleu=0.0, chrf=0.0, looping=0, over_limit=0)
    return {"newstest2019": dict(row, bleu=news_bleu, chrf=news_chrf, looping=news_loops, over_limit=over),
            "flores200_devtest": dict(row, bleu=flores_bleu),
            "test_2016_flickr": dict(row, bleu=flickr_bleu, looping=flickr_loops)}


def test_targets_are_judged_at_the_issue_thresholds():
    met = [m for _, _, m in general_report.targets(scores(15.0, 45.0, 12.0, 30.0), caption_bleu=33.0)]
    assert met == [True, True, True, True, True, True, True]
    missed = general_report.targets(scores(14.99, 44.9, 11.9, 29.9, news_loops=1, flickr_loops=2, over=1), 33.0)
    assert [m for _, _, m in missed] == [False] * 7
    assert missed[3][2] is False and "33.00 - 3" in missed[3][0]
    unjudged = general_report.targets(scores(20, 50, 20, 10), caption_bleu=None)
    assert unjudged[3][2] is None  # no caption model given: the Multi30k target is not judged
