"""Issue 53: index settings as sweep axes. One run holds every index config's points (their settings in the label
and params), each config is built once before any answer and priced first, a text embedded by the same embedder is
never embedded again (a second identical run embeds nothing), an unknown setting is an error naming the valid ones,
and evidence is scored by document, page and characters, never by chunk id, so two chunkings meet the same gold."""
import json
import re
import shutil
from pathlib import Path

import duckdb

from evals.cli import main
from evals.score.metrics import ScoringInput, score_all
from rag.models import Evidence, Question
from rag.strategies import Block

DATA = Path(__file__).resolve().parent / "data" / "as_written"


def test_one_run_holds_every_index_config_and_a_second_run_embeds_nothing(tmp_path, capsys):
    docs, ws = tmp_path / "handbook", tmp_path / "ws"
    shutil.copytree(DATA / "handbook", docs)
    run = ["run", "--dataset", str(docs), "--questions", str(DATA / "mixed.jsonl"), "--embedder", "hash",
           "--workspace", str(ws), "--no-progress", "--no-report", "--strategies", "chunks,hybrid",
           "--set", "index.chunk_tokens=24,48", "--set", "index.chunker=tokens,hierarchy"]
    assert main(run + ["--run-id", "GRID"]) == 0
    err = capsys.readouterr().err
    # priced first: one line per config, before the first ingest
    head = err[:err.index("ingested ")]
    # hierarchy never reads chunk_tokens (issue 63, item 12): its two configs are one index, built and shown once
    assert "index configs: 3, each built once before any answer" in head
    assert "hierarchy (how handbook's documents are chunked there) never reads index.chunk_tokens" in head
    assert "1 index config(s) build the same chunks as another, built and shown once: chunk_tokens=48," \
           "chunker=hierarchy = chunker=hierarchy" in head
    assert len(re.findall(r"^  chunk_tokens=\d+,chunker=tokens: ", head, re.M)) == 2
    assert len(re.findall(r"^  chunker=hierarchy: ", head, re.M)) == 1
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    labels = con.execute("SELECT strategy, point_label, count(*) FROM results WHERE run_id='GRID' GROUP BY ALL "
                         "ORDER BY ALL").fetchall()
    params = {json.dumps(json.loads(p), sort_keys=True) for (p,) in con.execute(
        "SELECT DISTINCT params FROM results WHERE run_id='GRID'").fetchall()}
    planned = con.execute("SELECT planned, status FROM runs WHERE run_id='GRID'").fetchone()
    con.close()
    assert len(labels) == 6 and all(n == 7 for _, _, n in labels)  # 2 strategies x 3 configs, 7 questions each
    assert {lab for _, lab, _ in labels} == {"index.chunk_tokens=24,index.chunker=tokens",
                                             "index.chunk_tokens=48,index.chunker=tokens", "index.chunker=hierarchy"}
    assert all('"index.chunker": ' in p and '"top_k": ' in p for p in params)
    assert sum('"index.chunk_tokens": ' in p for p in params) == 4  # never on a hierarchy point
    assert len(params) == 6  # points are matched by params: two index configs are never one point
    assert planned == (42, "finished")
    # the tokens chunker cuts 24- and 48-token windows differently: their context tokens differ
    assert main(["show", "GRID", "--workspace", str(ws), "--metrics", "context_tokens"]) == 0
    show = capsys.readouterr().out
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(
        r"^\s*chunks\s+(index\.chunk_tokens=\d+,index\.chunker=tokens)\s+7\s+0\s+([\d.]+)", show, re.M)}
    assert len(rows) == 2 and len(set(rows.values())) == 2, show
    # the same grid again, as a new run: every config is built, every text cached; nothing is embedded
    assert main(run + ["--run-id", "GRID2"]) == 0
    err = capsys.readouterr().err
    assert "nothing new to embed" in err and re.findall(r"embedded (\d+) chunks", err) == ["0"] * 3


def test_an_unknown_index_setting_or_value_is_refused_before_anything_runs(tmp_path, capsys):
    docs, ws = tmp_path / "handbook", tmp_path / "ws"
    shutil.copytree(DATA / "handbook", docs)
    base = ["run", "--dataset", str(docs), "--questions", str(DATA / "plain.jsonl"), "--embedder", "hash",
            "--workspace", str(ws), "--no-progress", "--no-report"]
    assert main(base + ["--set", "index.chunk_size=64,128"]) == 2
    err = capsys.readouterr().err
    assert "unknown index setting 'chunk_size'; valid: chunker, chunk_tokens, overlap" in err
    assert main(base + ["--set", "index.embedder=e5,word2vec"]) == 2
    assert "unknown embedder 'word2vec'; valid:" in capsys.readouterr().err
    assert main(base + ["--set", "index.chunk_tokens=8"]) == 2  # overlap 16 is not below 8: named
    # the overlap in force is named, and that it is the default (issue 63, item 12)
    assert "index config of this run: overlap 16 (the default) must be below chunk_tokens 8" in capsys.readouterr().err
    assert not (ws / "results.duckdb").exists() or not duckdb.connect(str(ws / "results.duckdb"), read_only=True) \
        .execute("SELECT count(*) FROM runs").fetchone()[0]
    # the sweep file's [index] table is the same axis
    sweep = tmp_path / "sweep.toml"
    sweep.write_text("[index]\nchunk_tokens = [24, 48]\n[strategies.chunks]\ntop_k = [2]\n")
    assert main(base + ["--config", str(sweep), "--run-id", "T", "--strategies", "chunks"]) == 0
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    got = sorted(x for (x,) in con.execute("SELECT DISTINCT point_label FROM results WHERE run_id='T'").fetchall())
    con.close()
    assert got == ["index.chunk_tokens=24,top_k=2", "index.chunk_tokens=48,top_k=2"]
    sweep.write_text("[index]\nchunk_sizes = [24]\n")
    assert main(base + ["--config", str(sweep)]) == 2
    assert "[index] unknown index setting 'chunk_sizes'" in capsys.readouterr().err


def test_identical_text_under_two_chunkings_gets_identical_evidence_scores():
    """Evidence is located by document, page and characters: the same retrieved text under two chunkings (other
    chunk ids, other neighbours) scores the same, so two chunk sizes are measured on one gold."""
    q = Question("q", "How many days of annual leave?", ["26 days"], True, "", "en",
                 [Evidence("leave.md", "leave.md#p1", 40, 70, "26 days of annual leave")])
    text = "Full-time staff receive 26 days of annual leave per calendar year."

    def block(chunk_id, n_tokens):
        return Block(1, text, "chunks", ("leave.md",), ("leave.md#p1",), (chunk_id,), (("leave.md", 15, 81),),
                     n_tokens, 0.9)

    a = score_all(ScoringInput(q, [block("leave.md#p1/c0", 14)], "26 days [1]"))
    b = score_all(ScoringInput(q, [block("leave.md#p1/c7-of-a-finer-chunking", 14)], "26 days [1]"))
    keys = [m for m in a if m.startswith(("evidence", "doc_", "page_", "citation"))]
    assert keys and all((a[m].value, a[m].status) == (b[m].value, b[m].status) for m in keys)
    assert a["evidence_recall"].value == 1.0


def test_best_prints_a_config_that_reproduces_the_chosen_point(tmp_path, capsys):
    """Issue 53, item 7: `ragwb best RUN --metric M` names the best point with its interval and the runner-up's
    paired difference, and writes TOML that `ragwb run --config` takes; that run reproduces the point's numbers."""
    docs, ws = tmp_path / "handbook", tmp_path / "ws"
    shutil.copytree(DATA / "handbook", docs)
    common = ["--embedder", "hash", "--workspace", str(ws), "--no-progress", "--no-report"]
    assert main(["run", "--dataset", str(docs), "--questions", str(DATA / "mixed.jsonl"), *common,
                 "--strategies", "chunks,parent_child", "--set", "chunks.top_k=1,4",
                 "--set", "index.chunk_tokens=24,128", "--set", "index.chunker=tokens", "--run-id", "GRID"]) == 0
    capsys.readouterr()
    out = tmp_path / "best.toml"
    assert main(["best", "GRID", "--metric", "context_tokens", "--workspace", str(ws)]) == 0  # lower is better
    text = capsys.readouterr().out
    assert re.search(r"^best on context_tokens: chunks · index\.chunk_tokens=24,top_k=1: ",
                     text, re.M), text
    assert main(["best", "GRID", "--metric", "f1", "--workspace", str(ws), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    best = re.search(r"^best on f1: (\S+) · (\S+): ([\d.]+) \[", text, re.M)
    assert best and re.search(r"^runner-up .*paired delta \(runner-up - best\) [+-][\d.]+ \[", text, re.M), text
    assert "[index]" in out.read_text() and "chunker = \"tokens\"" in out.read_text()
    assert main(["run", "--config", str(out), *common, "--run-id", "AGAIN"]) == 0
    capsys.readouterr()
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)

    def means(rid, strategy, label=None):
        q = ("SELECT metric, avg(value) FROM scores s JOIN results r USING (run_id, strategy, point_id, question_id, "
             "repeat) WHERE s.run_id = ? AND s.strategy = ? AND s.status = 'ok'"
             + (" AND r.point_label = ?" if label else "") + " GROUP BY metric")
        return dict(con.execute(q, [rid, strategy] + ([label] if label else [])).fetchall())

    chosen, again = means("GRID", best.group(1), best.group(2)), means("AGAIN", best.group(1))
    con.close()
    for m in ("f1", "context_tokens", "evidence_recall"):
        assert abs(chosen[m] - again[m]) < 1e-9, (m, chosen[m], again[m])
    # the front within a tolerance, cheapest first, each with its TOML; a cap on context tokens
    assert main(["best", "GRID", "--metric", "f1", "--race-cost", "0.0", "--workspace", str(ws)]) == 0
    assert "front on f1 vs context_tokens: chunks · index.chunk_tokens=24" in capsys.readouterr().out
    assert main(["best", "GRID", "--metric", "f1", "--max-context-tokens", "1", "--workspace", str(ws)]) == 2
    assert "no point of run GRID keeps its mean context within 1 tokens" in capsys.readouterr().err


def test_index_configs_race_like_other_points(tmp_path, capsys):
    """Issue 53, item 5: the points of every index config race together; one raced out stops costing answer calls
    (fewer items stored), and the summary says the indexes were built before (a race cannot save embedding)."""
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--workspace", str(ws), "--embedder", "hash", "--no-progress",
                 "--no-report", "--strategies", "chunks", "--set", "chunks.top_k=1,8", "--set",
                 "index.chunk_tokens=24,128", "--set", "index.overlap=4", "--race", "f1", "--race-batch", "25",
                 "--limit", "200", "--run-id", "R"]) == 0
    out = capsys.readouterr().out
    assert "its 2 index configs were built before the race: a race saves answer calls, never embedding" in out
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    items = dict(con.execute("SELECT point_label, count(*) FROM results WHERE run_id='R' GROUP BY 1").fetchall())
    con.close()
    assert set(items) == {f"index.chunk_tokens={t},top_k={k}" for t in (24, 128) for k in (1, 8)}
    raced = [p for p, n in items.items() if n < 200]
    assert raced and all(f"chunks · {p}: raced out at question" in out for p in raced)
    assert sum(items.values()) < 800


def test_the_workbench_index_row_prices_then_sweeps_two_chunk_sizes_onto_one_chart(browser, tmp_path):
    """Issue 53, item 6: the Index row. Two chunk sizes are planned (the applied-index table says what each must
    embed), nothing is embedded before the button, then one stored run holds both configs' points on one chart with
    the index setting in each point's label. The screenshot is docs/img/workbench-index-sweep.png's source."""
    from test_as_written import _serve, embedded_count, open_page

    docs, ws = tmp_path / "handbook", tmp_path / "ws"
    shutil.copytree(DATA / "handbook", docs)
    proc, url = _serve(["--dataset", str(docs), "--questions", str(DATA / "mixed.jsonl"), "--embedder", "hash",
                        "--workspace", str(ws)])
    try:
        page, errors = open_page(browser, url)
        page.wait_for_selector(".main-svg", timeout=120000)

        def embedded():
            return embedded_count(ws)

        before = embedded()
        form = page.locator("marimo-form", has=page.get_by_text("Plan the index sweep")).first
        tokens = form.locator("input[type=text]").nth(1)  # chunker, then chunk tokens
        tokens.fill("24,128")
        form.locator("input[type=text]").nth(2).fill("4")  # overlap below 24
        page.get_by_text("Plan the index sweep").click()
        page.wait_for_selector("text=/2 index config\\(s\\): [1-9]\\d* chunk\\(s\\) to embed first/", timeout=60000)
        page.wait_for_selector("text=chunk_tokens=24", timeout=30000)  # the applied-index table
        assert embedded() == before  # planned, nothing embedded
        page.get_by_role("button", name=re.compile(r"^Embed \d+ chunks and run")).click()
        page.wait_for_selector("text=/every index config \\(run /", timeout=120000)
        # each point says its chunk size on the plot in short (issue 83, item 14: it was on hover only), its whole
        # index setting on hover (issue 63: the whole labels overprinted one another)
        page.wait_for_function("""() => { const all = (r) => [...r.querySelectorAll('*')].flatMap(
                                   e => e.shadowRoot ? [e, ...all(e.shadowRoot)] : [e]);
                               return all(document).filter(e => e.classList && e.classList.contains('js-plotly-plot'))
                                   .some(g => (g.data || []).some(t => [].concat(t.hovertext || []).some(
                                       x => String(x).includes('index.chunk_tokens=24'))
                                       && [].concat(t.text || []).some(x => String(x) === 'chunk=24')
                                       && String(t.mode).includes('text'))); }""",
                               timeout=30000)
        assert embedded() > before
        chart = page.locator(".main-svg").last
        chart.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "workbench-index-sweep.png"), full_page=False)
        # `ragwb best` as a button on the stored sweep (the new run is the one the dropdown shows)
        page.get_by_role("button", name="Best config of the stored sweep (TOML to paste)").click()
        page.wait_for_selector("text=/best on f1: .*index\\.chunk_tokens=(24|128)/", timeout=60000)
        page.wait_for_selector("text=/ragwb run --config THIS_FILE/", timeout=30000)
        assert errors == [], errors
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    labels = {x for (x,) in con.execute("SELECT DISTINCT point_label FROM results").fetchall()}
    con.close()
    assert {"index.chunk_tokens=24", "index.chunk_tokens=128"} <= labels


def test_a_remote_embedder_embeds_an_index_grid_concurrently_and_each_text_once(tmp_path, capsys):
    """Issue 53, item 2: with an OpenAI-compatible embeddings endpoint (the 127.0.0.1 test server), the distinct
    texts of every config are sent --concurrency requests at a time, a text two configs share is sent once, and
    the configs are then built from the cache."""
    from openai_server import Handler, start

    srv, url = start()
    try:
        docs, ws = tmp_path / "handbook", tmp_path / "ws"
        shutil.copytree(DATA / "handbook", docs)
        Handler.embed_peak = 0
        assert main(["run", "--dataset", str(docs), "--questions", str(DATA / "plain.jsonl"), "--embedder", "openai",
                     "--embed-base-url", url, "--embed-model", "slow-hash", "--embed-key-env", "NO_SUCH_KEY_VAR",
                     "--workspace", str(ws), "--no-progress", "--no-report", "--strategies", "chunks",
                     "--set", "index.chunk_tokens=24,32,128", "--set", "index.overlap=4", "--concurrency", "3",
                     "--run-id", "REMOTE"]) == 0
        err = capsys.readouterr().err
        m = re.search(r"embedded (\d+) text\(s\) for the remote configs, 3 request\(s\) at a time", err)
        assert m and int(m.group(1)) > 0, err
        assert Handler.embed_peak >= 2, err  # requests overlapped
        built = [int(x) for x in re.findall(r"embedded (\d+) chunks", err)]
        assert len(built) == 3 and sum(built) == 0  # every config built from the cache filled concurrently
    finally:
        srv.shutdown()


def test_show_prompt_on_an_index_grid_says_which_index_it_shows(tmp_path, capsys):
    docs = tmp_path / "handbook"
    shutil.copytree(DATA / "handbook", docs)
    assert main(["run", "--dataset", str(docs), "--questions", str(DATA / "plain.jsonl"), "--embedder", "hash",
                 "--workspace", str(tmp_path / "ws"), "--strategies", "chunks", "--set", "index.chunk_tokens=24,128",
                 "--set", "index.overlap=4", "--show-prompt"]) == 0
    out = capsys.readouterr().out
    assert "notice: --show-prompt shows the prompts on the run's base index" in out and "chunk_tokens=[24, 128]" in out
