"""Reviewing generated questions before use (docs/generate.md): keep, rewrite, drop; provenance kept."""
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from evals.generate import apply_review, read_generated, review_frame

ROOT = Path(__file__).resolve().parents[1]
ROWS = [{"id": f"gen-{i}", "question": f"Question {i}?", "answers": [f"a{i}"], "answerable": True, "type": "single",
         "evidence": [{"doc": "d.md", "page": 0, "text": f"a{i}"}],
         "metadata": {"generator": {"model": "m", "overlap_words": i,
                                    "passage": f"This is the passage of question {i}: a{i}."}}} for i in range(4)]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_apply_review_keeps_the_chosen_rewrites_and_records_who(tmp_path):
    rows = read_generated(_write(tmp_path / "g.jsonl", ROWS))
    assert list(review_frame(rows).columns) == ["id", "type", "question", "answer", "evidence", "copied_words",
                                              "passage"]
    out = apply_review(rows, ["gen-0", "gen-2", "gen-3"], {"gen-2": "A better question?"}, "ana")
    assert [r["id"] for r in out] == ["gen-0", "gen-2", "gen-3"]
    assert out[1]["question"] == "A better question?" and out[1]["metadata"]["review"]["original"] == "Question 2?"
    assert out[0]["metadata"]["review"]["edited"] is False and out[0]["metadata"]["generator"]["model"] == "m"
    assert rows[2]["question"] == "Question 2?"  # the generated rows themselves are never rewritten
    with pytest.raises(ValueError, match="who reviewed"):
        apply_review(rows, ["gen-0"], {}, " ")
    with pytest.raises(ValueError, match="unknown question id"):
        apply_review(rows, ["gen-0"], {"gen-9": "x"}, "ana")
    (tmp_path / "bad.jsonl").write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(ROWS[0]) + "\n")
    with pytest.raises(ValueError, match="used twice: gen-0"):
        read_generated(tmp_path / "bad.jsonl")
    (tmp_path / "bad2.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="bad2.jsonl line 1: not JSON"):
        read_generated(tmp_path / "bad2.jsonl")


def test_review_notebook_runs_as_a_script_and_writes_nothing_unasked(tmp_path):
    g = _write(tmp_path / "g.jsonl", ROWS)
    p = subprocess.run([sys.executable, str(ROOT / "notebooks" / "review.py"), "--questions", str(g)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert not (tmp_path / "g.accepted.jsonl").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_review_in_chromium_drops_rewrites_and_saves(browser, tmp_path):
    g = _write(tmp_path / "g.jsonl", ROWS)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", "--headless", "--no-token", "--port", str(port),
                             str(ROOT / "notebooks" / "review.py"), "--", "--questions", str(g)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        page = browser.new_page(viewport={"width": 1300, "height": 1600})
        page.goto(url)
        page.wait_for_selector("text=4 generated questions", timeout=60000)
        row = page.locator("tr", has=page.locator("text=Question 1?")).first
        row.get_by_role("checkbox").click()  # drop gen-1
        page.wait_for_selector("text=3 selected", timeout=30000)  # the table's own count: the untick has landed
        page.get_by_role("combobox").first.select_option("gen-3")
        from playwright.sync_api import expect

        area = page.locator("textarea").first  # marimo's elements live in shadow roots: locators see into them
        expect(area).to_have_value("Question 3?", timeout=30000)
        area.fill("Which answer does question three want?")
        area.blur()
        page.get_by_role("button", name="Keep this rewrite").click()
        page.wait_for_selector("text=1 rewrite(s) so far", timeout=30000)
        # the table shows the kept rewrite in place of the generated text, and keeps the untick (issue 52)
        page.locator("td", has_text="Which answer does question three want?").first.wait_for(timeout=30000)
        page.wait_for_selector("text=3 selected", timeout=30000)
        page.get_by_placeholder("your name").fill("ana")
        page.get_by_placeholder("your name").press("Tab")
        page.get_by_role("button", name="Save accepted").click()
        page.wait_for_selector("text=/Saved 3 of 4/", timeout=30000)
        out = [json.loads(x) for x in (tmp_path / "g.accepted.jsonl").read_text().splitlines()]
        assert [r["id"] for r in out] == ["gen-0", "gen-2", "gen-3"]
        assert out[2]["question"] == "Which answer does question three want?"
        assert out[2]["metadata"]["review"] == {**out[2]["metadata"]["review"], "reviewer": "ana", "edited": True,
                                                "original": "Question 3?"}
        # the passage the question was written from is on the page (issue 43, item 6)
        page.wait_for_selector("text=the passage of question 3", timeout=30000)
        # a rewrite typed but not kept with its button is saved by Save, and said
        page.get_by_role("combobox").first.select_option("gen-0")
        expect(area).to_have_value("Question 0?", timeout=30000)
        area.fill("A rewrite nobody kept?")
        area.blur()
        page.wait_for_selector("text=typed for gen-0, not kept yet", timeout=30000)  # the kernel has the typing
        page.get_by_role("button", name="Save accepted").click()
        page.wait_for_selector("text=/including the rewrite of gen-0 typed but not kept/", timeout=30000)
        out = [json.loads(x) for x in (tmp_path / "g.accepted.jsonl").read_text().splitlines()]
        assert out[0]["question"] == "A rewrite nobody kept?" and out[2]["question"].startswith("Which answer")
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_review_never_rewrites_its_input_and_resumes_from_the_accepted_file(tmp_path):
    """Issue 44, item 7 and issue 43, item 6: --out equal to --questions is refused (the notebook shows it); a
    100,000-deep line is an error naming it; a second Save starts from the last accepted file."""
    from evals.generate import pending_edit, resume_review, review_paths

    g = _write(tmp_path / "g.jsonl", ROWS)
    with pytest.raises(ValueError, match="the generated file itself"):
        review_paths(g, tmp_path / "." / "g.jsonl")
    assert review_paths(g, None) == tmp_path / "g.accepted.jsonl"
    p = subprocess.run([sys.executable, str(ROOT / "notebooks" / "review.py"), "--questions", str(g), "--out", str(g)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and g.read_text() == "".join(json.dumps(r) + "\n" for r in ROWS)
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ValueError, match="deep.jsonl line 1: not JSON .*nested deeper"):
        read_generated(deep)
    rows = read_generated(g)
    acc = apply_review(rows, ["gen-1", "gen-3"], {"gen-3": "Better?"}, "bo")
    kept, edits, who = resume_review(rows, acc)
    assert kept == ["gen-1", "gen-3"] and edits == {"gen-3": "Better?"} and who == "bo"
    assert pending_edit({"gen-3": "Better?"}, "gen-1", "Typed?", "Question 1?") == {"gen-3": "Better?", "gen-1": "Typed?"}
    assert pending_edit({}, "gen-1", "Question 1?", "Question 1?") == {}
