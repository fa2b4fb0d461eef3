"""ragwb generate through a real 127.0.0.1 OpenAI-compatible server: evidence by construction, every drop
counted by its reason, nothing half-written, the set runs as gold (docs/generate.md)."""
import json

import pytest

from evals.cli import main
from evals.generate import boilerplate, longest_shared_run, parse_reply, sample_passages
from openai_server import Handler, start
from rag.models import Document, Page

WORDS = ("The Harbour Board of Lindenport met in March to discuss the new Ferry Terminal and its Budget. "
         "Members from Ostvale and Kirrin argued about the Tolls while the Mayor asked for a Survey. ")


@pytest.fixture(scope="module")
def server():
    srv, url = start()
    yield url
    srv.shutdown()


@pytest.fixture()
def corpus(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    from pdfgen import make_pdf

    import random

    rng = random.Random(7)
    names = [a + b for a in ("Kor", "Vel", "Mar", "Tis", "Bran", "Olm", "Quen", "Hal") for b in ("ada", "ino", "ept",
                                                                                               "urg", "esk", "oth")]
    for n in ["Alder", "Birch", "Cedar", "Daphne", "Elm", "Fir"]:  # three pages each: multi needs two of one
        pages = []
        for k in range(3):  # every page its own names, so no two generated questions are near-duplicates
            w = rng.sample(names, 6)
            pages.append([f"{n} Report section {k}.", f"The {w[0]} Board of {w[1]} met in {w[2]} to discuss",
                          f"the new {w[3]} terminal and its budget. Members from {w[4]} and {w[5]}"]
                         + WORDS.split(". "))
        make_pdf(d / f"{n.lower()}.pdf", pages)
    (d / "toc.md").write_text("# Contents\n\n" + "\n".join(f"Chapter {i} .......... {i * 7}" for i in range(1, 12)))
    return d


def _gen(corpus, ws, url, model, out, *extra):
    return main(["generate", str(corpus), "--workspace", str(ws), "--embedder", "hash", "--no-progress",
                 "--llm-base-url", url, "--llm-model", model, "--llm-key-env", "RAGWB_TEST_KEY", "--out", str(out),
                 *extra])


def test_generated_questions_carry_their_evidence_and_run_as_gold(corpus, server, tmp_path, capsys):
    ws, out = tmp_path / "ws", tmp_path / "gold.jsonl"
    assert _gen(corpus, ws, server, "questioner", out, "--n", "8", "--types", "single,multi,unanswerable",
                "--seed", "3") == 0
    said = capsys.readouterr().out
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 8 and {r["type"] for r in rows} == {"single", "multi", "unanswerable"}, said
    docs = {p.name: p.read_text() for p in corpus.iterdir()}
    for r in rows:
        g = r["metadata"]["generator"]
        assert g["model"] == "questioner" and g["seed"] == 3 and len(g["prompt_sha256"]) == 16
        assert r["evidence"] and all(e["doc"] in docs and e["doc"] != "toc.md" for e in r["evidence"])
        if r["type"] == "unanswerable":
            assert r["answerable"] is False and r["answers"] == []
        else:  # the answer is a span of its evidence, found in the passage
            span = next(e["text"] for e in r["evidence"] if "text" in e)
            assert r["answers"] == [span] and span in docs[next(e["doc"] for e in r["evidence"] if "text" in e)]
        if r["type"] == "multi":
            assert len(r["evidence"]) == 2 and r["evidence"][0]["doc"] == r["evidence"][1]["doc"]
    # stratified: 8 questions over 6 documents touch every document
    per_doc = {}
    for r in rows:
        for e in r["evidence"]:
            per_doc[e["doc"]] = per_doc.get(e["doc"], 0) + 1
    assert len(per_doc) == 6
    assert "table of contents 1" in said and "lexical share:" in said and "tokens" in said
    # the cost line comes first (before the summary), and an unknown price is said so, never $0
    first = said.splitlines()[0]
    assert first.startswith("ragwb generate: 8 passage(s) to ask about; 8 call(s) to questioner (") and \
        "price unknown" in first and "0 already in the response cache" in first, said
    assert "$0.0000" not in said
    # the same seed gives the same set; the cache answers the rerun
    calls = Handler.calls
    again = tmp_path / "again.jsonl"
    assert _gen(corpus, ws, server, "questioner", again, "--n", "8", "--types", "single,multi,unanswerable",
                "--seed", "3") == 0
    assert again.read_text() == out.read_text() and Handler.calls == calls
    assert "0 call(s) to questioner" in capsys.readouterr().out.splitlines()[0]  # all cached, said first
    # the generated set is gold the workbench runs
    capsys.readouterr()
    assert main(["run", "--dataset", str(corpus), "--questions", str(out), "--workspace", str(ws), "--embedder",
                 "hash", "--no-progress", "--no-report", "--strategies", "chunks"]) == 0
    assert "8 items" in capsys.readouterr().out


@pytest.mark.parametrize("model,reason", [
    ("questioner-text", "not the JSON asked for 4"),
    ("questioner-empty", "empty question 4"),
    ("questioner-wrong", "answer not found in its passage 4"),
    ("questioner-same", "near-duplicate question 3"),
    ("fault-500", "error 4"),
    ("fault-echo-400", "error 4"),
])
def test_bad_replies_are_counted_and_nothing_is_half_written(corpus, server, tmp_path, capsys, model, reason):
    ws, out = tmp_path / "ws", tmp_path / "gold.jsonl"
    out.write_text("the previous set\n")
    survivor = model == "questioner-same"
    # nothing survived: exit 6 and --out keeps what it held (issue 44, item 6); else the new set replaces it
    assert _gen(corpus, ws, server, model, out, "--n", "4", "--retries", "0") == (0 if survivor else 6)
    cap = capsys.readouterr()
    said = cap.out + cap.err
    assert reason in said, said
    kept = out.read_text().splitlines()
    assert kept == ["the previous set"] if not survivor else len(kept) == 1
    assert survivor or "no question survived" in cap.err
    assert not list(tmp_path.glob("*.partial"))


def test_without_an_endpoint_it_says_so_in_one_line(corpus, tmp_path, capsys):
    assert main(["generate", str(corpus), "--workspace", str(tmp_path / "ws"), "--embedder", "hash",
                 "--out", str(tmp_path / "g.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs an LLM endpoint" in err[0] and "docs/llm.md" in err[0]
    assert main(["generate", str(corpus), "--out", "x", "--types", "single,tricky", "--llm-base-url", "u",
                 "--llm-model", "m"]) == 2
    assert "unknown type(s) tricky; valid: single, multi, unanswerable" in capsys.readouterr().err


def test_sampling_filters_and_overlap_on_hand_made_cases():
    assert boilerplate("too short") == "short"
    toc = "\n".join(f"Section {i} ........ {i}" for i in range(1, 20)) + "\n" + "word " * 50
    assert boilerplate(toc) == "table of contents"
    assert boilerplate("word " * 60) is None
    assert parse_reply('```json\n{"question": "Why?", "answer": "Because"}\n```') == {"question": "Why?",
                                                                                     "answer": "Because"}
    assert parse_reply("no json here") is None and parse_reply('{"question": 3}') is None
    assert longest_shared_run("What did the Harbour Board discuss in March?", WORDS) == 3  # "the harbour board"
    docs = [Document(f"d{i}", "", "en", "", "", [Page(f"d{i}#p{k}", f"d{i}", k, 0, 1, "w " * 60) for k in range(3)])
            for i in range(4)]
    jobs, skipped = sample_passages(docs, 6, ("single",), seed=1)
    firsts = [j[1][0].doc_id for j in jobs[:4]]
    assert len(set(firsts)) == 4  # every document once before any twice
    assert sample_passages(docs, 6, ("single",), seed=1)[0] == jobs  # seeded
    multi, _ = sample_passages(docs, 10, ("multi",), seed=0)
    assert len(multi) == 4 and all(len(p) == 2 and p[0].doc_id == p[1].doc_id for _, p in multi)


def test_validate_ranks_the_same_points_over_human_and_generated_questions(server, tmp_path, capsys):
    out = tmp_path / "sq.jsonl"
    assert main(["generate", "squad2", "--workspace", str(tmp_path / "ws"), "--embedder", "hash", "--no-progress",
                 "--llm-base-url", server, "--llm-model", "questioner", "--out", str(out), "--n", "24",
                 "--validate", "--validate-limit", "40"]) == 0
    said = capsys.readouterr().out
    table = said.split("validation on squad2")[1]
    rows = [ln.split() for ln in table.splitlines() if ln.strip().startswith(("evidence_recall", "doc_ndcg@10",
                                                                              "page_ndcg@10"))]
    assert [r[0] for r in rows] == ["evidence_recall", "doc_ndcg@10", "page_ndcg@10"]
    for r in rows:
        points, n_human, n_gen, tau, low, high, sign = r[1:]
        assert points == "9" and int(n_human) == 40 and int(n_gen) == 24
        assert -1 <= float(low) <= float(tau) <= float(high) <= 1 and 0 <= float(sign) <= 1


def test_kendall_tau_b_matches_scipy_with_ties():
    from scipy.stats import kendalltau

    from evals.generate import kendall_tau_b

    x, y = [0.1, 0.4, 0.4, 0.9, 0.2, 0.7], [0.2, 0.3, 0.5, 0.5, 0.1, 0.9]
    assert kendall_tau_b(x, y) == pytest.approx(kendalltau(x, y).statistic, abs=1e-12)
    assert kendall_tau_b([1, 2, 3], [3, 2, 1]) == -1.0


def test_a_long_answer_is_not_an_answer_and_too_few_questions_are_not_validated(server, tmp_path, capsys):
    from evals.generate import MAX_ANSWER_WORDS, generate
    from rag.llm.client import LLMClient, LLMConfig

    page_text = " ".join(f"word{i}" for i in range(60))
    docs = [Document("d", "", "en", "", page_text, [Page("d#p0", "d", 0, 0, len(page_text), page_text)])]
    client = LLMClient(LLMConfig(server, "questioner-long"), None)
    res = generate(client, docs, 1)
    assert res.questions == [] and res.counts[f"answer longer than {MAX_ANSWER_WORDS} words"] == 1
    out = tmp_path / "sq.jsonl"
    assert main(["generate", "squad2", "--workspace", str(tmp_path / "ws"), "--embedder", "hash", "--no-progress",
                 "--llm-base-url", server, "--llm-model", "questioner", "--out", str(out), "--n", "5",
                 "--validate"]) == 0
    assert "not run: 5 answerable generated question(s)" in capsys.readouterr().out


def test_a_killed_generate_leaves_no_file_and_the_rerun_asks_only_the_rest(corpus, server, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    ws, out = tmp_path / "ws", tmp_path / "gold.jsonl"
    cmd = [sys.executable, "-m", "evals.cli", "generate", str(corpus), "--workspace", str(ws), "--embedder", "hash",
           "--no-progress", "--llm-base-url", server, "--llm-model", "questioner-slow", "--out", str(out), "--n", "14",
           "--concurrency", "1", "--language", "en"]
    assert main(["ingest", str(corpus), "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    before = Handler.calls
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while Handler.calls - before < 5 and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    first = Handler.calls - before
    assert 5 <= first < 14
    assert not out.exists() and not list(tmp_path.glob("*.partial"))  # nothing half-written
    mid = Handler.calls
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=300).returncode == 0
    # the rerun asked only what the killed run never got an answer for (a call in flight at the kill is asked again)
    assert Handler.calls - mid <= 14 - first + 1
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert 1 <= len(rows) <= 14 and {r["language"] for r in rows} == {"en"}  # (near-duplicates are dropped)


def test_the_page_generates_questions_after_its_cost_line_and_the_same_set_as_the_cli(corpus, server, tmp_path):
    """The workbench page's Generate (evals.workbench.generating): the cost line counts one call per sampled
    passage and sends nothing (price unknown, never $0); the write is the CLI's set for the same seed, remembered as
    the folder's questions (a reload evaluates on them); counted again, every call is cached."""
    from evals.workbench import calls as interactive
    from evals.workbench import generating
    from rag.llm.client import LLMConfig

    ws = tmp_path / "ws"
    sess = interactive.open_session(str(corpus), str(ws), "hash")
    assert sess.dataset.questions == []
    llm = LLMConfig(server, "local-extractive", "RAGWB_TEST_KEY")  # the page's answerer; the form names the model
    client = generating.generator_client(sess, llm, "questioner")
    with pytest.raises(ValueError, match="unknown .*valid: single, multi, unanswerable"):
        generating.generate_plan(sess, client, 6, ["sigle"])
    with pytest.raises(ValueError, match="inside the corpus folder .*read it as one of its documents"):
        generating.generate_plan(sess, client, 6, ["single"], out=corpus / "alder.pdf")  # never over a document
    assert main(["generate", str(corpus), "--workspace", str(ws), "--embedder", "hash", "--llm-base-url", server,
                 "--llm-model", "questioner", "--out", str(corpus / "gold.jsonl")]) == 2  # the CLI refuses it too
    assert not (corpus / "gold.jsonl").exists()
    calls = Handler.calls
    plan = generating.generate_plan(sess, client, 6, ["single", "multi"], seed=3)
    assert Handler.calls == calls  # counting sends nothing
    assert (plan.jobs, plan.new_calls, plan.calls.cached_calls) == (6, 6, 0) and plan.calls.prompt_tokens > 0
    assert "6 call(s) to questioner" in plan.line() and "price unknown" in plan.line() and "$0" not in plan.line()
    assert plan.out == ws / "generated" / "corpus.questions.jsonl" and "writes " + str(plan.out) in plan.line()
    ticks = []

    class Bar:
        def update(self, n=1):
            ticks.append(n)

    path, line = generating.generate_for_page(sess, client, 6, ["single", "multi"], 3, plan.out, progress=Bar())
    assert Handler.calls - calls == 6 and sum(ticks) == 6
    assert "remembered as this folder's questions" in line and "price unknown" in line
    page_rows = [json.loads(x) for x in path.read_text().splitlines()]
    cli_out = tmp_path / "cli.jsonl"
    assert _gen(corpus, tmp_path / "ws2", server, "questioner", cli_out, "--n", "6", "--types", "single,multi",
                "--seed", "3") == 0
    cli_rows = [json.loads(x) for x in cli_out.read_text().splitlines()]
    assert [(r["id"], r["question"], r["evidence"]) for r in page_rows] == \
        [(r["id"], r["question"], r["evidence"]) for r in cli_rows] and len(page_rows) >= 4
    again = interactive.open_session(str(corpus), str(ws), "hash")  # the page reloaded: the remembered questions
    assert [q.qid for q in again.dataset.questions] == [r["id"] for r in page_rows]
    plan2 = generating.generate_plan(again, client, 6, ["single", "multi"], seed=3)
    assert (plan2.new_calls, plan2.calls.cached_calls, plan2.replaces) == (0, 6, len(page_rows))
    assert f"replacing its {len(page_rows)} line(s)" in plan2.line()


def test_generate_on_a_terminal_waits_for_a_yes_after_its_cost_line(corpus, server, tmp_path):
    """On a terminal `ragwb generate` shows the cost line and asks; "n" sends nothing and writes nothing, "y"
    sends exactly the calls it counted. A real pseudo-terminal, a real server; each step waits on what the
    command prints (a deadline, no sleep)."""
    from pty_helper import answer_prompt

    def run(answer: str, out):
        return answer_prompt(["generate", str(corpus), "--workspace", str(tmp_path / "ws"), "--embedder", "hash",
                              "--no-progress", "--llm-base-url", server, "--llm-model", "questioner", "--llm-key-env",
                              "RAGWB_TEST_KEY", "--out", str(out), "--n", "4"], answer, lambda: Handler.calls)

    calls = Handler.calls
    code, said, at_prompt = run("n", tmp_path / "no.jsonl")
    assert code == 0 and "ragwb generate: 4 passage(s) to ask about; 4 call(s) to questioner" in said, said
    assert "Send 4 call(s)? [y/N]" in said and "nothing sent" in said
    assert Handler.calls == calls == at_prompt and not (tmp_path / "no.jsonl").exists()
    code, said, at_prompt = run("y", tmp_path / "yes.jsonl")
    assert code == 0 and at_prompt == calls and Handler.calls - calls == 4, said
    assert len((tmp_path / "yes.jsonl").read_text().splitlines()) >= 3


def test_the_cost_line_counts_the_prompts_in_the_language_asked(corpus, server, tmp_path, capsys):
    """`--language el` changes every prompt: the cost line looks those prompts up in the response cache (a rerun
    says 0 new calls, and sends none), never the auto-language ones; the page's Generate takes the language and
    --max-overlap as the CLI does."""
    from evals.workbench import calls as interactive
    from evals.workbench import generating
    from rag.llm.client import LLMConfig

    ws = tmp_path / "ws"
    argv = ["--n", "4", "--language", "el", "--seed", "1"]
    assert _gen(corpus, ws, server, "questioner", tmp_path / "el.jsonl", *argv) == 0
    assert "4 call(s) to questioner" in capsys.readouterr().out.splitlines()[0]
    calls = Handler.calls
    assert _gen(corpus, ws, server, "questioner", tmp_path / "el2.jsonl", *argv) == 0
    assert "0 call(s) to questioner" in capsys.readouterr().out.splitlines()[0] and Handler.calls == calls
    assert {json.loads(x)["language"] for x in (tmp_path / "el2.jsonl").read_text().splitlines()} == {"el"}
    sess = interactive.open_session(str(corpus), str(ws), "hash")
    client = generating.generator_client(sess, LLMConfig(server, "questioner", "RAGWB_TEST_KEY"))
    assert generating.generate_plan(sess, client, 4, ["single"], 1, tmp_path / "p.jsonl", "el").new_calls == 0
    assert generating.generate_plan(sess, client, 4, ["single"], 1, tmp_path / "p.jsonl").new_calls == 4  # auto
    path, line = generating.generate_for_page(sess, client, 4, ["single"], 1, tmp_path / "p.jsonl", language="el")
    assert Handler.calls == calls and len(path.read_text().splitlines()) == 4  # every call served by the cache
    copier = generating.generator_client(sess, LLMConfig(server, "questioner", "RAGWB_TEST_KEY"), "questioner-copy")
    with pytest.raises(ValueError, match=r"no question survived .*copies the passage \(--max-overlap\): 4"):
        generating.generate_for_page(sess, copier, 4, ["single"], 1, tmp_path / "c.jsonl", max_overlap=3)
    assert not (tmp_path / "c.jsonl").exists()
    path, line = generating.generate_for_page(sess, copier, 4, ["single"], 1, tmp_path / "c.jsonl")  # 0: kept, flagged
    assert "flagged lexical (shares >= 6 words in a row): 4" in line and len(path.read_text().splitlines()) == 4
