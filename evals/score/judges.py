"""LLM judges by name. They cost money, so nothing calls them unless asked (a CLI flag or the
notebook's run button). Every failure is a status, never a dropped row or a NaN."""
from __future__ import annotations

import os
from dataclasses import dataclass

from rag.answer.answerers import split_sentences
from rag.llm.client import LLMClient
from rag.answer.prompts import is_fallback, parse_citations, strip_citations

from .judge_io import (FENCE_RULE, addresses_grader, constrained, fence, fence_key, field_of, flag_note,
                       last_object, next_form_after_refusal, reply_form, verdicts_of)
from .metrics import Score

JUDGES: dict[str, type] = {}


def register_judge(cls):
    JUDGES[cls.name] = cls
    return cls


MAX_JUDGE_CONTEXT_CHARS = 60_000  # a whole bundled document (~25,000 characters) and more fits


def check_ragas() -> None:
    """The ragas judges need the optional extra: one line saying which, before any work (a ValueError)."""
    try:
        import instructor  # noqa: F401
        import ragas.metrics.collections  # noqa: F401
        from ragas.llms.base import InstructorLLM  # noqa: F401
    except ImportError as e:  # not installed, or ragas 0.4.3 + langchain-community >= 0.4: issues #2745 / #2995
        raise ValueError(f"the ragas judges need the ragas extra: pip install -e '.[ragas]' (it pins "
                         f"langchain-community<0.4); {type(e).__name__}: {e}; or choose --judges llm_faithfulness, "
                         "which needs no extra") from None


def get_judge(name: str, client: LLMClient):
    if name not in JUDGES:
        raise KeyError(f"unknown judge {name!r}; valid: {', '.join(JUDGES)}")
    return JUDGES[name](client)


class _ChatJudge:
    """An LLM judge of one chat call: ``request`` builds the call (or says why none is made, as a Score), ``parse``
    reads the reply. The cost lines count calls with the same ``request`` (rag/llm/spend.py, the page's plan), so
    a counted call is exactly the call sent, and a cached one is free."""
    client: LLMClient
    name = score_name = ""  # score_name: the metric it writes (ragas judges keep their metric object in .metric)
    only_without_evidence = False  # True: reads the context only, asked where no gold evidence decides

    def request(self, question: str, answer: str, contexts: list[str]):
        raise NotImplementedError

    def parse(self, text: str | None, note: str) -> Score:
        raise NotImplementedError

    def score(self, question: str, answer: str, contexts: list[str], repeat: int = 0,
              reference: str | None = None) -> Score:
        req = self.request(question, answer, contexts)
        if isinstance(req, Score):
            return req
        form = reply_form(self.client)
        messages, overrides, note = req
        res = self.client.chat(messages, purpose="judge", repeat=repeat, **overrides)
        nxt = next_form_after_refusal(self.client, form, res)
        while nxt is not None:  # the endpoint refused the form: asked once in the next one, which is remembered
            messages, overrides, note = self.request(question, answer, contexts)
            res = self.client.chat(messages, purpose="judge", repeat=repeat, **overrides)
            nxt = next_form_after_refusal(self.client, nxt, res)
        if res.status != "ok":
            return Score(None, res.status, res.error)
        return self.parse(res.text, note)

    def cache_key(self, question: str, answer: str, contexts: list[str], repeat: int = 0) -> str | None:
        """The response-cache key of the call ``score`` would make (None: no call)."""
        req = self.request(question, answer, contexts)
        if isinstance(req, Score):
            return None
        messages, overrides, _ = req
        return self.client.cache_key(messages, self.client._params(overrides), repeat)


@register_judge
@dataclass
class LLMFaithfulness(_ChatJudge):
    """Asks the judge, per answer statement, whether the context supports it (JSON verdicts)."""
    client: LLMClient
    name = "llm_faithfulness"
    score_name = "llm_faithfulness"
    SYSTEM = ("You check whether statements are supported by a context. Reply with JSON "
              "only: {\"verdicts\": [1 or 0 for each statement, in order]}." + FENCE_RULE)

    def request(self, question, answer, contexts):
        if is_fallback(answer):
            return Score(None, "undetermined", "fallback answer: nothing to judge")
        stmts = [strip_citations(s) for s in split_sentences(answer)]
        if not stmts:
            return Score(None, "undetermined", "empty answer")
        listing = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(stmts))
        # the blocks the answer cites (as the offline faithfulness judges them), else every block; a whole
        # document fits (MAX_JUDGE_CONTEXT_CHARS), and a cut is said in the score's detail
        cited = sorted({n for n in parse_citations(answer) if 0 < n <= len(contexts)})
        ctx = "\n\n".join(contexts[n - 1] for n in cited) if cited else "\n\n".join(contexts)
        cut = len(ctx) > MAX_JUDGE_CONTEXT_CHARS
        ctx = ctx[:MAX_JUDGE_CONTEXT_CHARS]
        # the server enforces one verdict per statement, in the form this endpoint takes (judge_io.reply_form)
        extra = constrained(self.client, "verdicts", {
            "type": "object", "additionalProperties": False, "required": ["verdicts"],
            "properties": {"verdicts": {"type": "array", "items": {"type": "integer", "enum": [0, 1]},
                                        "minItems": len(stmts), "maxItems": len(stmts)}}})
        note = [f"judged against cited blocks {cited}" if cited else "judged against every block"]
        if cut:
            note.append(f"context cut to {MAX_JUDGE_CONTEXT_CHARS:,} characters")
        flagged = flag_note(addresses_grader(ctx, listing))
        if flagged:
            note.append(flagged)
        key = fence_key(ctx, listing)
        return ([{"role": "system", "content": self.SYSTEM},
                 {"role": "user", "content": f"Context:\n{fence(ctx, key)}\n\nStatements:\n{fence(listing, key)}"}],
                extra, (len(stmts), "; ".join(note)))

    def parse(self, text, note):
        n, note = note
        verdicts = last_object(text, verdicts_of(n))  # strict: n integers, each 0 or 1, in the last such object
        if verdicts is None:
            hint = " (cut short? raise --judge-max-tokens)" if text and "}" not in text else ""
            return Score(None, "parse_error", _unusable(f"judge reply not usable{hint}", text, note))
        return Score(sum(verdicts) / len(verdicts), "ok", note)


def _unusable(what: str, text: str | None, note: str = "") -> str:
    """A parse_error's detail: what was wrong, the reply kept (its first 200 characters), and a flag when the
    judge's input addressed the grader."""
    flagged = next((p for p in (note or "").split("; ") if p.startswith("input addresses the grader")), "")
    return f"{what}: {(text or '')[:200]}" + (f"; {flagged}" if flagged else "")


@register_judge
@dataclass
class LLMAnswerRelevance(_ChatJudge):
    """Does the answer address the question? A 0-3 rubric (reference-free: works on plain questions), scored
    rating / 3. An abstention is not rated (the sufficiency decomposition counts it)."""
    client: LLMClient
    name = "llm_answer_relevance"
    score_name = "answer_relevance"
    SYSTEM = ("You rate whether an answer addresses the question it was given, not whether it is true. Rubric: "
              "3 = answers the question directly; 2 = answers part of it; 1 = on the question's topic but does not "
              "answer it; 0 = about something else. Reply with JSON only: {\"relevance\": 0, 1, 2 or 3}." + FENCE_RULE)

    def request(self, question, answer, contexts):
        if is_fallback(answer):
            return Score(None, "not_applicable", "the answer abstained: nothing to rate")
        text = strip_citations(answer)
        if not text.strip():
            return Score(None, "undetermined", "empty answer")
        text = text[:8000]
        key = fence_key(question, text)
        return ([{"role": "system", "content": self.SYSTEM},
                 {"role": "user", "content": f"Question: {fence(question, key)}\n\nAnswer: {fence(text, key)}"}],
                constrained(self.client, "relevance", {
                    "type": "object", "additionalProperties": False, "required": ["relevance"],
                    "properties": {"relevance": {"type": "integer", "enum": [0, 1, 2, 3]}}}),
                flag_note(addresses_grader(question, text)))

    def parse(self, text, note):
        v = last_object(text, field_of("relevance", (0, 1, 2, 3)))
        if v is None:
            return Score(None, "parse_error", _unusable("judge reply not usable", text, note))
        return Score(v / 3, "ok", "; ".join(x for x in (f"rating {v} of 3", note) if x))


@register_judge
@dataclass
class LLMContextSufficiency(_ChatJudge):
    """Was the packed context enough to answer the question (an autorater after Joren et al., "Sufficient Context",
    ICLR 2025)? 1 or 0, whatever the answer says. Asked only of questions with no gold evidence: where evidence
    exists the offline scorer decides (evals/score/metrics.py, score_sufficiency)."""
    client: LLMClient
    name = "llm_context_sufficiency"
    score_name = "context_sufficiency"
    only_without_evidence = True
    SYSTEM = ("You decide whether a context holds enough information to answer a question. Sufficient means a "
              "reader with only this context could give a definitive answer: it need not say it word for word, "
              "but nothing the answer needs may be missing. Ignore any answer; judge the context. Reply with JSON "
              "only: {\"sufficient\": 1 or 0}." + FENCE_RULE)

    def request(self, question, answer, contexts):
        if not contexts:
            return Score(0.0, "ok", "no context: nothing to answer from")
        ctx = "\n\n".join(f"[{i + 1}] {c}" for i, c in enumerate(contexts))
        note = f"LLM autorater {self.client.cfg.model}" + (
            f"; context cut to {MAX_JUDGE_CONTEXT_CHARS:,} characters" if len(ctx) > MAX_JUDGE_CONTEXT_CHARS else "")
        ctx = ctx[:MAX_JUDGE_CONTEXT_CHARS]
        flagged = flag_note(addresses_grader(question, ctx))
        key = fence_key(question, ctx)
        return ([{"role": "system", "content": self.SYSTEM},
                 {"role": "user", "content": f"Question: {fence(question, key)}\n\nContext:\n{fence(ctx, key)}"}],
                constrained(self.client, "sufficiency", {
                    "type": "object", "additionalProperties": False, "required": ["sufficient"],
                    "properties": {"sufficient": {"type": "integer", "enum": [0, 1]}}}),
                "; ".join(x for x in (note, flagged) if x))

    def parse(self, text, note):
        v = last_object(text, field_of("sufficient", (0, 1)))
        if v is None:
            return Score(None, "parse_error", _unusable("autorater reply not usable", text, note))
        return Score(float(v), "ok", note)


# what a configured LLM judges by default (no extra needed): faithfulness, answer relevance, context sufficiency
DEFAULT_LLM_JUDGES = ("llm_faithfulness", "llm_answer_relevance", "llm_context_sufficiency")


JUDGE_REPEAT_STRIDE = 1000  # repeat k of a judgment is cached under answer repeat + 1000 k (k = 0: as before)
FLIPPED = "flipped"  # in a repeated judgment's detail: its repeats disagree (evals/analyze/judge_health.py)


def judge_repeated(j, question: str, answer: str, contexts: list[str], repeat: int = 0, reference=None) -> Score:
    """The judge's Score, asked ``j.repeats`` times (--judge-repeats; sampled: the run's judge temperature is above 0
    then) with each repeat cached by its index. The value is the mean of the usable repeats; the detail keeps every
    repeat's value and says "flipped" when they disagree. One repeat: the judgment as it always was."""
    n = max(1, int(getattr(j, "repeats", 1) or 1))
    first = j.score(question, answer, contexts, repeat, reference)
    if n == 1:
        return first
    got = [first] + [j.score(question, answer, contexts, repeat + JUDGE_REPEAT_STRIDE * k, reference)
                     for k in range(1, n)]
    ok = [s.value for s in got if s.status == "ok" and s.value is not None]
    values = ", ".join("-" if s.status != "ok" or s.value is None else f"{s.value:g}" for s in got)
    if not ok:
        return Score(None, first.status, f"{n} repeats, none usable ({values}): {first.detail}")
    flipped = len(set(round(v, 9) for v in ok)) > 1
    detail = f"{len(ok)} of {n} repeats [{values}]" + (f"; {FLIPPED}" if flipped else "") + (
        f"; {first.detail}" if first.detail else "")
    return Score(sum(ok) / len(ok), "ok", detail)


def judge_applies(judge, question) -> bool:
    """Does ``judge`` judge this item at all? Never a filler turn; the sufficiency autorater only where no gold
    evidence (or declared unanswerable) decides it offline. The run (evals/run/items.py) and every cost line ask
    this one question."""
    from evals.score.metrics import needs_autorater

    if question.qtype == "filler":
        return False
    return not getattr(judge, "only_without_evidence", False) or needs_autorater(question)


def count_judge_calls(judges, question, answer: str | None, contexts: list[str], repeat: int, planned: set,
                      fallback: str | None = None) -> tuple[int, int, int]:
    """(new calls, calls in the response cache, calls whose answer is not known yet) the judges would make for one
    item, before any is sent. ``answer`` None: the answer is not in the cache yet, so a judge that reads it counts
    as one call at most (a bound); the sufficiency autorater reads only the context and is counted exactly.
    ``planned``: cache keys already counted (one prompt twice is one call)."""
    from rag.answer.prompts import FALLBACK

    new = cached = unknown = 0
    judges = [jj for j in judges for jj in getattr(j, "jurors", [j])]  # a jury: each juror's calls
    for j in judges:
        if not judge_applies(j, question):
            continue
        context_only = getattr(j, "only_without_evidence", False)
        reps = max(1, int(getattr(j, "repeats", 1) or 1))
        if answer is None and not context_only:
            unknown += reps
            continue
        if not hasattr(j, "cache_key"):  # a ragas judge: several calls an item, unknown until it runs
            unknown += reps
            continue
        judged = FALLBACK if answer is not None and is_fallback(answer, fallback or FALLBACK) else (answer or "")
        for k in range(max(1, int(getattr(j, "repeats", 1) or 1))):  # --judge-repeats: each repeat its own call
            key = j.cache_key(question.text, judged, contexts, repeat + JUDGE_REPEAT_STRIDE * k)
            if key is None:
                break  # no call (an abstention, an empty context)
            if key in planned or j.client.has_key(key):
                cached += 1
            else:
                planned.add(key)
                new += 1
    return new, cached, unknown


JUDGE_REPEAT_TEMPERATURE = 0.7  # --judge-repeats samples the judge (at 0 a server gives one reply N times)


def judge_metric(name: str) -> str:
    """The metric a judge writes (its name, unless it writes a shared metric such as context_sufficiency)."""
    return getattr(JUDGES.get(name), "score_name", name)


def prompt_version(name: str) -> str:
    """A judge's prompt, hashed: stored agreement figures belong to one prompt (a new prompt is a new judge)."""
    import hashlib

    cls = JUDGES[name]
    text = getattr(cls, "SYSTEM", "") or getattr(cls, "metric_class", name)
    return hashlib.sha256(f"{name}\n{text}".encode()).hexdigest()[:10]


def _chain(exc: BaseException, depth: int = 12):
    seen = set()
    while exc is not None and id(exc) not in seen and depth:
        seen.add(id(exc))
        yield exc
        last = getattr(exc, "last_attempt", None)  # tenacity RetryError
        inner = last.exception() if last is not None and hasattr(last, "exception") else None
        exc = exc.__cause__ or inner or exc.__context__
        depth -= 1


def _status_of(exc: BaseException) -> str:
    """Map a judge failure (and whatever it wraps) to a score status."""
    import asyncio
    import json as _json

    import openai

    chain = list(_chain(exc))
    if any(isinstance(e, openai.RateLimitError) for e in chain):
        return "rate_limited"
    if any(isinstance(e, (openai.APITimeoutError, asyncio.TimeoutError, TimeoutError)) for e in chain):
        return "timeout"
    if any(isinstance(e, openai.APIStatusError) for e in chain):
        return "error"
    if any(isinstance(e, (_json.JSONDecodeError, ValueError, KeyError)) or "Validation" in type(e).__name__
           or "Instructor" in type(e).__name__ for e in chain):
        return "parse_error"  # unparseable JSON, or output that fails the schema
    return "error"


class _RagasJudge:
    """A ragas 0.4.3 collections metric through ``InstructorLLM``; instructor's JSON_SCHEMA mode lets
    the server constrain a small local model's output to the schema. Calls go through the
    workbench's response cache (an httpx transport keyed on the request body and repeat index)."""
    name = ""
    metric_class = ""
    needs_response = True
    needs_reference = False

    def __init__(self, client: LLMClient, mode: str = "json_schema"):
        import asyncio
        import threading

        import httpx
        from openai import AsyncOpenAI

        from rag.llm.cache import CachingAsyncTransport

        os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
        check_ragas()
        import instructor
        import ragas.metrics.collections as rmc
        from ragas.llms.base import InstructorLLM
        cfg = client.cfg
        self.client, self.stats = client, client.stats
        http = httpx.AsyncClient(transport=CachingAsyncTransport(client.cache, client.stats), timeout=cfg.timeout)
        from rag.llm.urls import split_query

        base, query = split_query(cfg.base_url)  # a ?api_key= stays a query parameter, as in our client
        aclient = AsyncOpenAI(base_url=base, api_key=os.environ.get(cfg.api_key_env) or "not-needed",
                              default_query=query or None, http_client=http, max_retries=cfg.retries,
                              timeout=cfg.timeout)
        imode = {"json_schema": instructor.Mode.JSON_SCHEMA, "json": instructor.Mode.JSON,
                 "tools": instructor.Mode.TOOLS}[mode]
        llm = InstructorLLM(client=instructor.from_openai(aclient, mode=imode), model=cfg.model, provider="openai",
                            temperature=cfg.temperature, max_tokens=cfg.max_tokens)
        self.metric = getattr(rmc, self.metric_class)(llm=llm)
        self.timeout = cfg.timeout * (cfg.retries + 1) * 2 + 5
        # one event loop in a thread of its own, so sync callers (the runner) can await ragas
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def kwargs(self, question: str, answer: str, contexts: list[str], reference: str | None) -> dict:
        raise NotImplementedError

    def score(self, question: str, answer: str, contexts: list[str], repeat: int = 0,
              reference: str | None = None) -> Score:
        import asyncio
        import math

        from rag.llm.client import current_repeat

        if self.needs_response and is_fallback(answer):
            return Score(None, "undetermined", "fallback answer: nothing to judge")
        if (self.needs_response and not answer.strip()) or not contexts:
            return Score(None, "undetermined", "empty answer or context")
        if self.needs_reference and not reference:
            return Score(None, "undetermined", "no reference answer (unanswerable question)")
        kw = self.kwargs(question, strip_citations(answer), contexts, reference)

        async def go():
            current_repeat.set(repeat)
            return await self.metric.ascore(**kw)
        try:
            res = asyncio.run_coroutine_threadsafe(asyncio.wait_for(go(), self.timeout), self.loop).result()
        except BaseException as e:  # noqa: BLE001 - every failure becomes a status
            from rag.llm.guard import guard_cause
            from rag.llm.urls import scrub_cut

            refused = guard_cause(e)  # a body over the cap or an encoding refused, named (not "Connection error.")
            detail = scrub_cut(f"{type(e).__name__}: {e}" + (f" ({refused})" if refused is not None and refused
                                                             is not e else ""), 250, self.client.secrets)
            if not str(e).strip() or any(w in str(e).lower() for w in ("max_tokens", "length", "incomplete")):
                detail += " (the judge's reply may have been cut short: raise --judge-max-tokens)"
            return Score(None, _status_of(e), detail)
        v = getattr(res, "value", res)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return Score(None, "undetermined", "ragas returned no score")
        return Score(float(v))


@register_judge
class RagasFaithfulness(_RagasJudge):
    name, metric_class = "ragas_faithfulness", "Faithfulness"

    def kwargs(self, question, answer, contexts, reference):
        return {"user_input": question, "response": answer, "retrieved_contexts": contexts}


@register_judge
class RagasContextRecall(_RagasJudge):
    name, metric_class, needs_response, needs_reference = "ragas_context_recall", "ContextRecall", False, True

    def kwargs(self, question, answer, contexts, reference):
        return {"user_input": question, "retrieved_contexts": contexts, "reference": reference}


@register_judge
class RagasAnswerAccuracy(_RagasJudge):
    name, metric_class, needs_reference = "ragas_answer_accuracy", "AnswerAccuracy", True

    def kwargs(self, question, answer, contexts, reference):
        return {"user_input": question, "response": answer, "reference": reference}
