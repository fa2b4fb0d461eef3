"""LLM helpers of the shapes that can use an endpoint (multi-query, HyDE, LLM rerank)."""
from __future__ import annotations

import re



# --------------------------------------------------------------------------- LLM helpers (used when configured)

def llm_paraphrases(llm, question: str, n: int) -> list[str]:
    res = llm.chat([{"role": "system", "content": "Rewrite the user's question in different words. "
                     f"Return exactly {n} paraphrases, one per line, nothing else."},
                    {"role": "user", "content": question}], purpose="multi_query")
    lines = [re.sub(r"^\s*(\d+[.)]|[-*])\s*", "", ln).strip() for ln in (res.text or "").splitlines()]
    return [ln for ln in lines if ln][:n]


def llm_hyde(llm, question: str) -> str:
    res = llm.chat([{"role": "system", "content": "Write a short passage that answers the question."},
                    {"role": "user", "content": question}], purpose="hyde")
    return (res.text or question).strip() or question


def llm_rerank(llm, question: str, ids: list, texts: list[str]) -> tuple[list, dict]:
    """Ask the LLM for a relevance score 0-10 per passage; unparseable -> keep the input order."""
    listing = "\n\n".join(f"[{i + 1}] {t[:1500]}" for i, t in enumerate(texts))
    res = llm.chat([{"role": "system", "content": "Score how well each passage answers the question, 0 to 10. "
                     "Reply with one line per passage: <number>: <score>."},
                    {"role": "user", "content": f"Question: {question}\n\nPassages:\n{listing}"}], purpose="rerank")
    scores = {k: 0.0 for k in ids}
    for m in re.finditer(r"\[?(\d+)\]?\s*[:=-]\s*(\d+(?:\.\d+)?)", res.text or ""):
        j = int(m.group(1)) - 1
        if 0 <= j < len(ids):
            scores[ids[j]] = float(m.group(2))
    order = sorted(ids, key=lambda k: (-scores[k], ids.index(k)))
    return order, scores
