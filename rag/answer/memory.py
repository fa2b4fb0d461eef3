"""Conversation memory: what earlier turns a multi-turn RAG system puts in the prompt, how it
forms the retrieval query, and when it skips retrieval (docs/conversations.md).

Three name-keyed registries, each with typed parameters:

* ``MEMORY_POLICIES``: none, full_history, window, retrieved_turns, recent_summaries;
* ``QUERY_MODES``: last_turn, history_concat, rewrite (LLM), gold_rewrite (oracle);
* the filler-turn **bypass** rule (``is_filler``): a rule plus embedding similarity to prototypes.

A policy turns the completed earlier turns of a conversation into chat messages. Every policy
shares ``max_history_tokens`` (0 = no limit): when the history is over it, the oldest messages go
first. Earlier turns carry their *gold* reference answers (teacher forcing), so every policy,
strategy and answerer sees the same conversation and the comparison isolates the memory design.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np

from .answerers import split_sentences
from rag.params import build_params
from .prompts import render_context
from rag.tokens import count_tokens


@dataclass
class TurnRecord:
    """A completed turn as memory sees it."""
    turn: int
    question: str
    answer: str  # the gold reference answer
    blocks: list = field(default_factory=list)  # the context blocks this turn was given
    filler: bool = False

    @property
    def pair(self) -> str:
        return f"User: {self.question}\nAssistant: {self.answer}"


# --------------------------------------------------------------------------- turn summaries

def extractive_summary(rec: TurnRecord, max_tokens: int = 100, encoding: str = "o200k_base") -> str:
    """The 1-2 sentence summary of an exchange (the spec's LLM call capped at 100 tokens), offline:
    the question, then the answer's first sentences while they fit the cap."""
    out = f"Asked: {rec.question.strip()}"
    for s in split_sentences(rec.answer)[:2]:
        cand = f"{out} Answered: {s}" if "Answered:" not in out else f"{out} {s}"
        if count_tokens(cand, encoding) > max_tokens:
            break
        out = cand
    return out


def llm_summary(llm, rec: TurnRecord, max_tokens: int = 100) -> str | None:
    res = llm.chat([{"role": "system", "content": "Summarise this exchange in one or two sentences."},
                    {"role": "user", "content": rec.pair}], purpose="turn_summary", max_tokens=max_tokens)
    if res.status != "ok":
        return None
    return (res.text or "").strip() or None


# --------------------------------------------------------------------------- policies

@dataclass(frozen=True)
class MemoryParams:
    max_history_tokens: int = 0  # shared history budget (0 = no limit): oldest messages dropped first
    bypass: bool = True  # filler turns ("ok", "thanks") skip retrieval and get only the recent turns

    def validate(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, int) and not isinstance(v, bool) and v < 0:
                raise ValueError(f"memory parameter {f.name} must be >= 0, got {v}")


MEMORY_POLICIES: dict[str, "MemoryPolicy"] = {}


def register_memory(cls):
    MEMORY_POLICIES[cls.name] = cls()
    return cls


def get_memory(name: str) -> "MemoryPolicy":
    try:
        return MEMORY_POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown memory policy {name!r}; valid: {', '.join(MEMORY_POLICIES)}") from None


def make_memory_params(name: str, **kw) -> MemoryParams:
    return build_params(get_memory(name).Params, f"memory policy {name!r}", kw)


class MemoryPolicy:
    name = ""
    description = ""
    Params: type = MemoryParams

    def history(self, past: list[TurnRecord], current: str, p, ctx: "MemoryContext") -> list[dict]:
        raise NotImplementedError


@dataclass
class MemoryContext:
    """What a policy may use besides the turns: an embedder for retrieved turns, an LLM for summaries."""
    embed: object = None  # texts -> normalised vectors (query side)
    llm: object = None
    encoding: str = "o200k_base"
    summaries: dict = field(default_factory=dict)  # (conversation, turn) -> summary memo


def _pair_messages(recs: list[TurnRecord]) -> list[dict]:
    out = []
    for r in recs:
        out += [{"role": "user", "content": r.question}, {"role": "assistant", "content": r.answer}]
    return out


@register_memory
class NoMemory(MemoryPolicy):
    name = "none"
    description = "the current turn only"

    def history(self, past, current, p, ctx):
        return []


@register_memory
class FullHistory(MemoryPolicy):
    name = "full_history"
    description = "every earlier turn verbatim with the context blocks it was given (the naive baseline that bloats)"

    def history(self, past, current, p, ctx):
        out = []
        for r in past:
            user = (f"Context blocks:\n\n{render_context(r.blocks)}\n\nQuestion: {r.question}" if r.blocks
                    else r.question)
            out += [{"role": "user", "content": user}, {"role": "assistant", "content": r.answer}]
        return out


@dataclass(frozen=True)
class WindowParams(MemoryParams):
    window_turns: int = 3


@register_memory
class Window(MemoryPolicy):
    name = "window"
    description = "the last N turn pairs (question and answer, without their old blocks)"
    Params = WindowParams

    def history(self, past, current, p, ctx):
        return _pair_messages(past[-p.window_turns:] if p.window_turns else [])


@dataclass(frozen=True)
class RetrievedTurnsParams(MemoryParams):
    recent_turns: int = 3  # always verbatim ("Recent Conversation")
    top_k: int = 3  # older turn pairs retrieved by relevance ("Earlier Relevant Exchanges")
    summary_tokens: int = 100


@register_memory
class RetrievedTurns(MemoryPolicy):
    name = "retrieved_turns"
    description = "the last N turns verbatim plus the top-k older turn pairs by relevance, in chronological order"
    Params = RetrievedTurnsParams

    def history(self, past, current, p, ctx):
        recent = past[-p.recent_turns:] if p.recent_turns else []
        older = [r for r in past[:len(past) - len(recent)] if not r.filler]
        out = []
        if older and p.top_k and ctx.embed is not None:
            texts = [_summary(r, p.summary_tokens, ctx) + "\n" + r.pair for r in older]
            vecs = ctx.embed(texts + [current])
            sims = vecs[:-1] @ vecs[-1]
            top = sorted(np.argsort(-sims, kind="stable")[:p.top_k].tolist())  # chronological, not rank order
            lines = [f"- (turn {older[i].turn}) {_summary(older[i], p.summary_tokens, ctx)}" for i in top]
            out.append({"role": "system", "content": "Earlier Relevant Exchanges:\n" + "\n".join(lines)})
        return out + _pair_messages(recent)


def _summary(r: TurnRecord, max_tokens: int, ctx: MemoryContext) -> str:
    key = (r.turn, r.question, max_tokens)
    s = ctx.summaries.get(key)
    if s is None:
        s = (llm_summary(ctx.llm, r, max_tokens) if ctx.llm is not None else None) \
            or extractive_summary(r, max_tokens, ctx.encoding)
        ctx.summaries[key] = s
    return s


@dataclass(frozen=True)
class RecentSummariesParams(MemoryParams):
    entries: int = 5
    summary_chars: int = 500
    snippet_chars: int = 300


@register_memory
class RecentSummaries(MemoryPolicy):
    name = "recent_summaries"
    description = "the 5 most recent turns as entries: title, summary cut at 500 chars, memory snippet cut at 300"
    Params = RecentSummariesParams

    def history(self, past, current, p, ctx):
        recs = [r for r in past if not r.filler][-p.entries:] if p.entries else []
        if not recs:
            return []
        parts = []
        for r in reversed(recs):  # most recent first, by time (not relevance)
            fields = [f"Title: {r.question.strip()[:120]}"]
            summ = _summary(r, 100, ctx)[:p.summary_chars]
            if summ:
                fields.append(f"Summary: {summ}")
            snip = r.answer.strip()[:p.snippet_chars]
            if snip:  # missing fields are omitted
                fields.append(f"Memory: {snip}")
            parts.append("\n".join(fields))
        return [{"role": "system", "content": "Recent conversation entries:\n\n" + "\n\n".join(parts)}]


def fit_history(messages: list[dict], max_tokens: int, encoding: str) -> list[dict]:
    """The shared history budget: drop the oldest messages until the rest fits (0 = no limit)."""
    if not max_tokens:
        return messages
    msgs = list(messages)
    while msgs and sum(count_tokens(m["content"], encoding) + 3 for m in msgs) > max_tokens:
        msgs.pop(0)
    return msgs


def build_history(policy: str, p: MemoryParams, past: list[TurnRecord], current: str, ctx: MemoryContext,
                  bypassed: bool = False) -> list[dict]:
    if bypassed and policy == "retrieved_turns":  # a filler turn: no conversation retrieval either,
        msgs = _pair_messages(past[-p.recent_turns:] if p.recent_turns else [])  # only the always-on recent turns
    else:
        msgs = get_memory(policy).history(past, current, p, ctx)
    return fit_history(msgs, p.max_history_tokens, ctx.encoding)


# --------------------------------------------------------------------------- query modes

QUERY_MODES = {
    "last_turn": "the current user message only",
    "history_concat": "the last N user messages (query_turns, default 3) and the current one, concatenated",
    "rewrite": "a standalone question rewritten by the LLM from the history (needs an LLM)",
    "gold_rewrite": "the gold set's standalone rewrite (an oracle upper bound)",
}
QUERY_TURNS = 3


def get_query_mode(name: str) -> str:
    if name not in QUERY_MODES:
        raise KeyError(f"unknown query mode {name!r}; valid: {', '.join(QUERY_MODES)}")
    return name


def retrieval_query(mode: str, current: str, past: list[TurnRecord], gold_rewrite: str = "", llm=None,
                    query_turns: int = QUERY_TURNS) -> str:
    if mode == "last_turn":
        return current
    if mode == "history_concat":
        prev = [r.question for r in past if not r.filler][-query_turns:] if query_turns else []
        return " ".join(prev + [current])
    if mode == "gold_rewrite":
        return gold_rewrite or current
    if mode == "rewrite":
        if llm is None:
            raise ValueError("query mode 'rewrite' needs an LLM endpoint (--llm-base-url)")
        hist = "\n".join(r.pair for r in past[-query_turns:])
        res = llm.chat([{"role": "system", "content": "Rewrite the user's last message as a standalone question "
                         "that can be understood without the conversation. Reply with the question only."},
                        {"role": "user", "content": f"Conversation:\n{hist}\n\nLast message: {current}"}],
                       purpose="query_rewrite")
        if res.status != "ok":  # a failed rewrite falls back to the message itself
            return current
        return (res.text or "").strip() or current
    raise KeyError(f"unknown query mode {mode!r}; valid: {', '.join(QUERY_MODES)}")


# --------------------------------------------------------------------------- retrieval bypass

FILLER_PHRASES = ("ok", "okay", "thanks", "thank you", "thanks a lot", "thank you so much", "great", "great thanks",
                  "got it", "yes", "yes please", "sure", "continue", "go ahead", "go on", "that makes sense",
                  "makes sense", "let's move on", "lets move on", "cool", "perfect", "nice", "alright", "understood",
                  "i see", "sounds good", "ok thanks", "okay thanks", "awesome", "good to know", "noted")
_FILLER_WORDS = set(" ".join(FILLER_PHRASES).split()) | {"so", "much", "very", "that", "helps", "helpful", "a", "lot",
                                                        "please", "and", "now", "then", "ty", "thx"}
FILLER_SIMILARITY = 0.92  # cosine to the nearest filler prototype (e5 query vectors)


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())


def filler_rule(text: str) -> bool:
    """A short message made only of acknowledgement words, or a known filler phrase."""
    t = _norm(text)
    if not t:
        return True
    if t in FILLER_PHRASES:
        return True
    words = t.split()
    return len(words) <= 5 and all(w in _FILLER_WORDS for w in words)


class FillerDetector:
    """Bypass decision: the rule, or (for messages of at most 8 words) embedding similarity to the
    filler prototypes at or above ``FILLER_SIMILARITY``."""

    def __init__(self, embed=None, threshold: float = FILLER_SIMILARITY):
        self.embed, self.threshold = embed, threshold
        self._protos = None

    def __call__(self, text: str) -> bool:
        if filler_rule(text):
            return True
        if self.embed is None or "?" in text or len(_norm(text).split()) > 8:
            return False
        if self._protos is None:
            self._protos = self.embed(list(FILLER_PHRASES))
        v = self.embed([text])[0]
        return float((self._protos @ v).max()) >= self.threshold


def describe_memory() -> list[dict]:
    return [{"name": n, "description": m.description,
             "params": {f.name: getattr(m.Params(), f.name) for f in dataclasses.fields(m.Params)}}
            for n, m in MEMORY_POLICIES.items()]
