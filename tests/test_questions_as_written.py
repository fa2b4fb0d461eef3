"""Questions as people write them (issue 43, item 2): `id` optional, a missing `answers` is unknown (not
unanswerable), evidence metrics still scored, and `ragwb show` leaves out columns n/a on every row."""
import json

from evals.cli import main
from rag.ingest.questions import derived_question_id
from rag.ingest.folders import load_folder


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


def test_symbol_evidence_unknown_keys_and_line_counts(tmp_path):
    """Issue 46, items 3 and 6: `symbol` evidence points at the definition the index names; an unknown evidence
    key is an error naming the line (was dropped without a word); an 8-line file has 8 lines."""
    repo = tmp_path / "repo"
    repo.mkdir()
    src = ("class Command:\n    def get_help(self):\n        return 'help'\n\n"
           "class Context:\n    def get_help(self):\n        return 'ctx'\n\nx = 1\n")
    (repo / "m.py").write_text(src)
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps(x) for x in [
        {"question": "Where is the command's help?", "evidence": [{"doc": "m.py", "symbol": "Command.get_help"}]},
        {"question": "Unknown key?", "evidence": [{"doc": "m.py", "symbl": "Command.get_help"}]},
        {"question": "Missing symbol?", "evidence": [{"doc": "m.py", "symbol": "Nope.get_help"}]},
        {"question": "Too far?", "evidence": [{"doc": "m.py", "lines": [6, 10]}]},
        {"question": "Last line?", "evidence": [{"doc": "m.py", "lines": [9, 9]}]}]) + "\n")
    ds = load_folder(repo, q)
    by = {x.text: x for x in ds.questions}
    ev = by["Where is the command's help?"].evidence[0]
    assert src[ev.start:ev.end] == "    def get_help(self):\n        return 'help'"
    assert by["Where is the command's help?"].metadata["symbol"] == "Command.get_help"
    why = {s.line: s.reason for s in ds.skipped}
    assert "unknown key(s) 'symbl'" in why[2] and "valid: doc, lines, page, symbol, text" in why[2]
    assert "symbol 'Nope.get_help' is not a definition" in why[3]
    assert "lines [6, 10] out of range for 'm.py' (9 lines)" in why[4]
    last = by["Last line?"].evidence[0]
    assert src[last.start:last.end] == "x = 1"


def test_search_on_a_hash_index_refuses_a_silent_e5_ingest(tmp_path, capsys):
    """Issue 46, item 5: `ragwb search` over a folder indexed with --embedder hash names that index instead of
    starting a full e5 ingest without a word."""
    docs, q = _folder(tmp_path, [{"question": "When are invoices sent?"}])
    ws = tmp_path / "ws"
    assert main(["ingest", str(docs), "--embedder", "hash", "--workspace", str(ws), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["search", "invoices", "--dataset", str(docs), "--workspace", str(ws), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "indexed here with --embedder hash, not e5" in err and "chunks to embed" in err
    assert main(["search", "invoices", "--dataset", str(docs), "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress"]) == 0
