"""An LLM relevance judge for pooled passages, after UMBRELA (Upadhyay et al. 2024): a fixed 0-3 rubric,
one call per (question, passage) pair, the grade read from a ``##final score: N`` line.

Calls go through ``LLMClient`` (cache keyed on endpoint, model and messages; retries with backoff; the
concurrency limit; token and dollar counts; secrets scrubbed from every error kept). A reply with no
readable grade is ``parse_error`` and a failed call ``error``: both are stored with their reason, never as a
grade, and are asked again the next time the pool is judged.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from rag.llm.urls import redact_url, scrub_cut
from rag.llm.client import LLMClient, structured_format

PROMPT_VERSION = "umbrela-0-3/1"
MAX_PASSAGE_CHARS = 8_000  # a pooled block is a chunk, a page or a document: the judge sees at most this much

RUBRIC = """Grade how relevant a passage is to a search query, on an integer scale from 0 to 3:
0 = the passage has nothing to do with the query;
1 = the passage is related to the query's topic but does not answer it;
2 = the passage answers the query in part, or the answer is unclear or buried among other information;
3 = the passage is about the query and holds the exact answer.

Query: {query}
Passage: {passage}

Think about what the person searching most likely wants, how well the passage matches that intent (M) and how
trustworthy it is (T); weigh them and decide a final grade (O), an integer from 0 to 3.
Reply with one line in the format ##final score: N and no reasoning."""

_JSON = re.compile(r'"grade"\s*:\s*"?([0-3])\b')
_FINAL = re.compile(r"final\s*score\s*[:=]?\s*\**\s*([0-3])\b", re.I)
_LONE = re.compile(r"^\s*\**\s*([0-3])\s*\**\s*\.?\s*$")


def parse_grade(text: str | None) -> int | None:
    """The grade of a judge's reply: ``{"grade": N}``, else the last ``final score: N`` (N in 0-3), else a reply
    that is only the digit."""
    if not text:
        return None
    j = _JSON.search(text)  # the structured reply (--judge-format json_schema): {"grade": N}
    if j:
        return int(j.group(1))
    found = _FINAL.findall(text)
    if found:
        return int(found[-1])
    m = _LONE.match(text)
    return int(m.group(1)) if m else None


def messages_for(question: str, passage: str) -> list[dict]:
    cut = passage[:MAX_PASSAGE_CHARS]
    return [{"role": "user", "content": RUBRIC.format(query=question.strip(), passage=cut.strip())}]


def grade_format(client: LLMClient) -> dict:
    """The request's structured-output parameters: the server constrains the reply to one grade, what small
    models need (Gemma 270M echoes the rubric without)."""
    return structured_format(client.cfg.response_format, "grade", {
        "type": "object", "additionalProperties": False, "required": ["grade"],
        "properties": {"grade": {"type": "integer", "enum": list(range(4))}}})


def judge_pairs(client: LLMClient, pairs: list[dict], progress=None) -> list[dict]:
    """Grade each pair ({question_key, passage_key, question_id, question, text}); returns judgment rows for
    ``ResultStore.add_judgments`` (judge ``llm:MODEL``), one per pair, in order, failures included."""
    judge = f"llm:{client.cfg.model}"
    extra = grade_format(client)

    def one(p: dict) -> dict:
        row = {k: p[k] for k in ("question_key", "passage_key", "question_id", "question", "text")}
        row["judge"] = judge
        try:
            res = client.chat(messages_for(p["question"], p["text"]), purpose="relevance_judge", **extra)
        except Exception as e:  # noqa: BLE001 - one pair's failure is stored with its reason; the rest go on
            return {**row, "grade": None, "status": "error",
                    "detail": scrub_cut(f"{redact_url(client.cfg.base_url)}: question {p['question_id']} passage "
                                        f"{p['passage_key']}: {type(e).__name__}: {e}", 500, client.secrets)}
        if res.status != "ok":
            return {**row, "grade": None, "status": "error", "detail": f"{res.status}: {res.error}"[:500]}
        g = parse_grade(res.text)
        if g is None:
            return {**row, "grade": None, "status": "parse_error",
                    "detail": f"no grade 0-3 in the reply: {(res.text or '')[:200]!r}"}
        cut = len(p["text"]) > MAX_PASSAGE_CHARS
        return {**row, "grade": g, "status": "ok",
                "detail": f"{PROMPT_VERSION}" + (f"; passage cut to {MAX_PASSAGE_CHARS} characters" if cut else "")}

    out: list[dict | None] = [None] * len(pairs)
    with ThreadPoolExecutor(max_workers=client.cfg.max_concurrency) as ex:
        for i, row in zip(range(len(pairs)), ex.map(one, pairs)):
            out[i] = row
            if progress is not None:
                progress.update(1)
    return out  # type: ignore[return-value]
