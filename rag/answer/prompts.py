"""The strict-RAG prompt: numbered blocks, stacked [n] citations, one allowed fallback."""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from rag.strategies.packing import cut_marker
from rag.tokens import count_tokens, count_tokens_memo as _piece_tokens

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
        # a block cut short says so where the model reads it (rag/strategies/packing.py cut_marker)
        parts.append((f"[{b.n}]", f" (source: {src})\n", b.text + cut_marker(b)))
    return parts


def context_parts(blocks) -> list[str]:
    """The rendered pieces of the context (group headings and numbered blocks), in order."""
    return [m + head + text for m, head, text in _context_pieces(blocks)]


def render_context(blocks) -> str:
    """Numbered blocks; two_phase_pages' two groups get their own headings."""
    return "\n\n".join(context_parts(blocks))


def build_messages(question: str, blocks, system_prompt: str = SYSTEM_PROMPT,
                   history: list[dict] | None = None) -> list[dict]:
    """System prompt, then the conversation history a memory policy chose (rag/answer/memory.py), then the
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
def is_fallback(answer: str, fallback: str = FALLBACK) -> bool:
    """Is the answer the abstention sentence (the run's own, when its prompt template sets one)?"""
    return strip_citations(answer).strip().rstrip() == fallback


# --------------------------------------------------------------------------- prompt templates (--prompt FILE)

PROMPT_KEYS = {"system": ("fallback",), "user": ("question", "context", "history"), "fallback": ()}


@dataclass(frozen=True)
class PromptTemplate:
    """A user's prompt for the LLM answerer: ``user`` with {question}, {context} (the numbered blocks)
    and optionally {history} (the conversation so far, as text; without it the history goes in as chat
    messages), ``system`` with {fallback}, and ``fallback``: the sentence that means "I abstain"."""
    user: str
    system: str = SYSTEM_PROMPT.replace(FALLBACK, "{fallback}")
    fallback: str = FALLBACK
    file: str = ""

    @property
    def hash(self) -> str:
        import hashlib

        return hashlib.sha256(json.dumps([self.system, self.user, self.fallback]).encode()).hexdigest()

    def to_dict(self) -> dict:
        return {"file": self.file, "sha256": self.hash, "system": self.system, "user": self.user,
                "fallback": self.fallback}

    @classmethod
    def from_dict(cls, d: dict) -> "PromptTemplate":
        return cls(d["user"], d["system"], d["fallback"], d.get("file", ""))


def _placeholders(text: str, where: str, path) -> set:
    import string

    try:
        return {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as e:
        raise ValueError(f"{path}: {where} is not a valid template ({e}; write {{{{ and }}}} for braces)") from None


def load_prompt(path) -> PromptTemplate:
    """A prompt file: TOML with ``user`` (required), ``system`` and ``fallback``; or plain text, which is
    the user template. An unknown placeholder, a missing {question} or {context}, or an unknown key is
    an error naming the file and what is wrong."""
    import tomllib
    from pathlib import Path

    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"{p}: cannot read the prompt file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not UTF-8 text ({e.reason})") from None
    if p.suffix == ".toml":
        try:
            d = tomllib.loads(raw)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{p}: not valid TOML ({e})") from None
        bad = set(d) - set(PROMPT_KEYS)
        if bad:
            raise ValueError(f"{p}: unknown key(s) {sorted(bad)}; valid: {', '.join(PROMPT_KEYS)}")
        if not isinstance(d.get("user"), str):
            raise ValueError(f"{p}: needs a 'user' template with {{question}} and {{context}}")
        t = PromptTemplate(d["user"], d.get("system", PromptTemplate.system), d.get("fallback", FALLBACK), str(p))
    else:
        t = PromptTemplate(raw, file=str(p))
    for where, text in (("system", t.system), ("user", t.user)):
        names = _placeholders(text, where, p)
        unknown = names - set(PROMPT_KEYS[where])
        if unknown:
            raise ValueError(f"{p}: unknown placeholder(s) {', '.join('{' + n + '}' for n in sorted(unknown))} in "
                             f"{where}; valid: {', '.join('{' + n + '}' for n in PROMPT_KEYS[where])}")
    missing = {"question", "context"} - _placeholders(t.user, "user", p)
    if missing:
        raise ValueError(f"{p}: the user template needs {', '.join('{' + n + '}' for n in sorted(missing))}")
    if not t.fallback.strip():
        raise ValueError(f"{p}: fallback (the abstention sentence) must not be empty")
    return t


def render_history(history: list[dict] | None) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in history or []) or "(none)"


def template_messages(t: PromptTemplate, question: str, blocks, history: list[dict] | None = None) -> list[dict]:
    """The messages of a user's template (their exact tokens: ``prompt_tokens`` of these)."""
    user = t.user.format(question=question, context=render_context(blocks) or "(none)",
                         history=render_history(history))
    inline = "{history}" in t.user
    return [{"role": "system", "content": t.system.format(fallback=t.fallback)},
            *([] if inline else (history or [])), {"role": "user", "content": user}]
