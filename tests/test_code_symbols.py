"""Issue 46, item 3: symbol gold and the symbol metrics (symbol_recall@10, symbol_mrr@10), pinned by hand."""
from __future__ import annotations

import json

import pytest

from evals.cli import main
from evals.score.metrics import ScoringInput, score_retrieval
from rag.ingest.corpora import load_folder
from rag.models import Evidence, Question
from rag.strategies import Block


def _blk(n, *spans, doc="f.py"):
    return Block(n, "t", "chunks", (doc,), (f"{doc}#p0",), (f"c{n}",), tuple((doc, s, e) for s, e in spans), 5, 0.0)


def _sym(name, s, e, doc="f.py", span=None):
    a, b = span or (s, e)
    return Evidence(doc, f"{doc}#p0", a, b, None, name, s, e)


def _scores(evs, blocks):
    out = score_retrieval(ScoringInput(Question("q", "?", ["x"], True, evidence=evs), blocks, "x"))
    return {k: (v.value if v.value is None else round(v.value, 6)) for k, v in out.items()}


def test_a_piece_of_the_definition_counts_where_the_span_metric_does_not():
    ev = [_sym("Command.get_help", 100, 200)]
    s = _scores(ev, [_blk(1, (0, 50)), _blk(2, (150, 180))])
    assert s["symbol_mrr@10"] == 0.5 and s["symbol_recall@10"] == 1.0
    assert s["evidence_mrr@10"] == 0.0  # the span metric wants the whole function in one block
    # touching is not overlapping: a block ending where the definition starts does not show it
    s = _scores(ev, [_blk(1, (0, 100)), _blk(2, (200, 300))])
    assert s["symbol_mrr@10"] == 0.0 and s["symbol_recall@10"] == 0.0
    # another file with the same offsets does not count
    s = _scores(ev, [_blk(1, (100, 200), doc="g.py")])
    assert s["symbol_recall@10"] == 0.0
    assert _scores(ev, [])["symbol_recall@10"] == 0.0


def test_recall_counts_each_definition_once_and_only_in_the_first_ten_blocks():
    a = _sym("A.f", 0, 100)
    b = _sym("B.g", 500, 600)
    a2 = _sym("A.f", 0, 100, span=(40, 60))  # a second span inside A.f: still one definition
    blocks = [_blk(i, (1000 + i, 1001 + i)) for i in range(1, 11)] + [_blk(11, (550, 560))]
    s = _scores([a, b, a2], [_blk(0, (10, 20))] + blocks)
    assert s["symbol_recall@10"] == 0.5  # A.f at rank 1; B.g only at rank 12
    assert s["symbol_mrr@10"] == 1.0
    s = _scores([a, b], [_blk(1, (700, 800)), _blk(2, (0, 600))])  # one block showing both: the first, then none
    assert s["symbol_recall@10"] == 0.5 and s["symbol_mrr@10"] == 0.5


def test_no_symbol_no_symbol_metrics():
    s = _scores([Evidence("f.py", "f.py#p0", 100, 200)], [_blk(1, (100, 200))])
    assert "symbol_recall@10" not in s and s["evidence_mrr@10"] == 1.0


def test_symbol_gold_in_a_folder_scores_the_symbol_metrics(tmp_path, capsys):
    """`{"doc", "symbol"}` gold keeps its symbol through the store (a run's gold is JSON); span gold in code gets
    its definition from the index's parse; an unknown symbol stays document-level (warned) with no symbol score."""
    repo = tmp_path / "repo"
    repo.mkdir()
    helpers = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n" for i in range(6))
    src = ("class Command:\n    def get_help(self):\n        return 'help for the command line'\n\n"
           "class Context:\n    def get_help(self):\n        return 'context help text'\n\n" + helpers)
    (repo / "m.py").write_text(src)
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps(x) for x in [
        {"id": "sym", "question": "help for the command", "answers": ["help"],
         "evidence": [{"doc": "m.py", "symbol": "Command.get_help"}]},
        {"id": "span", "question": "context help", "answers": ["ctx"],
         "evidence": [{"doc": "m.py", "lines": [7, 7]}]},
        {"id": "nosym", "question": "who knows", "answers": ["x"],
         "evidence": [{"doc": "m.py", "symbol": "Nope.get_help"}]}]) + "\n")
    ds = load_folder(repo, q)
    by = {x.qid: x for x in ds.questions}
    e = by["sym"].evidence[0]
    assert (e.symbol, src[e.symbol_start:e.symbol_end]) == (
        "Command.get_help", "    def get_help(self):\n        return 'help for the command line'")
    e = by["span"].evidence[0]  # line 7 lies in Context.get_help
    assert e.symbol == "Context.get_help" and src[e.symbol_start:e.symbol_end].startswith("    def get_help")
    assert by["nosym"].evidence[0].symbol is None

    ws = tmp_path / "ws"
    assert main(["run", "--dataset", str(repo), "--questions", str(q), "--workspace", str(ws), "--embedder", "hash",
                 "--strategies", "chunks,parent_child", "--no-report", "--no-progress", "--run-id", "S"]) == 0
    capsys.readouterr()
    from evals.store import ResultStore

    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        rows = st.con.execute("SELECT question_id, strategy, status FROM scores WHERE metric = 'symbol_recall@10' "
                              "ORDER BY 1, 2").fetchall()
        gold = dict(st.con.execute("SELECT question_id, evidence FROM run_gold").fetchall())
    assert {(qid, s) for qid, s, _ in rows} == {(x, s) for x in ("sym", "span") for s in ("chunks", "parent_child")}
    assert all(status == "ok" for *_, status in rows)
    assert json.loads(gold["sym"])[0]["symbol"] == "Command.get_help"
    assert main(["show", "S", "--workspace", str(ws)]) == 0
    header = next(x for x in capsys.readouterr().out.splitlines() if x.lstrip().startswith("strategy"))
    assert "symbol_recall@10" in header and "symbol_mrr@10" in header


def test_stored_evidence_without_symbol_fields_still_loads():
    """A run stored before the symbol fields existed: its gold JSON has no `symbol` keys."""
    q = Question.from_dict({"qid": "q", "text": "?", "answers": [], "answerable": True,
                            "evidence": [{"doc_id": "f.py", "page_id": None, "start": 1, "end": 2, "text": "x"}]})
    assert q.evidence[0].symbol is None
    with pytest.raises(TypeError):
        Question.from_dict({"qid": "q", "text": "?", "answers": [], "answerable": True,
                            "evidence": [{"doc_id": "f.py", "symbl": "A"}]})
