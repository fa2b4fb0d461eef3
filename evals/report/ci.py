"""What `ragwb gate` says to a CI system (docs/gate.md): JUnit XML (GitLab's test reports, Jenkins, Azure DevOps,
CircleCI and the GitHub test-report actions read it), the GitHub step summary and ``::error``/``::warning``
annotations (only inside GitHub Actions), and a pull-request comment body. All of them are the gate's one result
(``evals.analyze.gate.gate``), written as each consumer reads it."""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

COMMENT_MAX = 65_000  # GitHub's limit on a comment body is 65,536 characters
EXIT_CODES = {0: "passed", 1: "a regression, a budget exceeded, or a --require rule unmet", 2: "a usage error (a flag, a file, a run id)",
              3: "the runs are not comparable (other datasets, other questions, candidate points without a baseline)"}
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # not allowed in XML 1.0 at all


def check_out_path(path: str | None, flag: str) -> Path | None:
    """An output file a CI step names, checked before the gate runs: a folder, a link, or a folder that is missing
    or not writable is a ValueError in one line naming the flag (exit 2)."""
    if not path:
        return None
    p = Path(path)
    if p.is_symlink():
        raise ValueError(f"{flag} {p}: a link; the gate writes a plain file and never follows a link")
    if p.is_dir():
        raise ValueError(f"{flag} {p}: a folder; name a file in it (e.g. {p / 'gate.xml'})")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{flag} {p}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{flag} {p}: the folder {parent} cannot be written")
    return p


def write_text(path: Path, text: str) -> None:
    """The file whole, never through a link (rag/safeio.write_whole)."""
    from rag.safeio import write_whole

    write_whole(path, text.encode("utf-8"))


def _x(text) -> str:
    return _XML_BAD.sub("\ufffd", str(text))


def _fmt(v) -> str:
    try:
        return f"{float(v):+.4f}"
    except (TypeError, ValueError):
        return str(v)


def junit_xml(res: dict, base: str, cand: str, commit: str | None = None) -> str:
    """JUnit XML: a ``testsuite`` per strategy x point, a ``testcase`` per metric (and per budget); a regression or
    an exceeded budget is a ``failure`` with the delta, the interval, the tolerance and the reason; a metric left out
    (judged gap, index difference) is ``skipped`` with why; what fails before any metric (other questions, lost
    items) is a ``testcase`` of its own suite, ``comparable``. The runs, the commit, the index difference and the
    exit code's meaning are properties."""
    suites: dict[tuple, list] = {}
    for r in res["rows"]:
        suites.setdefault((r["strategy"], r["point"]), []).append(("metric", r))
    for b in res.get("budgets", []):
        suites.setdefault((b["strategy"], b["point"]), []).append(("budget", b))
    for q in res.get("requires", []):  # --require K/N: a testcase per rule and metric, its failing questions named
        suites.setdefault((q["strategy"], q["point"]), []).append(("require", q))
    root = ET.Element("testsuites", name="ragwb gate")
    props = {"baseline": base, "candidate": cand, "commit": commit or "", "passed": str(res["passed"]).lower(),
             "index_difference": res.get("index_difference") or "", "exit_code": str(res.get("exit_code", 0)),
             "exit_codes": "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items())}
    pre = ET.Element("testsuite", name="comparable")
    _props(pre, props)
    pre_cases = [("runs are comparable", res.get("not_comparable", [])),
                 ("no point lost too many items", [f for f in res["failures"] if "of its items (cap" in f])]
    for name, why in pre_cases:
        case = ET.SubElement(pre, "testcase", name=name, classname="ragwb.gate", time="0")
        if why:
            ET.SubElement(case, "failure", message=_x(why[0][:500]), type="not_comparable" if
                          name.startswith("runs") else "lost_items").text = _x("\n".join(why))
    _counts(pre)
    root.append(pre)
    warn_of = {}
    for w in res.get("warnings", []):
        m = re.match(r"(\S+) \[([^\]]*)\]: ", w)
        if m:
            warn_of.setdefault((m.group(1), m.group(2)), []).append(w)
    for (strategy, point), cases in suites.items():
        suite = ET.SubElement(root, "testsuite", name=_x(f"{strategy} [{point}]"))
        _props(suite, {"strategy": strategy, "point": point, "baseline": base, "candidate": cand})
        for kind, r in cases:
            if kind == "metric":
                case = ET.SubElement(suite, "testcase", name=_x(r["metric"]), classname=_x(f"{strategy}.{point}"),
                                     time="0")
                detail = (f"{r['metric']}: baseline {r['baseline']:.4f}, candidate {r['candidate']:.4f}, delta "
                          f"{_fmt(r['delta'])} (95% CI {_fmt(r['low'])} .. {_fmt(r['high'])}) on {r.get('n', '?')} "
                          f"questions; tolerance {r['tolerance']:.4f} ({r.get('tolerance_from', 'default')}); "
                          f"{r['direction']} is better; verdict {r['verdict']}")
                if r["verdict"] == "REGRESSION":
                    ET.SubElement(case, "failure", message=_x(f"regression beyond tolerance: {detail}"),
                                  type="regression").text = _x(detail)
                elif r["verdict"].startswith("changed"):
                    ET.SubElement(case, "skipped", message=_x(f"not gated: {r['verdict']}: {detail}"))
                else:
                    ET.SubElement(case, "system-out").text = _x(detail)
            elif kind == "require":
                from evals.analyze.judge_repeats import require_line

                case = ET.SubElement(suite, "testcase", name=_x(f"require {r['metric']} {r['rule']}"),
                                     classname=_x(f"{strategy}.{point}"), time="0")
                if r["verdict"] != "met":
                    ET.SubElement(case, "failure", message=_x(require_line(r)[:500]),
                                  type="require").text = _x(require_line(r))
                else:
                    ET.SubElement(case, "system-out").text = _x(require_line(r))
            else:
                case = ET.SubElement(suite, "testcase", name=_x(f"budget {r['metric']} {r['kind']} {r['limit']:g}"),
                                     classname=_x(f"{strategy}.{point}"), time="0")
                if r["verdict"] == "OVER BUDGET":
                    ET.SubElement(case, "failure", message=_x(budget_text(r)), type="budget").text = _x(budget_text(r))
                else:
                    ET.SubElement(case, "system-out").text = _x(budget_text(r))
        for w in warn_of.get((strategy, point), []):  # judged metrics left out: skipped, with why
            case = ET.SubElement(suite, "testcase", name="judged metrics", classname=_x(f"{strategy}.{point}"),
                                 time="0")
            ET.SubElement(case, "skipped", message=_x(w))
        _counts(suite)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, 0)) for s in root)))
    root.set("time", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _props(suite: ET.Element, props: dict) -> None:
    el = ET.SubElement(suite, "properties")
    for k, v in props.items():
        ET.SubElement(el, "property", name=k, value=_x(v))


def _counts(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", "0")
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("time", "0")


def budget_text(b: dict) -> str:
    from evals.analyze.gate import budget_line

    return budget_line(b)


def _md(text) -> str:
    """A cell of a Markdown table: pipes and line breaks escaped, HTML shown as text."""
    import html

    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def _row(r: dict) -> str:
    return (f"| {_md(r['strategy'])} | {_md(r['point'])} | {_md(r['metric'])} | {r.get('n', '')} | "
            f"{r['baseline']:.4f} | {r['candidate']:.4f} | {_fmt(r['delta'])} | [{_fmt(r['low'])}, {_fmt(r['high'])}] "
            f"| {r['tolerance']:.4f} ({_md(r.get('tolerance_from', 'default'))}) | {r['verdict']} |")


HEADER = ["| strategy | point | metric | n | baseline | candidate | delta | 95% CI | tolerance (from) | verdict |",
          "|---|---|---|---:|---:|---:|---:|---|---|---|"]


def verdict_line(res: dict, base: str, cand: str) -> str:
    code = res.get("exit_code", 0 if res["passed"] else 1)
    word = {0: "PASSED", 1: "FAILED", 3: "NOT COMPARABLE"}.get(code, "FAILED")
    bad = sum(1 for r in res["rows"] if r["verdict"] == "REGRESSION")
    over = sum(1 for b in res.get("budgets", []) if b["verdict"] == "OVER BUDGET")
    return (f"**ragwb gate: {word}** (exit {code}): candidate `{_md(cand)}` vs baseline `{_md(base)}`; "
            f"{bad} regression(s), {over} budget(s) exceeded, {len(res['rows'])} metric row(s) on "
            f"{res.get('coverage', {}).get('questions_compared', '?')} shared questions")


def step_summary(res: dict, base: str, cand: str) -> str:
    """The GitHub step summary: the verdict line first, then what failed, then every row in a collapsed block."""
    lines = [verdict_line(res, base, cand), ""]
    if res.get("index_difference"):
        lines += [f"_{_md(res['index_difference'])}_", ""]
    fails = [r for r in res["rows"] if r["verdict"] == "REGRESSION"]
    before = _before_metrics(res)
    if before:
        lines += [f"- {_md(f)}" for f in before] + [""]
    if fails:
        lines += ["#### Regressions", ""] + HEADER + [_row(r) for r in fails] + [""]
    over = [b for b in res.get("budgets", []) if b["verdict"] == "OVER BUDGET"]
    if over:
        lines += ["#### Budgets exceeded", ""] + [f"- {_md(budget_text(b))}" for b in over] + [""]
    if res.get("warnings"):
        lines += ["#### Not compared", ""] + [f"- {_md(w)}" for w in res["warnings"]] + [""]
    rest = [r for r in res["rows"] if r["verdict"] != "REGRESSION"]
    if rest or res.get("budgets"):
        lines += [f"<details><summary>every other row ({len(rest)} metrics, {len(res.get('budgets', []))} budgets)"
                  "</summary>", ""] + HEADER + [_row(r) for r in rest] + [""]
        lines += [f"- {_md(budget_text(b))}" for b in res.get("budgets", []) if b["verdict"] != "OVER BUDGET"]
        lines += ["", "</details>", ""]
    return "\n".join(lines) + "\n"


def _before_metrics(res: dict) -> list[str]:
    """The failures that are neither a metric row nor a budget: other questions, lost items."""
    return [f for f in res["failures"] if " beyond tolerance " not in f and "against a budget of" not in f]


def _prop(text: str) -> str:
    """A workflow command's property value (title=...): %, CR, LF, ':' and ',' escaped as the runner reads them."""
    return (str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A").replace(":", "%3A")
            .replace(",", "%2C"))


def _data(text: str) -> str:
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def annotations(res: dict) -> list[str]:
    """``::error`` per failing metric or budget and per failure before any metric; ``::warning`` per left-out one."""
    out = []
    for r in res["rows"]:
        where = f"{r['strategy']} [{r['point']}] {r['metric']}"
        if r["verdict"] == "REGRESSION":
            title = f"ragwb gate: {r['metric']} regressed ({r['strategy']} {r['point']})"
            out.append(f"::error title={_prop(title)}::{_data(where)}: delta {_fmt(r['delta'])} (95% CI "
                       f"{_fmt(r['low'])} .. {_fmt(r['high'])}) beyond tolerance {r['tolerance']:.4f}")
        elif r["verdict"].startswith("changed"):
            title = f"ragwb gate: {r['metric']} not gated"
            out.append(f"::warning title={_prop(title)}::{_data(where)}: {_data(r['verdict'])}")
    for b in res.get("budgets", []):
        if b["verdict"] == "OVER BUDGET":
            title = f"ragwb gate: {b['metric']} {'over its budget' if b['kind'] == 'max' else 'under its floor'}"
            out.append(f"::error title={_prop(title)}::{_data(budget_text(b))}")
    for f in _before_metrics(res):  # what failed before any metric (other questions, lost items)
        out.append(f"::error title={_prop('ragwb gate')}::{_data(f)}")
    for w in res.get("warnings", []):
        out.append(f"::warning title={_prop('ragwb gate: not compared')}::{_data(w)}")
    return out


def comment(res: dict, base: str, cand: str, report_url: str | None = None) -> str:
    """A pull-request comment body (at most ``COMMENT_MAX`` characters): the verdict first, the failing rows, and a
    line that links the report artifact."""
    lines = [verdict_line(res, base, cand), ""]
    fails = [r for r in res["rows"] if r["verdict"] == "REGRESSION"]
    if fails:
        lines += HEADER + [_row(r) for r in fails] + [""]
    for b in res.get("budgets", []):
        if b["verdict"] == "OVER BUDGET":
            lines.append(f"- {_md(budget_text(b))}")
    lines += [f"- {_md(f)}" for f in _before_metrics(res)]
    lines += ["", f"The HTML report: {report_url}" if report_url else
              "The HTML report is the run's artifact (`ragwb report CANDIDATE`; the workflow uploads it)."]
    body = "\n".join(lines) + "\n"
    if len(body) > COMMENT_MAX:
        cut = "\n\n(cut at 65,000 characters: the step summary and the JUnit file have every row)\n"
        body = body[:COMMENT_MAX - len(cut)].rsplit("\n", 1)[0] + cut
    return body


def github_outputs(res: dict, base: str, cand: str, env: dict | None = None, out=None) -> None:
    """Inside GitHub Actions only (``GITHUB_ACTIONS=true``): the annotations on stdout; and where
    ``GITHUB_STEP_SUMMARY`` names a file, the step summary appended to it. Outside Actions: nothing."""
    import sys

    env = os.environ if env is None else env
    out = out or sys.stdout
    if env.get("GITHUB_ACTIONS") == "true":
        for line in annotations(res):
            print(line, file=out)
    summary = env.get("GITHUB_STEP_SUMMARY")
    if summary and env.get("GITHUB_ACTIONS") == "true":
        with open(summary, "a", encoding="utf-8") as f:  # the runner's own file: appended, as every step does
            f.write(step_summary(res, base, cand))
