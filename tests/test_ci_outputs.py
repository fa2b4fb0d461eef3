"""`ragwb gate` as CI systems read it (issue 84): JUnit XML read back by a JUnit parser and held to the JUnit schema's
rules, the GitHub step summary and annotations under the runner's variables (and absent outside it), a pull-request
comment body, absolute budgets, and distinct exit codes, on real runs (one baseline made to regress by raising its
stored f1: the gate then fails on a real candidate)."""
import json
import re
import xml.etree.ElementTree as ET

import pytest

from evals.cli import main
from evals.report import ci

RUN = ["run", "--dataset", "squad2", "--embedder", "hash", "--no-progress", "--no-report", "--strategies", "chunks",
       "--set", "chunks.top_k=2,4"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    ws = tmp_path_factory.mktemp("ci")
    assert main([*RUN, "--limit", "40", "--workspace", str(ws), "--run-id", "B"]) == 0
    assert main([*RUN, "--limit", "40", "--workspace", str(ws), "--run-id", "SMALL", "--chunk-tokens", "64"]) == 0
    assert main([*RUN, "--limit", "30", "--workspace", str(ws), "--run-id", "FEWER"]) == 0
    base = ws / "base.json"
    assert main(["gate", "--candidate", "B", "--write-baseline", str(base), "--workspace", str(ws)]) == 0
    # a baseline whose top_k=2 answered every question perfectly: the real candidate B regresses against it
    d = json.loads(base.read_text())
    for r in d["rows"]:
        if r["metric"] == "f1" and r["point_label"] == "top_k=2":
            r["value"], r["status"] = 1.0, "ok"
    high = ws / "high.json"
    high.write_text(json.dumps(d))
    return ws, high


def _schema_problems(root: ET.Element) -> list[str]:
    """The JUnit XML rules Jenkins' and GitLab's readers document, checked by hand: a ``testsuites`` root holding
    ``testsuite`` elements; a suite's required ``tests`` and its counts equal to its cases; a case's required
    ``name``; ``failure``/``skipped``/``error`` only inside a case; a property's required name and value."""
    bad = []
    if root.tag != "testsuites":
        bad.append(f"root is {root.tag}")
    for suite in root:
        if suite.tag != "testsuite":
            bad.append(f"child of testsuites: {suite.tag}")
            continue
        cases = suite.findall("testcase")
        for attr, want in (("tests", len(cases)), ("failures", sum(c.find("failure") is not None for c in cases)),
                           ("skipped", sum(c.find("skipped") is not None for c in cases))):
            if suite.get(attr) != str(want):
                bad.append(f"{suite.get('name')}: {attr}={suite.get(attr)} for {want}")
        for el in suite:
            if el.tag not in ("testcase", "properties", "system-out", "system-err", "testsuite"):
                bad.append(f"{suite.get('name')}: {el.tag} in a testsuite")
        for p in suite.iter("property"):
            if p.get("name") is None or p.get("value") is None:
                bad.append("a property without name or value")
        for c in cases:
            if not c.get("name"):
                bad.append("a testcase without a name")
            for el in c:
                if el.tag not in ("failure", "skipped", "error", "system-out", "system-err"):
                    bad.append(f"{el.tag} in a testcase")
    return bad


def test_junit_is_schema_shaped_and_a_parser_reads_the_regression_and_the_budget(runs, tmp_path):
    from junitparser import Failure, JUnitXml, Skipped

    ws, high = runs
    out = tmp_path / "gate.xml"
    code = main(["gate", "--baseline", str(high), "--candidate", "B", "--workspace", str(ws), "--junit", str(out),
                 "--max", "context_tokens=150", "--metrics", "f1", "context_tokens"])
    assert code == 1
    assert _schema_problems(ET.parse(out).getroot()) == []
    xml = JUnitXml.fromfile(str(out))
    suites = {s.name: s for s in xml}
    assert set(suites) == {"comparable", "chunks [top_k=2]", "chunks [top_k=4]"}
    cases = {c.name: c for c in suites["chunks [top_k=2]"]}
    f1 = [r for r in cases["f1"].result if isinstance(r, Failure)]
    assert f1 and f1[0].type == "regression" and re.search(r"delta -0\.\d{4} \(95% CI -[0-9.]+ \.\. -[0-9.]+\)",
                                                            f1[0].message) and "tolerance 0.0200 (default)" in \
        f1[0].message
    over = {c.name: c for c in suites["chunks [top_k=4]"]}["budget context_tokens max 150"]
    assert [r.type for r in over.result if isinstance(r, Failure)] == ["budget"]
    assert xml.failures == sum(s.failures for s in xml) >= 2 and xml.tests == sum(s.tests for s in xml)
    props = {p.name: p.value for p in suites["comparable"].properties()}
    assert props["baseline"] == str(high) and props["candidate"] == "B" and props["exit_code"] == "1"
    assert "3 the runs are not comparable" in props["exit_codes"]
    # an index difference: the token costs a chunking moves are skipped, with why
    out2 = tmp_path / "index.xml"
    main(["gate", "--baseline", "B", "--candidate", "SMALL", "--workspace", str(ws), "--junit", str(out2)])
    skipped = [c for s in JUnitXml.fromfile(str(out2)) for c in s if any(isinstance(r, Skipped) for r in c.result)]
    assert skipped and all("index differs" in r.message for c in skipped for r in c.result if isinstance(r, Skipped))
    assert _schema_problems(ET.parse(out2).getroot()) == []


def test_github_actions_gets_a_step_summary_and_annotations_and_nothing_outside_it(runs, tmp_path, monkeypatch,
                                                                                    capsys):
    ws, high = runs
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["gate", "--baseline", str(high), "--candidate", "B", "--workspace", str(ws), "--metrics", "f1",
                 "--comment", str(tmp_path / "comment.md"), "--report-url", "https://ci.example/report.html"]) == 1
    out = capsys.readouterr().out
    errors = [x for x in out.splitlines() if x.startswith("::error ")]
    assert len(errors) == 1 and errors[0].startswith("::error title=ragwb gate%3A f1 regressed (chunks top_k=2)::")
    text = summary.read_text()
    assert text.startswith("earlier step\n**ragwb gate: FAILED** (exit 1): candidate `B`")  # appended
    assert text.index("#### Regressions") < text.index("<details>") and "| chunks | top_k=2 | f1 |" in text
    body = (tmp_path / "comment.md").read_text()
    assert body.startswith("**ragwb gate: FAILED**") and "https://ci.example/report.html" in body
    assert len(body) <= ci.COMMENT_MAX
    # outside Actions: no annotation, and the summary file is not touched
    monkeypatch.delenv("GITHUB_ACTIONS")
    before = summary.read_text()
    assert main(["gate", "--baseline", str(high), "--candidate", "B", "--workspace", str(ws), "--metrics", "f1"]) == 1
    assert "::error" not in capsys.readouterr().out and summary.read_text() == before


def test_budgets_fail_pass_or_say_unsure_on_the_candidates_intervals(runs, capsys):
    ws, _ = runs
    assert main(["gate", "--baseline", "B", "--candidate", "B", "--workspace", str(ws), "--max",
                 "context_tokens=100000", "--min", "context_tokens=1"]) == 0
    out = capsys.readouterr().out
    assert out.count(": within") == 4
    assert main(["gate", "--baseline", "B", "--candidate", "B", "--workspace", str(ws), "--min", "f1=0.99"]) == 1
    assert "against a budget of at least 0.99: OVER BUDGET" in capsys.readouterr().out
    # a limit inside a point's interval: neither passed nor failed, said as unsure
    import duckdb

    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    mean = con.execute("SELECT avg(v) FROM (SELECT s.question_id, avg(s.value) v FROM scores s JOIN results r USING "
                       "(run_id, strategy, point_id, question_id, repeat) WHERE s.run_id='B' AND s.metric='f1' AND "
                       "s.status='ok' AND r.point_label='top_k=2' GROUP BY 1)").fetchone()[0]
    con.close()
    assert main(["gate", "--baseline", "B", "--candidate", "B", "--workspace", str(ws), "--max",
                 f"f1={mean:.4f}"]) == 0
    assert re.search(r"chunks \[top_k=2\] f1: mean [0-9.]+ .* against a budget of at most [0-9.]+: unsure",
                     capsys.readouterr().out)


def test_exit_codes_are_distinct_and_in_the_help(runs, tmp_path, capsys):
    ws, _ = runs
    out = tmp_path / "n.xml"
    assert main(["gate", "--baseline", "B", "--candidate", "FEWER", "--workspace", str(ws), "--junit", str(out)]) == 3
    assert "question sets differ" in capsys.readouterr().out
    case = ET.parse(out).getroot().find("testsuite[@name='comparable']/testcase[@name='runs are comparable']")
    assert case.find("failure").get("type") == "not_comparable"
    with pytest.raises(SystemExit):
        main(["gate", "--help"])
    helptext = capsys.readouterr().out
    for line in ("0  passed", "1  a regression", "2  a usage error", "3  the runs are not comparable"):
        assert line in helptext


@pytest.mark.parametrize("flags,said", [
    (["--junit", "{tmp}"], "--junit {tmp}: a folder"),
    (["--junit", "{tmp}/missing/g.xml"], "does not exist"),
    (["--comment", "{tmp}/link.md"], "a link"),
    (["--max", "cost_usd=abc"], "'abc' is not a number"),
    (["--max", "speed=1"], "unknown metric 'speed'"),
    (["--min", "f1"], "--min takes METRIC=VALUE"),
    (["--max", "f1=inf"], "finite"),
])
def test_bad_outputs_and_budgets_are_refused_before_the_gate_runs(runs, tmp_path, capsys, flags, said):
    ws, _ = runs
    (tmp_path / "link.md").symlink_to(tmp_path / "elsewhere.md")
    json_out = tmp_path / "verdict.json"
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    assert main(["gate", "--baseline", "B", "--candidate", "B", "--workspace", str(ws), "--json", str(json_out),
                 *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said.replace("{tmp}", str(tmp_path)) in err[0], err
    assert not json_out.exists() and not (tmp_path / "elsewhere.md").exists()


def test_a_comment_body_is_cut_to_githubs_limit_with_a_note():
    rows = [{"strategy": "chunks", "point": f"top_k={i}", "metric": "f1", "n": 40, "baseline": 0.5, "candidate": 0.4,
             "delta": -0.1, "low": -0.2, "high": -0.05, "tolerance": 0.02, "direction": "higher",
             "verdict": "REGRESSION", "tolerance_from": "default"} for i in range(5000)]
    res = {"passed": False, "failures": ["x beyond tolerance y"] * 5000, "rows": rows, "exit_code": 1,
           "coverage": {"questions_compared": 40}}
    body = ci.comment(res, "B", "C")
    assert len(body) <= ci.COMMENT_MAX and body.rstrip().endswith("every row)")


# GitHub's own look for a step summary's table, near enough to judge the layout: borders, padding, a grey header
GFM_CSS = ("body{font:14px -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;color:#1f2328;max-width:"
           "1000px} table{border-collapse:collapse;margin:8px 0} th,td{border:1px solid #d1d9e0;padding:6px 13px} "
           "th{background:#f6f8fa} code{background:#eff1f3;padding:2px 4px;border-radius:6px} details{margin:8px 0}")


def test_the_step_summary_renders_as_github_shows_it_in_chromium(runs, tmp_path, browser):
    """Issue 84, item 7: the step summary rendered in Chromium as GitHub renders its Markdown (tables, a collapsed
    block): the verdict first, the failing rows as a table, the rest collapsed. RAGWB_DOC_IMAGES=1 writes the
    screenshot docs/gate.md shows (docs/img/gate-step-summary.png)."""
    import os
    from pathlib import Path

    import markdown

    ws, high = runs
    from evals.analyze.gate import per_question, read_baseline, gate
    from evals.store import ResultStore

    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        cand = per_question(st, "B")
    res = gate(read_baseline(high), cand, ["f1", "context_tokens"], resamples=500)
    text = ci.step_summary(res, str(high.name), "B")
    # GitHub renders Markdown inside <details> when blank lines set it apart (the summary does); Python-Markdown
    # does so for a block marked markdown="1"
    page_html = ("<!doctype html><meta charset='utf-8'><style>" + GFM_CSS + "</style>"
                 + markdown.markdown(text.replace("<details>", '<details markdown="1">'),
                                     extensions=["tables", "md_in_html"]))
    f = tmp_path / "summary.html"
    f.write_text(page_html)
    page = browser.new_page(viewport={"width": 1100, "height": 240})  # the summary's own height, full page
    page.goto(f.as_uri())
    page.wait_for_selector("table")
    first = page.evaluate("() => document.body.firstElementChild.innerText")
    assert first.startswith("ragwb gate: FAILED (exit 1)"), first
    tables = page.evaluate("() => [...document.querySelectorAll('table')].map(t => [t.rows.length, "
                           "t.closest('details') !== null])")
    regressions = sum(1 for r in res["rows"] if r["verdict"] == "REGRESSION")
    assert tables[0] == [regressions + 1, False]  # the failing rows, shown, a header above them
    assert tables[-1][1] and tables[-1][0] == len(res["rows"]) - regressions + 1  # the rest, collapsed
    assert page.evaluate("() => document.querySelector('details').open") is False
    shot = tmp_path / "gate-step-summary.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 5000
    if os.environ.get("RAGWB_DOC_IMAGES") == "1":
        import shutil

        shutil.copy(shot, Path(__file__).resolve().parents[1] / "docs" / "img" / "gate-step-summary.png")
    page.close()
