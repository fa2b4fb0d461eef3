"""The strict-RAG prompt: numbered blocks, stacked [n] citations, one allowed fallback."""
from __future__ import annotations

import functools
import re

from .tokens import count_tokens, count_tokens_memo as _piece_tokens

FALLBACK = "The document does not mention this."

SYSTEM_PROMPT = (
    "You answer questions using ONLY the numbered context blocks provided. "
    "Cite every statement with the numbers of the blocks that support it, as stacked markers "
    "such as [1] or [1][3], placed at the end of the sentence. Do not use outside knowledge. "
    f"If the blocks do not contain the answer, reply with exactly: {FALLBACK}"
)

_GROUP_HEADINGS = {"chunks": "Top chunks", "pages": "Rebuilt pages"}


def _context_pieces(blocks) -> list[tuple[str, str]]:
    """(marker, rest) per rendered piece: ("[n]", " (source: ...)\\n<text>") for a block, ("", heading)."""
    groups = list(dict.fromkeys(b.group for b in blocks))
    headed = len(groups) > 1
    parts, current = [], None
    for b in blocks:
        if headed and b.group != current:
            parts.append(("", f"## {_GROUP_HEADINGS.get(b.group, b.group.title())}"))
            current = b.group
        src = ", ".join(b.page_ids[:1] or b.doc_ids)
        parts.append((f"[{b.n}]", f" (source: {src})\n{b.text}"))
    return parts


def context_parts(blocks) -> list[str]:
    """The rendered pieces of the context (group headings and numbered blocks), in order."""
    return [m + rest for m, rest in _context_pieces(blocks)]


def render_context(blocks) -> str:
    """Numbered blocks; two_phase_pages' two groups get their own headings."""
    return "\n\n".join(context_parts(blocks))


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


def count_prompt_tokens(question: str, blocks, history: list[dict] | None = None,
                        encoding: str = "o200k_base", system_prompt: str = SYSTEM_PROMPT) -> int:
    """``prompt_tokens(build_messages(question, blocks, system_prompt, history), encoding)``, exactly,
    without encoding the whole prompt again for every budget.

    The user message is counted as the sum of its pieces ``"Context blocks:\\n\\n"``; for each block
    ``"[n]"`` and ``" (source: ...)\\n<text>\\n\\n"`` (so a block moved to another number is still a
    memo hit); each heading + ``"\\n\\n"``; and ``"Question: ...\\nAnswer:"``; each piece memoised.
    This is exact because tiktoken encodes pre-token by pre-token (its split regex has no
    look-behind), and every cut is a pre-token boundary for cl100k_base and o200k_base: a newline
    followed by ``[``, ``#``, ``(`` or ``Q`` (no pattern matches across a newline into those), or
    ``]`` followed by a space (punctuation runs stop at whitespace) (tests/test_prompt_tokens.py pins it on real
    and adversarial texts)."""
    pieces = _context_pieces(blocks) or [("", "(none)")]
    user = _piece_tokens("Context blocks:\n\n", encoding)
    user += sum(_piece_tokens(m, encoding) + _piece_tokens(rest + "\n\n", encoding) for m, rest in pieces)
    user += _piece_tokens(f"Question: {question}\nAnswer:", encoding)
    framing = 3 * (2 + len(history or [])) + 3
    return (_piece_tokens(system_prompt, encoding) + user + framing
            + sum(count_tokens(m["content"], encoding) for m in history or []))


_CITE = re.compile(r"\[(\d+)\]")


def parse_citations(answer: str) -> list[int]:
    """Every [n] marker in order of appearance (duplicates kept)."""
    return [int(m) for m in _CITE.findall(answer or "")]


@functools.lru_cache(maxsize=65536)  # answers repeat across budgets; several metrics ask
def strip_citations(answer: str) -> str:
    """Remove [n] markers. A marker between two words leaves a space ("Denmark[1]Iceland" ->
    "Denmark Iceland"); one before punctuation leaves none ("Oslo [1]." -> "Oslo.")."""
    s = re.sub(r"\s*(?:\[\d+\])+\s*", " ", answer or "")
    return re.sub(r" +([.,;:!?)\]])", r"\1", s).strip()


@functools.lru_cache(maxsize=65536)
def is_fallback(answer: str) -> bool:
    return strip_citations(answer).strip().rstrip() == FALLBACK
