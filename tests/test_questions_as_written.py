"""Questions as people write them (issue 43, item 2): `id` optional, a missing `answers` is unknown (not
unanswerable), evidence metrics still scored, and `ragwb show` leaves out columns n/a on every row."""
import json

from evals.cli import main
from rag.ingest.corpora import derived_question_id, load_folder


def _folder(tmp_path, lines):
    docs = tmp_path / "notes"
    docs.mkdir()
    (docs / "a.md").write_text("# Install\n\nInstall the beta package first, then run the setup wizard.\n")
    (docs / "b.md").write_text("# Billing\n\nInvoices are sent on the first day of every month by email.\n")
    (docs / "c.md").write_text("# Support\n\nSupport answers within two working days, faster on paid plans.\n")
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps(x) if isinstance(x, dict) else x for x in lines) + "\n")
    return docs, q


def test_id_optional_stable_and_duplicate_text_names_both_lines(tmp_path):
    docs, q = _folder(tmp_path, [{"question": "When are invoices sent?"},
                                 {"question": "  When are  invoices sent?"},  # the same text (whitespace aside)
                                 {"id": "x1", "question": "How fast is support?"},
                                 {"id": "x2", "question": "How fast is support?"},  # given ids: both kept
                                 {"answers": ["beta"]}])
    ds = load_folder(docs, q)
    ids = [x.qid for x in ds.questions]
    assert ids == [derived_question_id("When are invoices sent?"), "x1", "x2"]
    assert ids[0].startswith("q-") and len(ids[0]) == 14
    assert load_folder(docs, q).questions[0].qid == ids[0]  # stable: the same file gives the same ids
    why = {s.line: s.reason for s in ds.skipped}
    assert "line 1" in why[2] and "neither line has an 'id'" in why[2]
    assert why[5] == "missing field 'question'"  # quoted once, not "'question'" in quotes


def test_missing_answers_is_unknown_not_unanswerable(tmp_path):
    docs, q = _folder(tmp_path, [{"question": "When are invoices sent?", "evidence": [{"doc": "b.md"}]},
                                 {"question": "What is installed first?", "answers": ["beta"],
                                  "evidence": [{"doc": "a.md"}]},
                                 {"question": "Who founded the company?", "answers": [], "answerable": False},
                                 {"question": "How fast is support?", "answers": []}])
    qs = {x.text: x for x in load_folder(docs, q).questions}
    assert qs["When are invoices sent?"].answerable is None
    assert qs["What is installed first?"].answerable is True
    assert qs["Who founded the company?"].answerable is False
    assert qs["How fast is support?"].answerable is False  # "answers": [] says there is none

    ws = tmp_path / "ws"
    assert main(["run", "--dataset", str(docs), "--questions", str(q), "--embedder", "hash", "--workspace", str(ws),
                 "--strategies", "chunks", "--no-progress", "--no-report", "--run-id", "R"]) == 0
    import duckdb
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    rows = con.execute("SELECT s.question_id, metric, value, status, detail FROM scores s WHERE run_id = 'R'").fetchall()
    con.close()
    unknown = derived_question_id("When are invoices sent?")
    got = {(qid, m): (v, st, d) for qid, m, v, st, d in rows}
    for m in ("f1", "em", "abstention_accuracy"):
        v, st, d = got[(unknown, m)]
        assert v is None and st == "not_applicable" and "answerability unknown" in d
    assert (unknown, "false_abstention") not in got and (unknown, "missed_abstention") not in got
    assert got[(unknown, "evidence_recall")][1] == "ok"  # its evidence is scored
    assert got[(unknown, "doc_recall@10")][1] == "ok"
    answered = derived_question_id("What is installed first?")
    assert got[(answered, "f1")][1] == "ok" and got[(answered, "abstention_accuracy")][1] == "ok"
    refused = derived_question_id("Who founded the company?")
    assert got[(refused, "abstention_accuracy")][1] == "ok"  # unanswerable: abstaining is scored
    assert (refused, "evidence_recall") not in got


def test_show_leaves_out_columns_na_on_every_row_and_says_which(tmp_path, capsys):
    docs, q = _folder(tmp_path, [{"question": "When are invoices sent?", "evidence": [{"doc": "b.md"}]},
                                 {"question": "How fast is support?", "evidence": [{"doc": "c.md"}]}])
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", str(docs), "--questions", str(q), "--embedder", "hash", "--workspace", str(ws),
                 "--strategies", "chunks", "--no-progress", "--no-report", "--run-id", "S"]) == 0
    capsys.readouterr()
    assert main(["show", "S", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("not shown (n/a on every row)"))
    assert "f1" in line and "em" in line and "answerability unknown" in line
    header = next(x for x in out.splitlines() if x.lstrip().startswith("strategy"))
    assert "evidence_recall" in header and " f1 " not in f" {header} " and "abstention_accuracy" not in header
    # asked for by name, a metric is shown even where it is n/a
    assert main(["show", "S", "--workspace", str(ws), "--metrics", "f1", "evidence_recall"]) == 0
    assert "n/a (answerability unknown" in capsys.readouterr().out
