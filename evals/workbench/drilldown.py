"""The workbench's drill-down: one question under one or two points, as safe HTML (corpus text and answers are
escaped, never executed): gold evidence and the answer's cited sentences marked in the blocks, one metric table for
both points so their rows line up."""
from __future__ import annotations

import json
import re

from rag.models import Evidence, gold_text
from rag.strategies import Block
from rag.strategies.packing import cut_marker

from ..score.metrics import block_holds
from .session import Session, item_for
from rag.safeio import html_body  # one escaping rule for what pages show (issue 82)

def _highlight(text: str, block: dict, evidence: list, cited: list[str] | None = None) -> str:
    """Escape the block text; mark the gold evidence spans that fall inside it (<mark>) and the
    answer's sentences that cite this block where the block holds them (<mark class='cite'>)."""
    marks = []
    for doc, start, end in block["spans"][:1]:
        for ev in evidence:
            if ev.get("doc_id") == doc and ev.get("start") is not None and start <= ev["start"] and ev["end"] <= end:
                marks.append((ev["start"] - start, ev["end"] - start, "gold"))
    for sent in cited or []:
        for cand in (sent, sent.rstrip(".!?;: ")):
            i = text.find(cand) if len(cand) >= 8 else -1
            if i >= 0:
                marks.append((i, i + len(cand), "cite"))
                break
    out, pos = [], 0
    for s, e, kind in sorted(marks):
        if s < pos:
            continue
        tag = "<mark>" if kind == "gold" else "<mark class='cite' style='background:#cde4ff'>"
        out += [html_body(text[pos:s]), tag, html_body(text[s:e]), "</mark>"]
        pos = e
    out.append(html_body(text[pos:]))
    return "".join(out)


def _cited_sentences(answer: str) -> dict[int, list[str]]:
    """block number -> the answer's sentences (citations stripped) that cite it."""
    from rag.answer.answerers import split_sentences
    from rag.answer.prompts import strip_citations

    out: dict[int, list[str]] = {}
    for sent in split_sentences(answer or ""):
        for n in re.findall(r"\[(\d+)\]", sent):
            out.setdefault(int(n), []).append(strip_citations(sent).strip())
    return out


_CELL = "padding:2px 10px;border-bottom:1px solid #ddd;"  # inline: the notebook page has no report CSS


def _fmt_value(metric: str, v) -> str:
    """Token counts and other whole numbers as integers (873, not 873.000); scores with 3 decimals."""
    if v is None:
        return ""
    if metric.endswith("tokens") or metric.endswith("_count") or float(v).is_integer() and abs(v) >= 2:
        return f"{v:,.0f}"
    return f"{v:.3f}"


def drilldown_html(question, row: dict, scores: dict, point: str | None = None, anchor: str = "blk",
                   metrics: bool = True) -> str:
    """Question, gold, the answer with citations linked to blocks, a formatted metric table (value,
    status, reason or judge explanation; left out with ``metrics=False``, where a side-by-side view draws one
    table for both points), and the blocks with their token counts: gold evidence highlighted, the answer's
    cited sentences highlighted in the blocks they cite."""
    blocks = json.loads(row["blocks"]) if isinstance(row["blocks"], str) else row["blocks"]
    # evidence is marked unless the gold says there is no answer (unknown answerability keeps its evidence)
    evidence = ([e.__dict__ if hasattr(e, "__dict__") else e for e in question.evidence]
                if question.answerable is not False else [])
    held = {b["n"] for b in blocks if any(block_holds(Block.from_dict(b), Evidence(**ev)) for ev in evidence)}
    ans = html_body(row["answer"] or "")
    ans = re.sub(r"\[(\d+)\]", lambda m: f"<a href='#{anchor}-{m.group(1)}'>[{m.group(1)}]</a>", ans)
    cited = _cited_sentences(row["answer"] or "")
    total = sum(b["n_tokens"] for b in blocks)
    parts = [f"<p class='point'><b>showing: {html_body(point or row.get('point_label', ''))}</b></p>" if point else "",
             f"<h3>{html_body(question.text)}</h3>",
             f"<p>gold: {html_body(gold_text(question.answers, question.answerable))}</p>",
             f"<p>answer ({html_body(row['answer_status'])}): {ans}</p>"]
    fa = scores.get("faithfulness")
    if row["answer"] and fa is not None and fa.status == "ok":  # an answer in its own words: each sentence checked
        parts.append(sentence_support_html(question, row["answer"], blocks))
    if metrics:
        parts.append(_metric_table([scores], [None]))
    parts.append(f"<p>{len(blocks)} blocks, {total} tokens</p><ol>")
    for b in blocks:
        tag = " <b>(holds gold evidence)</b>" if b["n"] in held else ""
        if b.get("truncated"):  # a block cut short says so, with how much it shows
            tag += f" <i>{html_body(cut_marker(Block.from_dict(b)).strip())}</i>"
        parts.append(f"<li id='{anchor}-{b['n']}'><b>[{b['n']}]</b> <code>{html_body(', '.join(b['page_ids'][:1] or b['doc_ids']))}</code>"
                     f" {b['n_tokens']} tokens{tag}<pre style='white-space:pre-wrap'>"
                     f"{_highlight(b['text'], b, evidence, cited.get(b['n']))}</pre></li>")
    parts.append("</ol>")
    return "".join(parts)


def _metric_table(score_sets: list[dict], names: list[str | None]) -> str:
    """One metric per row: value, status and reason (or judge explanation) of each point, side by side, so the
    rows of two points line up (a metric one point lacks is an empty cell, never a shifted row)."""
    def head(h, name):
        return f"<th style='{_CELL}text-align:left'>{html_body(h + (f' ({name})' if name else ''))}</th>"

    heads = ["<th style='{0}text-align:left'>metric</th>".format(_CELL)]
    for name in names:
        heads += [head("value", name), head("status", name), head("reason / explanation", name)]
    rows = []
    for k in sorted(set().union(*[set(sc) for sc in score_sets])):
        cells = [f"<td style='{_CELL}'>{html_body(k)}</td>"]
        for sc in score_sets:
            v = sc.get(k)
            cells += ([f"<td style='{_CELL}text-align:right'>{_fmt_value(k, v.value)}</td>",
                       f"<td style='{_CELL}'>{html_body(v.status)}</td>",
                       f"<td style='{_CELL}'>{html_body((v.detail or '')[:400])}</td>"] if v is not None
                      else [f"<td style='{_CELL}'></td>"] * 3)
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return ("<table class='tbl' style='border-collapse:collapse'><tr>" + "".join(heads) + "</tr>"
            + "".join(rows) + "</table>")


def side_by_side_html(sess: Session, qid: str, a: str, b: str | None = None) -> str:
    """One question under two points, side by side (or one, when ``b`` is None or equal)."""
    q = next((x for x in sess.dataset.questions if x.qid == qid), None)
    if q is None:
        return "<p>pick a question</p>"
    points = [a] + ([b] if b and b != a else [])
    items = [item_for(sess, p, qid) for p in points]
    # two points: one metric table for both above the two answers, so its rows line up (two tables side by side
    # drifted apart as soon as one answer wrapped longer or one point lacked a metric)
    joint = len(points) == 2 and all(items)
    cols = []
    for i, (p, item) in enumerate(zip(points, items)):
        cols.append(f"<div style='flex:1;min-width:0'>"
                    f"{drilldown_html(q, *item, point=p, anchor=f'blk{i}', metrics=not joint)}</div>"
                    if item else f"<div style='flex:1'><p>{html_body(p)}: not evaluated for this question</p></div>")
    table = (_metric_table([it[1] for it in items], ["A", "B"]) + "<p><small>A: " + html_body(points[0])
             + " · B: " + html_body(points[1]) + "</small></p>") if joint else ""
    return table + "<div style='display:flex;gap:1.5em;align-items:flex-start'>" + "".join(cols) + "</div>"




def sentence_support_html(question, answer: str, blocks: list[dict]) -> str:
    """Each answer sentence, the blocks it cites and whether they support it (the offline support scorer, its
    threshold; the same call the faithfulness metric makes, memoised): the drill-down of faithfulness."""
    from rag.answer.answerers import split_sentences
    from rag.answer.prompts import parse_citations, strip_citations

    from ..score.metrics import support_score
    from ..score.support import support_embedder, threshold

    by_n = {b["n"]: b for b in blocks}
    thr, embed = threshold(), support_embedder()
    rows = []
    for sent in split_sentences(answer):
        cited = [c for c in dict.fromkeys(parse_citations(sent)) if c in by_n]
        if not cited:
            verdict, colour = "no valid citation (unsupported)", "#fde2e2"
        else:
            p = support_score(strip_citations(sent), [by_n[c]["text"] for c in cited], question.language, embed)
            ok = p >= thr
            verdict, colour = (f"supported ({p:.2f} >= {thr:.2f})" if ok else f"not supported ({p:.2f} < {thr:.2f})",
                               "#e2f5e2" if ok else "#fde2e2")
        rows.append(f"<tr style='background:{colour}'><td style='{_CELL}'>{html_body(sent)}</td>"
                    f"<td style='{_CELL}'>{', '.join(f'[{c}]' for c in cited) or '-'}</td>"
                    f"<td style='{_CELL}'>{verdict}</td></tr>")
    return ("<table class='tbl' style='border-collapse:collapse'><tr><th style='" + _CELL + "text-align:left'>answer "
            "sentence</th><th style='" + _CELL + "text-align:left'>cites</th><th style='" + _CELL + "text-align:left'>"
            "offline support scorer</th></tr>" + "".join(rows) + "</table>")
