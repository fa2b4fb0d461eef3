"""LLM judges by name. They cost money, so nothing calls them unless asked (a CLI flag or the
notebook's run button). Every failure is a status, never a dropped row or a NaN."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from rag.answerers import split_sentences
from rag.llm import LLMClient, LLMConfig
from rag.prompts import is_fallback, strip_citations

from .metrics import Score

JUDGES: dict[str, type] = {}


def register_judge(cls):
    JUDGES[cls.name] = cls
    return cls


def judge_config_from_env() -> LLMConfig | None:
    """RAGWB_JUDGE_BASE_URL + RAGWB_JUDGE_MODEL (+ RAGWB_JUDGE_KEY_ENV, the key's variable name)."""
    url, model = os.environ.get("RAGWB_JUDGE_BASE_URL"), os.environ.get("RAGWB_JUDGE_MODEL")
    if not (url and model):
        return None
    return LLMConfig(url, model, os.environ.get("RAGWB_JUDGE_KEY_ENV", "OPENAI_API_KEY"), max_tokens=512)


def get_judge(name: str, client: LLMClient):
    if name not in JUDGES:
        raise KeyError(f"unknown judge {name!r}; valid: {', '.join(JUDGES)}")
    return JUDGES[name](client)


@register_judge
@dataclass
class LLMFaithfulness:
    """Asks the judge, per answer statement, whether the context supports it (JSON verdicts)."""
    client: LLMClient
    name = "llm_faithfulness"

    def score(self, question: str, answer: str, contexts: list[str], repeat: int = 0) -> Score:
        if is_fallback(answer):
            return Score(None, "undetermined", "fallback answer: nothing to judge")
        stmts = [strip_citations(s) for s in split_sentences(answer)]
        if not stmts:
            return Score(None, "undetermined", "empty answer")
        listing = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(stmts))
        ctx = "\n\n".join(contexts)[:12000]
        res = self.client.chat([
            {"role": "system", "content": "You check whether statements are supported by a context. Reply with JSON "
             "only: {\"verdicts\": [1 or 0 for each statement, in order]}."},
            {"role": "user", "content": f"Context:\n{ctx}\n\nStatements:\n{listing}"}], purpose="judge", repeat=repeat)
        if res.status != "ok":
            return Score(None, res.status, res.error)
        m = re.search(r"\{.*\}", res.text or "", re.S)
        try:
            verdicts = json.loads(m.group(0))["verdicts"] if m else None
            verdicts = [int(bool(int(v))) for v in verdicts]
        except (ValueError, KeyError, TypeError):
            verdicts = None
        if not verdicts or len(verdicts) != len(stmts):
            return Score(None, "parse_error", f"judge reply not usable: {(res.text or '')[:200]}")
        return Score(sum(verdicts) / len(verdicts))
