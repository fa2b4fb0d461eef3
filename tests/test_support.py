"""The offline support scorer: ordering on hand-written cases, determinism, passage-order
invariance, the shipped model, `ragwb score-claims`, `ragwb agreement`, and the seeded trainer."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evals.cli import main
from evals.score.metrics import support_score
from evals.score.support import load_model, support_embedder, threshold

REPO = Path(__file__).resolve().parents[1]
PASSAGE = ("Acme Corp reported revenue of $4.1 billion in fiscal 2023, up 12% from the prior year. "
           "The company is headquartered in Denver and employs 5,200 people. "
           "Its chief executive, Maria Lopez, said margins improved in every segment.")
SUPPORTED = "Acme reported revenue of $4.1 billion in fiscal 2023."


@pytest.fixture(scope="module")
def e5():
    return support_embedder()


@pytest.mark.parametrize("use_e5", [False, True])
def test_hand_written_cases_rank_in_the_right_order(e5, use_e5):
    embed = e5 if use_e5 else None
    s = lambda st: support_score(st, [PASSAGE], "en", embed)  # noqa: E731
    kept = s(SUPPORTED)
    paraphrase = s("In fiscal 2023 Acme's revenue reached $4.1 billion.")
    number = s("Acme reported revenue of $7.9 billion in fiscal 2023.")
    negation = s("Acme did not report any revenue in fiscal 2023.")
    entity = s("The company is headquartered in Chicago and employs 5,200 people.")
    unrelated = s("The moon landing happened in 1969 under NASA's Apollo program.")
    assert kept > number and kept > negation and kept > entity and kept > unrelated
    assert kept >= threshold() > unrelated
    assert paraphrase > unrelated and paraphrase > negation
    assert s("The company employs 5,200 people.") > s("The company employs 9,100 people.")
    if use_e5:  # with e5 the paraphrase is kept and the close hallucinations are not all above it
        assert paraphrase >= threshold() and negation < threshold()


def test_scores_are_deterministic_and_ignore_passage_order(e5):
    other = "Denver is the capital of Colorado. Its airport is one of the busiest in the United States."
    a = support_score(SUPPORTED, [PASSAGE, other], "en", e5)
    b = support_score(SUPPORTED, [other, PASSAGE], "en", e5)
    assert a == b == support_score(SUPPORTED, [PASSAGE, other], "en", e5)  # bit for bit
    assert 0.0 <= a <= 1.0


def test_shipped_model_is_small_and_identified():
    m = load_model()
    assert (REPO / "evals" / "score" / "support_model.json").stat().st_size < 1_000_000
    assert m["id"].startswith("support-lr-") and len(m["coef"]) == len(m["features"])
    assert 0 < m["threshold"] < 1 and m["cv"]["expertqa_auroc"] > m["cv"]["expertqa_overlap_auroc"]


def test_score_claims_cli(tmp_path, capsys):
    f = tmp_path / "claims.jsonl"
    f.write_text("\n".join([json.dumps({"statement": SUPPORTED, "passages": [PASSAGE]}),
                            json.dumps({"claim": "Acme moved to Mars.", "evidence": PASSAGE}),
                            "{not json", json.dumps({"statement": "", "passages": []})]) + "\n")
    out = tmp_path / "scored.jsonl"
    assert main(["score-claims", str(f), "--out", str(out), "--no-e5"]) == 3  # two bad lines, named
    err = capsys.readouterr().err
    assert f"{f}:3" in err and f"{f}:4" in err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[0]["supported"] and not rows[1]["supported"] and rows[0]["model"] == load_model()["id"]


def test_agreement_runs_on_the_bundled_labels(capsys, tmp_path):
    # 40 claims (34 supported, 6 not: both classes, so an AUROC and its interval): the path, not the figure
    assert main(["agreement", "--limit", "40", "--resamples", "200", "--json", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert "offline support model" in out and "word overlap" in out and "AUROC" in out
    rows = json.loads((tmp_path / "a.json").read_text())
    assert rows[0]["n"] == 40 and rows[0]["auroc_95ci"][0] <= rows[0]["auroc"] <= rows[0]["auroc_95ci"][1]
    assert rows[0]["statements_per_s"] > 0


def test_trainer_is_seeded_and_reproducible_on_a_slice(tmp_path):
    outs = []
    for k in range(2):
        out = tmp_path / f"m{k}.json"
        r = subprocess.run([sys.executable, "scripts/train_support.py", "--slice", "--no-e5", "--out", str(out)],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-500:]
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    m = json.loads(outs[0])
    assert m["features"] == load_model()["features"] and m["seed"] == load_model()["seed"]


def test_a_long_passage_does_not_raise_the_support_of_an_unsupported_claim(e5):
    """Context features are taken on the statement's best-aligned region, never the whole block: the
    Normans document (~25,000 characters) supports 'The Normans were from Mars.' no more than one of its
    paragraphs does, and not above the threshold (issue 29: it scored 0.506 against the document)."""
    from rag.ingest.corpora import load_bundled
    from evals.score.support import support_score, threshold

    doc = next(d for d in load_bundled("squad2").documents if "Norman" in d.doc_id)
    claim = "The Normans were from Mars."
    whole = support_score(claim, [doc.text], "en", e5)
    para = support_score(claim, [doc.pages[0].text], "en", e5)
    assert whole <= para + 1e-9 and whole < threshold()
    supported = "The Normans gave their name to Normandy, a region in France."
    assert support_score(supported, [doc.text], "en", e5) > threshold()
