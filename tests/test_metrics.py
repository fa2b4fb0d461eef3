import pytest

from evals.score.metrics import (METRICS, ScoringInput, f1_score, exact_match, normalize_answer, ranking_metrics, score_all)
from evals.stats import bootstrap_ci, paired_bootstrap
from rag.models import Evidence, Question
from rag.answer.prompts import FALLBACK
from rag.strategies import Block


def blk(n, text, doc="d", page="d#p0", span=(0, 100)):
    return Block(n, text, "chunks", (doc,), (page,), (f"{page}/c0",), ((doc, *span),), len(text.split()), 0.5)


Q = Question("q", "Where is the tower?", ["Paris", "in Paris"], True, "extractive", "en",
             [Evidence("d", "d#p0", 10, 15, "Paris")])
U = Question("u", "Where is the moon base?", [], False, "unanswerable", "en", [Evidence("d", "d#p0")])


def test_squad_normalisation_and_known_results():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert exact_match("the Paris.", "Paris") == 1.0
    assert f1_score("in the city of Paris", "Paris") == pytest.approx(2 * (1 / 4) * 1 / (1 / 4 + 1))
    assert f1_score("", "") == 1.0 and f1_score("x", "") == 0.0


def test_answer_abstention_on_answerable_and_unanswerable():
    blocks = [blk(1, "The tower is in Paris.")]
    s = score_all(ScoringInput(Q, blocks, "The tower is in Paris. [1]"))
    assert s["f1"].value > 0 and s["false_abstention"].value == 0 and "missed_abstention" not in s
    s = score_all(ScoringInput(Q, blocks, FALLBACK))  # refusal on an answerable question
    assert s["em"].value == 0 and s["false_abstention"].value == 1 and s["abstention_accuracy"].value == 0
    # nothing claimed: the answer-side metrics are stored n/a with why, never a missing row (issue 52)
    for m in ("citation_precision", "faithfulness", "citation_support", "statement_coverage"):
        assert s[m].value is None and s[m].status == "not_applicable" and "abstained" in s[m].detail
    s = score_all(ScoringInput(U, blocks, FALLBACK))  # fallback on an unanswerable one is right
    assert s["em"].value == 1 and s["f1"].value == 1 and s["missed_abstention"].value == 0
    s = score_all(ScoringInput(U, blocks, "It is on the moon. [1]"))
    assert s["em"].value == 0 and s["missed_abstention"].value == 1


def test_citations_out_of_range_repeated_and_order():
    good, bad = blk(1, "The tower is in Paris.", span=(0, 40)), blk(2, "Unrelated text.", page="d#p1", span=(50, 60))
    s = score_all(ScoringInput(Q, [good, bad], "It is in Paris. [1][1][3]"))
    assert s["citation_validity"].value == pytest.approx(2 / 3)
    assert s["citation_precision"].value == pytest.approx(1 / 2)  # distinct {1, 3}; 3 is invalid
    assert s["citation_recall"].value == 1.0 and s["statement_coverage"].value == 1.0
    s2 = score_all(ScoringInput(Q, [bad, good], "It is in Paris. [1]"))  # order matters: [1] is now the wrong block
    assert s2["citation_precision"].value == 0.0 and s2["citation_recall"].value == 0.0
    s3 = score_all(ScoringInput(Q, [good], "It is in Paris. No idea otherwise."))
    assert s3["statement_coverage"].value == 0.0 and s3["citation_validity"].value == 1.0


def test_empty_context_and_failed_answer_statuses():
    s = score_all(ScoringInput(Q, [], FALLBACK))
    assert s["evidence_recall"].value == 0 and s["context_precision"].value == 0
    assert s["token_estimate_error"].status == "undetermined" and s["token_estimate_error"].value is None
    s = score_all(ScoringInput(Q, [blk(1, "x")], "", answer_status="rate_limited"))
    assert s["f1"].status == "rate_limited" and s["f1"].value is None and s["faithfulness"].status == "rate_limited"


def test_faithfulness_offline():
    b = [blk(1, "The tower is in Paris and was built in 1889.")]
    assert score_all(ScoringInput(Q, b, "The tower was built in 1889. [1]"))["faithfulness"].value == 1.0
    assert score_all(ScoringInput(Q, b, "The tower was built in 1889. [1] It is painted green by aliens."))[
        "faithfulness"].value == 0.5


def test_ranking_metrics_hand_computed():
    m = ranking_metrics(["x", "a", "y", "b"], {"a", "b"}, 10)
    assert m["mrr"] == 0.5 and m["recall"] == 1.0
    dcg = 1 / 2 ** 0 * 0 + 1 / __import__("math").log2(3) + 1 / __import__("math").log2(5)
    idcg = 1 + 1 / __import__("math").log2(3)
    assert m["ndcg"] == pytest.approx(dcg / idcg)
    assert ranking_metrics(["x"], {"a"}, 10) == {"recall": 0.0, "mrr": 0.0, "ndcg": 0.0}
    assert ranking_metrics(["x", "a"], {"a"}, 1)["recall"] == 0.0  # cut at k


def test_bootstrap_seeded_and_registry():
    x = [0, 1, 1, 0, 1, 1, 1, 0, 1, 1]
    assert bootstrap_ci(x, seed=1) == bootstrap_ci(x, seed=1)
    m, lo, hi = bootstrap_ci(x)
    assert lo < m < hi
    pb = paired_bootstrap([1, 1, 1, 1], [0, 0, 0, 0])
    assert pb["delta"] == -1 and pb["high"] == -1
    assert METRICS["f1"].higher_is_better and not METRICS["context_tokens"].higher_is_better


def test_bootstrap_counts_equal_the_resampled_means():
    """The resample means come from draw counts (one matrix product): the same resamples as drawing
    values (``_resampled_means``), equal to 1e-12, and exactly equal on 0/1 values; a size past the
    one-chunk limit still draws in chunks."""
    import numpy as np

    from evals.stats import bootstrap_means, _resampled_means

    for size in (2, 37, 1000):
        x = np.random.default_rng(size).random(size)
        want = _resampled_means(x, 500, np.random.default_rng(9))
        assert np.allclose(bootstrap_means(x, 500, 9), want, rtol=0, atol=1e-12)
        b = (x > 0.5).astype(float)
        assert np.array_equal(bootstrap_means(b, 500, 9), _resampled_means(b, 500, np.random.default_rng(9)))
    big = np.random.default_rng(1).random(5000)
    assert np.array_equal(bootstrap_means(big, 500, 9), _resampled_means(big, 500, np.random.default_rng(9)))


def test_language_aware_terms():
    from rag.textproc import analyze, words
    assert words("ΠΆΝΘΕΡΣ Πάνθερς") == ["πανθερσ", "πανθερσ"]  # casefold + final sigma + tonos
    assert words("ЗАЩИТА защита") == ["защита", "защита"]
    assert words("中文字") == ["中文", "文字"] and words("한국어") == ["한국", "국어"]
    assert analyze("running runs", "en") == ["run", "run"]
