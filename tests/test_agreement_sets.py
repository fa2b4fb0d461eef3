"""Each default judge measured on labels of what it judges (issue 71 item 4): faithfulness on ExpertQA's human support
labels, context sufficiency on SQuAD 2.0's gold evidence (its unanswerable half included), answer relevance on
constructed pairs; each line names its label source with chance beside it, and an alignment report (kappa,
confusion, calibration, worst misses) is printed."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from evals.cli import main
from evals.score.agreement_sets import cohen_kappa, relevance_items, sufficiency_items

sys.path.insert(0, str(Path(__file__).parent))
from openai_server import start  # noqa: E402


def test_the_built_label_sets_hold_what_they_say():
    suff = sufficiency_items(60)
    assert len(suff) == 60 and {i["kind"] for i in suff} == {"own", "other", "unanswerable"}
    assert sum(i["label"] for i in suff) == 20
    for i in suff:
        assert (i["label"] == 1) == (i["kind"] == "own") and len(i["contexts"]) == 1 and i["contexts"][0]
    rel = relevance_items(40)
    assert len(rel) == 40 and sum(i["label"] for i in rel) == 20
    assert {i["kind"] for i in rel} == {"gold", "partial", "another question's"}
    assert all(i["label"] == (i["kind"] != "another question's") for i in rel)
    assert suff == sufficiency_items(60)  # seeded: the same items every time (the response cache holds)


@pytest.mark.parametrize("seed", range(5))
def test_kappa_matches_scikit_learn(seed):
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(seed)
    y, p = rng.integers(0, 2, 50), rng.integers(0, 2, 50)
    assert cohen_kappa(y, p) == pytest.approx(cohen_kappa_score(y, p), abs=1e-12)
    assert cohen_kappa(y, y) == pytest.approx(1.0)


def test_one_agreement_gives_each_default_judge_a_line_on_its_own_labels(tmp_path, capsys):
    srv, url = start()
    try:
        ws = tmp_path / "ws"
        rc = main(["agreement", "--judge-base-url", url, "--judge-model", "local-extractive", "--limit", "30",
                   "--resamples", "200", "--yes", "--workspace", str(ws)])
        out = capsys.readouterr().out
        assert rc == 0, out
        assert "up to 90 call(s)" in out  # 30 claims + 30 + 30 built items, said before anything is sent
        for judge in ("llm_context_sufficiency", "llm_answer_relevance"):
            block = out[out.index(f"{judge} on "):]
            assert "(chance 0.50); kappa" in block and "confusion: label 1, judged 1" in block
            assert "calibration (judged value: share labelled 1)" in block
        docs = tmp_path / "docs"
        docs.mkdir()
        (docs / "a.md").write_text("# Herons\n\nHerons nest in tall reeds beside the lake. They eat fish.\n")
        q = tmp_path / "q.jsonl"
        q.write_text(json.dumps({"question": "Where do herons nest?"}) + "\n")
        assert main(["run", "--dataset", str(docs), "--questions", str(q), "--embedder", "hash", "--workspace",
                     str(ws), "--llm-base-url", url, "--llm-model", "local-extractive", "--strategies", "chunks",
                     "--yes", "--no-progress", "--no-report", "--run-id", "R"]) == 0
        capsys.readouterr()
        assert main(["show", "R", "--workspace", str(ws)]) == 0
        shown = [x for x in capsys.readouterr().out.splitlines() if x.startswith("judge: ")]
        lines = {name: next((x for x in shown if x.startswith(f"judge: {name} judged by")), "")
                 for name in ("llm_faithfulness", "llm_answer_relevance", "llm_context_sufficiency")}
        assert "labelled claims (chance 0.50; ExpertQA, human support labels" in lines["llm_faithfulness"], shown
        assert "(chance 0.50; constructed pairs from SQuAD 2.0" in lines["llm_answer_relevance"], shown
        assert "(chance 0.50; SQuAD 2.0 gold evidence" in lines["llm_context_sufficiency"], shown
        # the alignment report as a table: in the HTML report and in the page (the Workbench's session)
        assert main(["report", "R", "--workspace", str(ws)]) == 0
        report = Path(capsys.readouterr().out.strip().splitlines()[-1]).read_text()
        assert "How far to trust the judges" in report and "confusion (label/judged" in report
        from evals.workbench.page import judge_alignment_table
        from evals.workbench import Workbench

        wb = Workbench(str(docs), questions=str(q), workspace=str(ws), embedder="hash", llm=(url, "local-extractive"),
                       progress=False)
        table = judge_alignment_table(wb.session, str(ws))
        assert len(table) == 3 and set(table["chance"]) == {"0.50"} and table["kappa"].str.len().gt(0).sum() == 2
    finally:
        srv.shutdown()
