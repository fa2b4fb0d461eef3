"""Issue 63: the face reads right. The report on plain questions (one line for the not_applicable scores, one for
the metrics no question pairs, a word on few questions), the paired table's notes, and the CLI's cost line on a
run whose every prompt is cached (tests/test_llm_path.py)."""
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from evals.analyze.explore import paired_notes, paired_points
from evals.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "as_written"


def _text(html_path: Path) -> str:
    s = html_path.read_text()
    s = re.sub(r"<script.*?</script>|<style.*?</style>", "", s, flags=re.S)
    s = re.sub(r"</(tr|p|h\d|li|div)>", "\n", s)
    return re.sub(r"[ \t]+", " ", re.sub(r"<[^>]+>", " ", s))


def test_the_report_on_plain_questions_says_each_absence_in_one_line(tmp_path):
    shutil.copytree(DATA / "handbook", tmp_path / "handbook")
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", str(tmp_path / "handbook"), "--questions", str(DATA / "plain.jsonl"),
                 "--embedder", "hash", "--workspace", str(ws), "--no-progress", "--run-id", "P"]) == 0
    text = _text(ws / "reports" / "report-P.html")
    block = text[text.index("Scores that are not ok"):text.index("Quality per 1,000")]
    # no row per strategy x metric of not_applicable scores (there were 30): one line, each metric with its count
    assert "not_applicable" not in block.split("not_applicable (", 1)[0], block
    line = next(x for x in block.splitlines() if x.strip().startswith("not_applicable ("))
    counts = dict((m, int(n.replace(",", ""))) for m, n in re.findall(r"([a-z_@0-9]+) ([\d,]+)(?:,|$)", line.split("): ", 1)[1]))
    assert counts["f1"] == counts["em"] == 40 and "No score failed." in block, block
    # the paired table: no n=0 rows; the unpaired metric in one line; a word on 8 questions
    paired = text[text.index("Each point against"):text.index("Question x point matrix")]
    assert "no paired questions (no question scored ok on both points): f1" in paired
    assert not re.search(r"\bf1 0\b", paired) and "few questions: 4 row(s) rest on n = 8 (under 10)" in paired


def test_failed_scores_are_one_row_per_metric_and_status_with_their_strategies(tmp_path):
    """A failing metric still gets its row (metric, status, n, the strategies it hit); ok and not_applicable never."""
    from evals.store import ResultStore

    shutil.copytree(DATA / "handbook", tmp_path / "handbook")
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", str(tmp_path / "handbook"), "--questions", str(DATA / "plain.jsonl"),
                 "--embedder", "hash", "--workspace", str(ws), "--no-progress", "--run-id", "E", "--no-report"]) == 0
    st = ResultStore(ws / "results.duckdb")
    st.con.execute("UPDATE scores SET status = 'error', detail = 'boom' WHERE run_id = 'E' AND metric = "
                   "'question_answer_similarity' AND strategy IN ('chunks', 'hybrid') AND status = 'ok'")
    n = st.con.execute("SELECT count(*) FROM scores WHERE run_id = 'E' AND status = 'error'").fetchone()[0]
    st.close()
    assert n > 0
    assert main(["report", "E", "--workspace", str(ws)]) == 0
    block = _text(ws / "reports" / "report-E.html")
    block = block[block.index("Scores that are not ok"):block.index("Quality per 1,000")]
    assert f"question_answer_similarity error {n} chunks, hybrid" in block, block


def test_paired_notes_name_the_unpaired_metrics_and_warn_on_few_questions():
    rng = np.random.default_rng(0)
    rows = []
    for i in range(4):
        for pt in ("a", "b"):
            rows.append({"question_id": f"q{i}", "strategy": pt, "point_label": "x=1", "metric": "context_tokens",
                         "value": float(rng.integers(10, 50)), "status": "ok", "repeat": 0, "detail": ""})
            rows.append({"question_id": f"q{i}", "strategy": pt, "point_label": "x=1", "metric": "f1",
                         "value": np.nan, "status": "not_applicable", "repeat": 0, "detail": "no answers"})
    sc = pd.DataFrame(rows)
    t = paired_points(sc, "a · x=1", "b · x=1")
    assert list(t.metric) == ["context_tokens"] and t.attrs["unpaired"] == ["f1"]
    notes = paired_notes(t)
    assert notes[0] == "no paired questions (no question scored ok on both points): f1"
    assert notes[1].startswith("few questions: 1 row(s) rest on n = 4 (under 10)")
    # 12 questions: no warning; every metric paired: no unpaired line
    big = pd.concat([sc.assign(question_id=sc.question_id + f"-{k}") for k in range(3)], ignore_index=True)
    big = big[big.metric == "context_tokens"]
    assert paired_notes(paired_points(big, "a · x=1", "b · x=1")) == []
