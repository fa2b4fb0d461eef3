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


def _context_pieces(blocks) -> list[tuple[str, str, str]]:
    """(marker, head, text) per rendered piece: ("[n]", " (source: ...)\\n", block text) for a block,
    ("", heading, "") for a group heading."""
    groups = list(dict.fromkeys(b.group for b in blocks))
    headed = len(groups) > 1
    parts, current = [], None
    for b in blocks:
        if headed and b.group != current:
            parts.append(("", f"## {_GROUP_HEADINGS.get(b.group, b.group.title())}", ""))
            current = b.group
        src = ", ".join(b.page_ids[:1] or b.doc_ids)
        parts.append((f"[{b.n}]", f" (source: {src})\n", b.text))
    return parts


def context_parts(blocks) -> list[str]:
    """The rendered pieces of the context (group headings and numbered blocks), in order."""
    return [m + head + text for m, head, text in _context_pieces(blocks)]


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


@functools.lru_cache(maxsize=65536)
def _text_tokens(text: str, encoding: str) -> int:
    return count_tokens(text + "\n\n", encoding)


def _piece_total(marker: str, head: str, text: str, encoding: str) -> int:
    """Tokens of ``marker + head + text + "\\n\\n"``. A block's source line (it names the block's
    first page, which differs between questions) is counted apart from its text when the text does
    not start with whitespace or ``/`` (a newline then any other character is a pre-token boundary;
    o200k's punctuation runs take a newline and a slash together)."""
    if text and not text[0].isspace() and text[0] != "/" and head.endswith("\n"):
        return _piece_tokens(marker, encoding) + _piece_tokens(head, encoding) + _text_tokens(text, encoding)
    return _piece_tokens(marker, encoding) + _piece_tokens(head + text + "\n\n", encoding)


def count_prompt_tokens(question: str, blocks, history: list[dict] | None = None,
                        encoding: str = "o200k_base", system_prompt: str = SYSTEM_PROMPT) -> int:
    """``prompt_tokens(build_messages(question, blocks, system_prompt, history), encoding)``, exactly,
    without encoding the whole prompt again for every budget.

    The user message is counted as the sum of its pieces ``"Context blocks:\\n\\n"``; for each block
    ``"[n]"``, ``" (source: ...)\\n"`` and ``"<text>\\n\\n"`` (so a block moved to another number or
    page is still a memo hit); each heading + ``"\\n\\n"``; and ``"Question: ...\\nAnswer:"``; each
    piece memoised.
    This is exact because tiktoken encodes pre-token by pre-token (its split regex has no
    look-behind), and every cut is a pre-token boundary for cl100k_base and o200k_base: a newline
    followed by ``[``, ``#``, ``(`` or ``Q`` (no pattern matches across a newline into those), or
    ``]`` followed by a space (punctuation runs stop at whitespace), or a newline followed by a text
    that starts with neither whitespace nor ``/`` (tests/test_prompt_tokens.py pins it on real and
    adversarial texts)."""
    pieces = _context_pieces(blocks) or [("", "(none)", "")]
    user = _piece_tokens("Context blocks:\n\n", encoding)
    user += sum(_piece_total(m, head, text, encoding) for m, head, text in pieces)
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
