"""Issue 46, item 3: symbol gold and the symbol metrics (symbol_recall@10, symbol_mrr@10), pinned by hand."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.cli import main
from evals.score.metrics import ScoringInput, score_retrieval
from rag.ingest.folders import load_folder
from rag.models import Evidence, Question
from rag.strategies import Block

ROOT = Path(__file__).resolve().parents[1]


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


def _search_order(args, capsys) -> list[str]:
    """`ragwb search` output -> the 'file:lines kind symbol' of each block, in rank order."""
    assert main(["search", *args]) == 0
    out = capsys.readouterr().out
    return [ln.split(None, 3)[3].split("  [")[0] for ln in out.splitlines() if ln[:5].strip().rstrip(".").isdigit()]


def test_exact_names_first_and_stubs_last(tmp_path, capsys):
    """Issue 46, item 4: `Command.get_help` ranks the exact definition first even where a neighbour's text
    matches the query better; a .pyi stub is kind `stub` and ranks below the implementation unless asked for."""
    repo = tmp_path / "proj"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "core.py").write_text(
        "class Context:\n"
        "    def get_help(self):\n"
        "        # Command.get_help Command get_help command help: Command.get_help calls Command.get_help\n"
        "        return 'Command.get_help command get help Command.get_help'\n\n"
        "class Command:\n"
        "    def get_help(self):\n"
        "        return self.format()\n\n"
        "def evolve(inst, **changes):\n"
        "    cls = inst.__class__\n"
        "    return cls(**changes)\n")
    (repo / "pkg" / "__init__.pyi").write_text(
        "# evolve evolve evolve: the stub of evolve\n"
        "def evolve(inst: object, **changes: object) -> object: ...  # evolve\n")
    ws = tmp_path / "ws"
    common = ["--dataset", str(repo), "--workspace", str(ws), "--embedder", "hash", "--no-progress",
              "--strategy", "chunks"]
    got = _search_order(["Command.get_help", *common], capsys)
    assert got[0].endswith("method Command.get_help"), got
    plain = _search_order(["Command.get_help", *common, "--set", "exact_names=false"], capsys)
    assert plain[0].endswith("method Context.get_help"), plain  # what the scores alone say: the test can fail
    got = _search_order(["evolve", *common], capsys)
    assert got[0].startswith("pkg/core.py") and got[0].endswith("function evolve"), got
    stub_at = [i for i, g in enumerate(got) if g.startswith("pkg/__init__.pyi")]
    assert stub_at and all(" stub evolve" in got[i] for i in stub_at)
    assert min(stub_at) > max(i for i, g in enumerate(got) if g.startswith("pkg/core.py"))  # below every impl
    kept = _search_order(["evolve", *common, "--set", "exact_names=false", "--set", "stubs=keep"], capsys)
    assert kept[0].startswith("pkg/__init__.pyi"), kept  # scored alone, the stub's text wins
    only = _search_order(["evolve", *common, "--where", "kind=stub"], capsys)
    assert only and all(g.startswith("pkg/__init__.pyi") for g in only)
    assert main(["search", "evolve", *common, "--set", "stubs=first"]) == 2
    assert "stubs must be one of last, keep, not 'first'" in capsys.readouterr().err


def test_query_names():
    from rag.index.code_order import query_names

    assert query_names("evolve") == {"evolve"}
    assert query_names("  `Command.get_help`  ") == {"Command.get_help"}
    assert query_names("How does Command.get_help format?") == {"Command.get_help"}
    assert query_names("std::fs::read_to_string") == {"std.fs.read_to_string"}
    assert query_names("like :func:`sorted`, but returns get_help") == set()  # bare words in a sentence


def test_search_answers_from_the_index_until_the_folder_changes(tmp_path, capsys):
    """Issue 46, item 5: `ragwb search` on a folder whose files are as the last ingest left them answers from the
    index (no read: an edit that keeps size and time is not seen, which --refresh reads); an added file or an
    edit makes it read the folder again, and it says why."""
    import os

    repo = tmp_path / "proj"
    repo.mkdir()
    f = repo / "a.py"
    f.write_text("def alpha_function(x):\n    return x + 1\n")
    ws = tmp_path / "ws"
    common = ["--dataset", str(repo), "--workspace", str(ws), "--embedder", "hash", "--no-progress",
              "--strategy", "chunks"]
    assert main(["ingest", str(repo), "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["search", "alpha_function", *common]) == 0
    out, err = capsys.readouterr()
    assert "a.py:1-2 function alpha_function" in out and "reading" not in err
    st = f.stat()
    f.write_text("def omega_function(x):\n    return x + 1\n")  # same length ...
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and the same time: the index is taken as current
    assert main(["search", "omega_function", *common]) == 0
    out, err = capsys.readouterr()
    assert "alpha_function" in out and "reading" not in err
    assert main(["search", "omega_function", *common, "--refresh"]) == 0
    assert "function omega_function" in capsys.readouterr().out
    (repo / "b.py").write_text("def beta_function():\n    return 2\n")
    assert main(["search", "beta_function", *common]) == 0
    out, err = capsys.readouterr()
    assert f"reading {repo} again (a file was added, removed or renamed in {repo})" in err
    assert "b.py:1-2 function beta_function" in out
    assert main(["search", "beta_function", *common]) == 0  # that read was an ingest: current again
    assert "reading" not in capsys.readouterr().err
    f.write_text("def gamma_function(x, y):\n    return x + y\n")  # another size
    assert main(["search", "gamma_function", *common]) == 0
    out, err = capsys.readouterr()
    assert f"{f} changed" in err and "function gamma_function" in out


def test_import_blocks_are_kind_imports_and_rank_below_implementations(tmp_path, capsys):
    """A file's opening imports name what the query asks about; they are kind `imports` and rank below every
    implementation unless imports=keep."""
    repo = tmp_path / "ts"
    repo.mkdir()
    (repo / "scan.ts").write_text(
        "import { accumulate, accumulator, seed } from './accumulate';\n"
        "import { accumulateValues, scanAccumulator } from './scanInternals';\n\n"
        "export function scan(fn: any, init: any) {\n  return wrap(fn, init);\n}\n")
    common = ["accumulate accumulator values", "--dataset", str(repo), "--workspace", str(tmp_path / "ws"),
              "--embedder", "hash", "--no-progress", "--strategy", "chunks"]
    kept = _search_order([*common, "--set", "imports=keep"], capsys)
    assert kept[0] == "scan.ts:1-2 imports", kept  # by score alone the import block wins: the test can fail
    got = _search_order(common, capsys)
    assert got[0].endswith("function scan") and got[-1] == "scan.ts:1-2 imports", got


def test_the_workbench_code_budgets_keep_each_strategys_own_default():
    """The notebook's code row: "shipped" leaves parent_child its imports=keep; a value picked is sent where it
    differs from a strategy's default; the defaults of the form send nothing."""
    from evals.workbench.calls import SHIPPED, points_from_budgets

    form = {"code_block_chars": 1000, "code_cut": "comments", "exact_names": True, "stubs": "last",
            "imports": SHIPPED, "where": ""}
    shapes = ["chunks", "hybrid", "full_documents", "two_phase_pages", "parent_child"]
    assert points_from_budgets(shapes, form) == [(s, {}) for s in shapes]
    got = dict(points_from_budgets(shapes, {**form, "imports": "last", "code_cut": "top", "exact_names": False}))
    assert got["parent_child"] == {"imports": "last", "exact_names": False}
    assert got["chunks"] == {"code_cut": "top", "exact_names": False}  # its imports default is already "last"
    assert got["full_documents"] == {"exact_names": False}  # no code_cut budget there
    # the notebook's BM25 stopwords control: hybrid's own budget, sent to hybrid alone when changed
    assert "hybrid__bm25_stopwords=mo.ui.dropdown" in (ROOT / "notebooks" / "workbench.py").read_text()
    kept = dict(points_from_budgets(shapes, {**form, "hybrid__bm25_stopwords": "keep"}))
    assert kept["hybrid"] == {"bm25_stopwords": "keep"} and all(kept[s] == {} for s in shapes if s != "hybrid")
    assert dict(points_from_budgets(shapes, {**form, "hybrid__bm25_stopwords": "auto"}))["hybrid"] == {}


def test_the_workbench_search_box_shows_what_ragwb_search_prints(tmp_path, capsys):
    """The notebook's search (interactive.search_frame) and `ragwb search` are one function (rag.strategies.look):
    the same blocks in the same order, the exact name first, the applied budgets followed."""
    from evals.workbench.calls import open_session, search_frame

    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "m.py").write_text("class Context:\n    def get_help(self):\n        return 'Command.get_help help'\n\n"
                               "class Command:\n    def get_help(self):\n        return self.format()\n")
    ws = tmp_path / "ws"
    printed = _search_order(["Command.get_help", "--dataset", str(repo), "--workspace", str(ws), "--embedder", "hash",
                             "--no-progress"], capsys)
    sess = open_session(str(repo), str(ws), embedder="hash")
    frame = search_frame(sess, "Command.get_help", "hybrid")
    assert list(frame["where"]) == printed and frame["where"][0].endswith("method Command.get_help")
    one = search_frame(sess, "Command.get_help", "hybrid", {"hybrid__top_k": 1})
    assert len(one) == 1


def test_bm25_on_code_drops_the_query_stopwords_that_only_comments_hold(tmp_path):
    """Issue 46: in code, "the", "of", "all" live only in comments, so their idf is high and a docstring-style
    query ranked a comment-heavy function above the one it describes; `bm25_stopwords="auto"` drops them on an
    index holding code (symbol recall@10 of BM25 alone: rxjs 0.40 -> 0.61), `keep` is the plain analysis."""
    from rag.index.embedders import EmbedderConfig
    from rag.index.retrieval import Retriever
    from rag.index.workspace import IndexConfig, Workspace
    from rag.strategies import retrieve

    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "ops.ts").write_text(
        "export function toArray(values: number[]): number[] {\n  return collect(values);\n}\n\n"
        "export function state(): void {\n"
        "  // all of the state is kept in the order of the calls, and the rest of the state is all the same\n"
        "  keep(1);\n}\n\n"
        + "".join(f"export function f{i}(x: number): number {{\n  return x + {i};\n}}\n\n" for i in range(6)))
    ws = Workspace(tmp_path / "ws")
    s = ws.ingest(load_folder(repo), IndexConfig(embedder=EmbedderConfig("hash")), progress=False)
    r = Retriever(ws, s.index)
    q = "Collects all of the values into an array."
    pool = r.pool(q)
    sym = lambda rows: [r.reader.symbols[i] for i in rows]  # noqa: E731
    kept, _ = r.bm25_pool(pool, 5, "memory", "keep")
    auto, _ = r.bm25_pool(pool, 5, "memory", "auto")
    assert sym(kept)[0] == "state", sym(kept)  # the stopwords alone put the comment first: the test can fail
    assert sym(auto)[0] == "toArray", sym(auto)
    assert r.bm25_query(q, "auto") == r.bm25_query(q, "drop") != r.bm25_query(q, "keep")
    with pytest.raises(ValueError, match="bm25_stopwords must be 'auto', 'drop' or 'keep', not 'some'"):
        retrieve(r, "hybrid", q, bm25_stopwords="some")


def test_search_from_the_index_reads_it_without_importing_lancedb(tmp_path):
    """`import lancedb` costs ~3 s (its REST namespace client); a search answered from the index reads the tables
    through pylance (Workspace.read_table) and prints exactly what it prints with LanceDB loaded."""
    import subprocess
    import sys

    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "a.py").write_text("def alpha_function(x):\n    return x + 1\n\n\ndef beta(y):\n    return y * 2\n")
    ws = tmp_path / "ws"
    assert main(["ingest", str(repo), "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    args = ["search", "alpha_function", "--dataset", str(repo), "--workspace", str(ws), "--embedder", "hash",
            "--no-progress"]
    code = ("import sys, io, contextlib\n{pre}from evals.cli import main\nout = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n    assert main({args!r}) == 0\n"
            "print(repr(out.getvalue()), 'lancedb' in sys.modules)\n")
    runs = [subprocess.run([sys.executable, "-c", code.format(pre=pre, args=args)], capture_output=True, text=True,
                           timeout=300) for pre in ("", "import lancedb\n")]
    (lean, lean_loaded), (full, full_loaded) = [r.stdout.strip().rsplit(" ", 1) for r in runs]
    assert (lean_loaded, full_loaded) == ("False", "True"), [r.stderr for r in runs]
    assert lean == full and "function alpha_function" in lean


def test_the_default_code_blocks_tokens_are_counted_at_ingest_so_a_fresh_search_loads_no_bpe(tmp_path):
    """Issue 46, item 5: tiktoken's 200,000-rank table took ~0.35 s of a fresh process's first `ragwb search`.
    Ingest counts every code chunk's default block exactly and keeps the counts (cache/tokens): a fresh search
    with the default budgets prints the same counts without loading the BPE; a corrupt counts file, or a budget
    whose blocks ingest did not count, is counted by the BPE, to the same numbers."""
    import subprocess
    import sys

    repo = tmp_path / "proj"
    repo.mkdir()
    body = "".join(f"    total = total + {i} * x  # step {i} of the sum\n" for i in range(40))
    (repo / "a.py").write_text('def alpha_function(x):\n    """Adds the steps.\n\n    Long words here.\n    """\n'
                               f"    total = 0\n{body}    return total\n\n\ndef beta(y):\n    return y * 2\n")
    ws = tmp_path / "ws"
    assert main(["ingest", str(repo), "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    kept = list((ws / "cache" / "tokens").glob("*-o200k_base.npz"))
    assert len(kept) == 1
    code = ("import io, contextlib\nfrom evals.cli import main\nfrom rag.tokens import get_encoding\nout = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n    assert main({args!r}) == 0\n"
            "print(repr(out.getvalue()), '|', get_encoding.cache_info().currsize)\n")

    def search(*extra):
        args = ["search", "alpha_function", "--dataset", str(repo), "--workspace", str(ws), "--embedder", "hash",
                "--no-progress", "--strategy", "chunks", *extra]
        r = subprocess.run([sys.executable, "-c", code.format(args=args)], capture_output=True, text=True, timeout=300)
        out, loaded = r.stdout.strip().rsplit(" | ", 1)
        return out, int(loaded), r.stderr

    lean, loaded, err = search()
    assert loaded == 0 and "function alpha_function" in lean and "tokens]" in lean, err
    kept[0].write_bytes(b"not an npz")  # a cache that does not load is counted again, never trusted
    counted, loaded, err = search()
    assert loaded == 1 and counted == lean, err
    assert search("--set", "code_block_chars=300")[1] == 1  # blocks ingest did not count: the BPE counts them


def test_kept_counts_are_the_bpe_counts_and_follow_the_strategies_defaults(tmp_path):
    """The counts ``save_counts`` keeps are exact encodes of each very text; a file of another encoding is not
    loaded; ingest counts the blocks of the budgets the strategies ship (a changed default would count others)."""
    import dataclasses

    from rag import tokens
    from rag.ingest.code.blocks import DEFAULT_BLOCK_CHARS, DEFAULT_CUT
    from rag.strategies import make_params

    texts = ["def f():\n    return 1\n", "héllo wörld ✓ " * 30, "x" * 5000, "def f():\n    return 1\n"]
    enc = tokens.get_encoding("o200k_base")
    path = tmp_path / "t.npz"
    assert tokens.save_counts(path, texts, "o200k_base") <= 3  # each distinct text counted once (or known)
    tokens._known.clear()
    assert tokens.load_counts(path, "cl100k_base") == 0 and not tokens._known.get("cl100k_base")
    assert tokens.load_counts(path, "o200k_base") == 3
    for t in texts:
        assert tokens._known["o200k_base"][tokens._digest(t)] == len(enc.encode(t, disallowed_special=()))
    tokens._known.clear()
    for name in ("chunks", "hybrid", "two_phase_pages"):
        p = dataclasses.asdict(make_params(name))
        assert (p["code_block_chars"], p["code_cut"]) == (DEFAULT_BLOCK_CHARS, DEFAULT_CUT), name
