"""The strict-RAG prompt: numbered blocks, stacked [n] citations, one allowed fallback."""
from __future__ import annotations

import re

from .tokens import count_tokens

FALLBACK = "The document does not mention this."

SYSTEM_PROMPT = (
    "You answer questions using ONLY the numbered context blocks provided. "
    "Cite every statement with the numbers of the blocks that support it, as stacked markers "
    "such as [1] or [1][3], placed at the end of the sentence. Do not use outside knowledge. "
    f"If the blocks do not contain the answer, reply with exactly: {FALLBACK}"
)

_GROUP_HEADINGS = {"chunks": "Top chunks", "pages": "Rebuilt pages"}


def render_context(blocks) -> str:
    """Numbered blocks; two_phase_pages' two groups get their own headings."""
    groups = list(dict.fromkeys(b.group for b in blocks))
    headed = len(groups) > 1
    parts, current = [], None
    for b in blocks:
        if headed and b.group != current:
            parts.append(f"## {_GROUP_HEADINGS.get(b.group, b.group.title())}")
            current = b.group
        src = ", ".join(b.page_ids[:1] or b.doc_ids)
        parts.append(f"[{b.n}] (source: {src})\n{b.text}")
    return "\n\n".join(parts)


def build_messages(question: str, blocks, system_prompt: str = SYSTEM_PROMPT,
                   history: list[dict] | None = None) -> list[dict]:
    """System prompt, then the conversation history a memory policy chose (rag/memory.py), then the
    current turn with its numbered context blocks."""
    user = f"Context blocks:\n\n{render_context(blocks) or '(none)'}\n\nQuestion: {question}\nAnswer:"
    return [{"role": "system", "content": system_prompt}, *(history or []), {"role": "user", "content": user}]


def prompt_tokens(messages: list[dict], encoding: str = "o200k_base") -> int:
    """Exact tokens of the chat prompt: message contents plus OpenAI's chat framing
    (3 tokens per message and 3 to prime the reply, as in OpenAI's cookbook)."""
    return sum(count_tokens(m["content"], encoding) + 3 for m in messages) + 3


_CITE = re.compile(r"\[(\d+)\]")


def parse_citations(answer: str) -> list[int]:
    """Every [n] marker in order of appearance (duplicates kept)."""
    return [int(m) for m in _CITE.findall(answer or "")]


def strip_citations(answer: str) -> str:
    """Remove [n] markers. A marker between two words leaves a space ("Denmark[1]Iceland" ->
    "Denmark Iceland"); one before punctuation leaves none ("Oslo [1]." -> "Oslo.")."""
    s = re.sub(r"\s*(?:\[\d+\])+\s*", " ", answer or "")
    return re.sub(r" +([.,;:!?)\]])", r"\1", s).strip()


def is_fallback(answer: str) -> bool:
    return strip_citations(answer).strip().rstrip() == FALLBACK
