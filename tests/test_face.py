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


# ------------------------------------------------------------------ index sweeps that mean what they say (12-16)

def _md_folder(tmp_path: Path) -> Path:
    """The handbook's Markdown files alone: auto chunks every one with hierarchy."""
    docs = tmp_path / "md_only"
    docs.mkdir()
    for f in (DATA / "handbook").glob("*.md"):
        shutil.copy(f, docs / f.name)
    return docs


def _runs(ws: Path) -> int:
    import duckdb

    if not (ws / "results.duckdb").exists():
        return 0
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM runs").fetchone()[0]
    finally:
        con.close()


def test_a_chunk_size_sweep_that_builds_one_index_is_refused_and_a_setting_not_read_is_said(tmp_path, capsys):
    docs, ws = _md_folder(tmp_path), tmp_path / "ws"
    base = ["run", "--dataset", str(docs), "--questions", str(DATA / "plain.jsonl"), "--embedder", "hash",
            "--workspace", str(ws), "--no-progress", "--no-report", "--strategies", "chunks"]
    # the default chunker on Markdown is hierarchy, which never reads chunk_tokens: two identical indexes before
    assert main(base + ["--set", "index.chunk_tokens=32,96"]) == 2
    err = capsys.readouterr().err
    assert "build one index on md_only: its documents are chunked by hierarchy (3 document(s))" in err, err
    assert "never reads chunk_tokens" in err and "index.leaf_max" in err and _runs(ws) == 0
    # a fixed setting the chunker never reads is marked, never labelled as if it applied
    assert main(base + ["--chunk-tokens", "64", "--run-id", "F"]) == 0
    err = capsys.readouterr().err
    assert "notice: chunk_tokens 64: not read by hierarchy, which chunks md_only's documents" in err
    # a single config that embeds says what it embeds first (item 15)
    assert re.search(r"^index: \d+ chunk\(s\) to embed with hash, about ", err, re.M), err
    # chunk_tokens over what e5 reads: refused before any work (was 85 s of embedding, then a notice)
    assert main(base + ["--embedder", "e5", "--set", "index.chunker=tokens", "--set", "index.chunk_tokens=100000"]) == 2
    err = capsys.readouterr().err
    assert "chunk_tokens 100,000 is over the 512 tokens e5 reads of a passage" in err and "ingested" not in err
    assert _runs(ws) == 1


def test_best_writes_a_complete_toml_whose_run_pairs_with_its_grid_point_and_a_baseline_file_knows_its_index(
        tmp_path, capsys):
    import tomllib

    shutil.copytree(DATA / "handbook", tmp_path / "handbook")
    ws = tmp_path / "ws"
    base = ["--dataset", str(tmp_path / "handbook"), "--questions", str(DATA / "plain.jsonl"), "--embedder", "hash",
            "--workspace", str(ws), "--no-progress", "--no-report"]
    assert main(["run", *base, "--strategies", "chunks", "--set", "chunks.top_k=2,4", "--set",
                 "index.chunk_tokens=48,96", "--run-id", "G"]) == 0
    capsys.readouterr()
    assert main(["best", "G", "--metric", "context_tokens", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    toml_text = out[out.index("# ragwb best"):]
    conf = tomllib.loads(toml_text)
    # every index setting, defaults included (item 14), and the grid point's index settings kept in its params
    assert conf["index"] == {"chunker": "auto", "chunk_tokens": conf["index"]["chunk_tokens"], "overlap": 16,
                             "leaf_min": 100, "leaf_max": 500, "parent_max": 2000, "embedder": "hash"}
    assert conf["run"]["index_in_points"] == ["chunk_tokens"]
    point = out.splitlines()[0].split(": ")[1]
    f = tmp_path / "best.toml"
    f.write_text(toml_text)
    assert main(["run", *base, "--config", str(f), "--run-id", "B"]) == 0
    capsys.readouterr()
    assert main(["show", "B", "--workspace", str(ws), "--metrics", "context_tokens"]) == 0
    assert point.split(" · ")[1] in capsys.readouterr().out  # the same label as the grid point
    assert main(["gate", "--baseline", "G", "--candidate", "B", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert "compared 1 of 1 candidate points" in out and "index differs" not in out
    # a baseline file carries its run's index: against a run on another index it says so (item 13)
    assert main(["run", *base, "--strategies", "chunks", "--run-id", "S", "--chunk-tokens", "64"]) == 0
    assert main(["gate", "--write-baseline", str(tmp_path / "s.json"), "--candidate", "S", "--workspace",
                 str(ws)]) == 0
    assert main(["run", *base, "--strategies", "chunks", "--run-id", "T", "--chunk-tokens", "32"]) == 0
    capsys.readouterr()
    main(["gate", "--baseline", str(tmp_path / "s.json"), "--candidate", "T", "--workspace", str(ws)])
    by_file = capsys.readouterr().out
    main(["gate", "--baseline", "S", "--candidate", "T", "--workspace", str(ws)])
    by_id = capsys.readouterr().out
    assert by_file.splitlines()[0] == by_id.splitlines()[0]
    assert by_id.splitlines()[0].startswith("index differs: chunk_tokens 64 vs 32")


def test_auto_and_tokens_that_build_the_same_chunks_are_not_an_index_difference(tmp_path, capsys):
    docs, ws = tmp_path / "notes", tmp_path / "ws"
    docs.mkdir()
    for name in ("leave.md", "remote.md"):  # as plain text: auto chunks them by tokens, as --chunker tokens does
        (docs / name.replace(".md", ".txt")).write_text((DATA / "handbook" / name).read_text())
    base = ["run", "--dataset", str(docs), "--questions", str(DATA / "plain.jsonl"), "--embedder", "hash",
            "--workspace", str(ws), "--no-progress", "--no-report", "--strategies", "chunks"]
    assert main(base + ["--run-id", "A"]) == 0
    assert main(base + ["--run-id", "T", "--chunker", "tokens"]) == 0
    assert main(base + ["--run-id", "H", "--chunker", "hierarchy"]) == 0
    capsys.readouterr()
    assert main(["gate", "--baseline", "A", "--candidate", "T", "--workspace", str(ws)]) == 0
    assert "index differs" not in capsys.readouterr().out
    main(["gate", "--baseline", "A", "--candidate", "H", "--workspace", str(ws)])
    assert capsys.readouterr().out.startswith("index differs: modes {'tokens': 2} vs {'hierarchy': 2}")
    # and a sweep of the two names is refused: one index
    assert main(base + ["--set", "index.chunker=auto,tokens"]) == 2
    assert "build one index on notes" in capsys.readouterr().err


def test_chart_labels_of_an_index_sweep_say_what_varies_and_notes_sit_above_the_plot():
    from evals.report.charts import quality_cost_figure

    rows = [{"strategy": "chunks", "point": f"index.chunk_tokens={t},top_k={k}", "metric": m, "n": 5, "n_ok": 5,
             "mean": v, "low": v, "high": v, "na_reason": "", "higher_is_better": m != "context_tokens"}
            for t in (48, 96, 192) for k in (2, 4) for m, v in (("f1", 1.0), ("context_tokens", t * k))]
    fig = quality_cost_figure(pd.DataFrame(rows), "f1")
    tr = next(t for t in fig.data if t.name == "chunks")
    # six points: the cheapest and the dearest say their budget in short (issue 83, item 14), the rest on hover
    assert "text" in tr.mode and "%{hovertext}" in tr.hovertemplate
    assert list(tr.text) == ["chunk=48 k=2", "", "", "", "", "chunk=192 k=4"]
    assert list(tr.hovertext)[0] == "index.chunk_tokens=48,top_k=2"
    assert "every point scores 1.000" in fig.layout.title.text  # the note under the title, above the plot area
    assert not any("every point" in (a.text or "") for a in fig.layout.annotations)
    few = quality_cost_figure(pd.DataFrame([r for r in rows if r["point"].endswith("top_k=2")]).assign(
        point=lambda d: d.point.str.replace("index.chunk_tokens=", "ct")), "f1")
    assert "text" in next(t for t in few.data if t.name == "chunks").mode  # three short labels stay on the plot


def test_a_prompt_two_points_pack_alike_is_said_as_one_call_not_as_cached(tmp_path):
    """Issue 63, item 6: on a fresh workspace the first cost line said "2 already in the response cache (free)" for
    two identical prompts within the plan. Both points pack every chunk of the handbook (top_k over its 15 chunks)."""
    from openai_server import start

    from evals.workbench import calls as interactive
    from rag.llm.client import LLMConfig

    srv, url = start()
    try:
        shutil.copytree(DATA / "handbook", tmp_path / "handbook")
        base = interactive.open_session(str(tmp_path / "handbook"), str(tmp_path / "ws"), "hash",
                                        questions=str(DATA / "plain.jsonl"))
        sess = interactive.llm_session(base, LLMConfig(url, "local-extractive"))
        plan = interactive.answer_plan(sess, [("chunks", {"top_k": 29}), ("chunks", {"top_k": 30})], 3)
        line = plan.line("local-extractive")
        assert (plan.new_calls, plan.cached_calls, plan.repeated_calls) == (3, 0, 3), line
        assert "0 already in the response cache (free), 3 repeat a prompt counted above (one call answers both)" in line
    finally:
        srv.shutdown()


def test_the_pages_judged_scores_follow_a_grade_though_the_grades_are_kept_between_applies(tmp_path):
    """The page keeps the grades it read while the store is unchanged (issue 63, item 7); a grade stored changes the
    store, and the next Apply's judged metrics show it."""
    from evals.workbench import calls as interactive
    from evals.store import ResultStore

    shutil.copytree(DATA / "handbook", tmp_path / "handbook")
    ws = tmp_path / "ws"
    db = str(ws / "results.duckdb")
    sess = interactive.open_session(str(tmp_path / "handbook"), str(ws), "hash", questions=str(DATA / "plain.jsonl"))
    ResultStore(db).close()  # an empty store
    pts = interactive.points_from_budgets(["chunks"], {})
    sc = interactive.evaluate_points(sess, pts, 3)
    assert interactive.session_judged_scores(db, sess, sc).empty
    qid = sc.question_id.iloc[0]
    passages = interactive.gradable_passages(sess, "chunks · defaults", qid)
    _, said = interactive.grade_click(db, sess, qid, passages, 0, 3, "ana")
    assert said.startswith("stored")
    judged = interactive.session_judged_scores(db, sess, sc)
    assert set(judged[judged.status == "ok"].question_id) == {qid}  # the others: "no judgments for this question"


def test_a_raced_runs_exact_count_is_said_as_at_most():
    from evals.run.call_plan import AnswerPlan
    from evals.run.plan import RunSpend

    exact = AnswerPlan(items=40, new_calls=40, prompt_tokens=9000)
    plain, raced = RunSpend("squad2", 40, model="m", exact=exact), RunSpend("squad2", 40, model="m", exact=exact,
                                                                             race=True)
    assert not plain.up_to and raced.up_to and plain.new_calls == raced.new_calls == 40
    assert raced.line().endswith("a race sends at most these: a point ruled out stops asking")
    assert "40 answer call(s) to m (9,000 prompt tokens" in plain.line() and "race" not in plain.line()

    escal = AnswerPlan(items=10, new_calls=10, notes=["escalate: up to two calls an item (counted as one here)"] * 2)
    e = RunSpend("squad2", 10, model="m", exact=escal)
    assert e.up_to and e.line().count("escalate: up to two calls an item") == 1
