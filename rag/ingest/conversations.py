"""Multi-turn gold sets: MTRAG conversations and users' own conversation JSONL (docs/conversations.md).

A conversation is an ordered list of turns; each turn is an evaluable ``Question`` carrying
``conversation_id``, ``turn`` and ``rewrite`` (the set's standalone form). Passages are pages of
their documents (page id = passage id), so gold passages are page-level evidence and the page
metrics are passage metrics. A conversation with missing or out-of-order turns, an empty turn or an
unknown passage id is skipped naming its file and line; the rest loads.
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from rag.models import Dataset, Document, Evidence, Question, Skipped, pages_from_paragraphs
from rag.safeio import loads_bounded

FILLER_TEXTS = ("Thanks, that helps.", "ok", "Got it, thanks!", "That makes sense.", "Great, go on.",
                "Okay, thank you!", "thanks", "Sounds good.", "Alright.", "Perfect, thank you so much.")
FILLER_ANSWER = "You're welcome. Let me know if you have another question."


def decode_lines(raw: bytes):
    """(line number, text or None, why not) for each non-blank line: one bad byte costs its line,
    never the file. UTF-16 files (with their byte-order mark) are read as such."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            raw = raw.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError:
            pass
    if raw[:3] == b"\xef\xbb\xbf":
        raw = raw[3:]
    for line_no, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            yield line_no, line.decode("utf-8").rstrip("\r"), ""
        except UnicodeDecodeError as e:
            yield line_no, None, f"not valid UTF-8 (byte 0x{line[e.start]:02x} at column {e.start + 1}); line skipped"


def _read_jsonl(path: Path, skipped: list | None = None):
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    for line_no, line, why in decode_lines(raw):
        if line is None:
            if skipped is not None:
                skipped.append(Skipped(str(path), why, line_no))
            continue
        yield line_no, line


def passages_to_documents(path: Path, language: str = "en") -> tuple[list[Document], dict[str, str], list[Skipped]]:
    """passages.jsonl -> documents (grouped by document_id, passages in file order as pages) and
    passage id -> document id."""
    groups: dict[str, list[dict]] = {}
    skipped = []
    for line_no, line in _read_jsonl(path):
        try:
            rec = loads_bounded(line)
            pid, did, text = rec["passage_id"], rec.get("document_id") or rec["passage_id"], rec["text"]
        except (ValueError, KeyError, TypeError) as e:
            skipped.append(Skipped(str(path), f"not a passage record ({e})", line_no))
            continue
        if not isinstance(text, str) or not text.strip():
            skipped.append(Skipped(str(path), f"passage {pid!r} has no text", line_no))
            continue
        groups.setdefault(str(did), []).append({"id": str(pid), "title": rec.get("title") or "", "text": text})
    docs, where = [], {}
    for did, ps in groups.items():
        text, pages = pages_from_paragraphs(did, [p["text"] for p in ps])
        for pg, p in zip(pages, ps):
            pg.page_id = p["id"]  # the passage id: gold passage ids are page ids
            where[p["id"]] = did
        docs.append(Document(did, ps[0]["title"] or did, language, f"{path.name}#{did}", text, pages))
    return docs, where, skipped


def _conversation(rec: dict, where: dict[str, str], path: Path, line_no: int, domain: str) -> list[Question]:
    """One conversation line -> its turns, or ValueError naming what is wrong."""
    cid = rec.get("conversation_id")
    if not isinstance(cid, str) or not cid:
        raise ValueError("missing conversation_id")
    turns = rec.get("turns")
    if not isinstance(turns, list) or not turns:
        raise ValueError(f"conversation {cid}: no turns")
    nums = [t.get("turn") if isinstance(t, dict) else None for t in turns]
    if any(isinstance(n, bool) or not isinstance(n, int) for n in nums) or nums != list(range(1, len(turns) + 1)):
        raise ValueError(f"conversation {cid}: missing or out-of-order turns (got {nums})")
    out = []
    for t in turns:
        q = t.get("question")
        if not isinstance(q, str) or not q.strip():
            raise ValueError(f"conversation {cid}: turn {t['turn']} is empty")
        gold = t.get("gold_passage_ids") or []
        unknown = [g for g in gold if g not in where]
        if unknown:
            raise ValueError(f"conversation {cid}: turn {t['turn']} has unknown passage id(s) {unknown[:3]}")
        for fld in ("answer", "rewrite", "rewritten_question", "task_id"):
            v = t.get(fld)
            if v is not None and not isinstance(v, str):
                raise ValueError(f"conversation {cid}: turn {t['turn']}: field {fld!r} must be a string, "
                                 f"got {json.dumps(v)[:40]}")
        if not isinstance(t.get("answerable", True), bool):
            raise ValueError(f"conversation {cid}: turn {t['turn']}: field 'answerable' must be true or false")
        answerability = str(t.get("answerability") or ("ANSWERABLE" if t.get("answerable", True) else "UNANSWERABLE"))
        answerable = bool(t.get("answerable", answerability in ("ANSWERABLE", "PARTIAL")))
        answer = t.get("answer") or ""
        evidence = [Evidence(where[g], g) for g in gold] if answerable else []
        out.append(Question(
            str(t.get("task_id") or f"{cid}::{t['turn']}"), q.strip(), [answer] if answer else [], answerable,
            answerability.lower(), "en", evidence,
            {"domain": domain, "answerability": answerability, "multi_turn": t.get("multi_turn") or "",
             "question_type": ",".join(t.get("question_type") or []), "filler": False},
            cid, int(t["turn"]), (t.get("rewritten_question") or "").strip()))
    return out


class Seen:
    """Conversation and turn ids already loaded: a second conversation with the same id, or a turn id
    used twice, is an error naming the line that first used it (never one item silently dropped)."""

    def __init__(self):
        self.convs: dict[str, int] = {}
        self.qids: dict[str, int] = {}

    def check(self, turns: list[Question], line_no: int) -> list[Question]:
        cid = turns[0].conversation_id
        if cid in self.convs:
            raise ValueError(f"duplicate conversation_id {cid!r} (first on line {self.convs[cid]}); "
                             "conversation skipped")
        dup = [q.qid for q in turns if q.qid in self.qids]
        ids = [q.qid for q in turns]
        dup += sorted({x for x in ids if ids.count(x) > 1} - set(dup))
        if dup:
            first = self.qids.get(dup[0])
            raise ValueError(f"conversation {cid}: duplicate turn id {dup[0]!r}"
                             + (f" (first on line {first})" if first else " (twice in this conversation)")
                             + "; conversation skipped")
        self.convs[cid] = line_no
        self.qids.update((q, line_no) for q in ids)
        return turns


def load_mtrag(folder: str | Path, name: str, insert_fillers: float = 0.0, seed: int = 0) -> Dataset:
    """An MTRAG subset folder: conversations.jsonl(.gz) + passages.jsonl(.gz)."""
    folder = Path(folder)
    pick = lambda stem: next((p for p in (folder / f"{stem}.jsonl.gz", folder / f"{stem}.jsonl") if p.exists()),  # noqa: E731
                             folder / f"{stem}.jsonl")
    docs, where, skipped = passages_to_documents(pick("passages"))
    questions = []
    conv_path = pick("conversations")
    seen = Seen()
    for line_no, line in _read_jsonl(conv_path, skipped):
        try:
            rec = loads_bounded(line)
            questions += seen.check(_conversation(rec, where, conv_path, line_no, str(rec.get("domain") or name)),
                                    line_no)
        except (ValueError, TypeError, AttributeError) as e:
            skipped.append(Skipped(str(conv_path), str(e), line_no))
    if insert_fillers:
        questions = with_fillers(questions, insert_fillers, seed)
    return Dataset(name, docs, questions, skipped)


def load_conversations_jsonl(path: str | Path, docs: list[Document]) -> tuple[list[Question], list[Skipped]]:
    """Users' own conversations (docs/conversations.md): one conversation a line,
    ``{"conversation_id", "turns": [{"turn", "question", "answer", "answerable", "rewrite",
    "passages": [page ids] | "evidence": [{"doc", "page"}]}]}``."""
    path = Path(path)
    where = {p.page_id: d.doc_id for d in docs for p in d.pages}
    by_doc = {d.doc_id: d for d in docs}
    questions, skipped = [], []
    seen = Seen()
    for line_no, line in _read_jsonl(path, skipped):
        try:
            rec = loads_bounded(line)
            if not isinstance(rec, dict):
                raise ValueError("a conversation line must be a JSON object")
            turns = []
            for t in rec.get("turns") or []:
                if not isinstance(t, dict):
                    raise ValueError("every turn must be a JSON object")
                ids = [str(x) for x in t.get("passages") or []]
                for ev in t.get("evidence") or []:
                    d = by_doc.get(ev.get("doc")) if isinstance(ev, dict) else None
                    if d is None:
                        raise ValueError(f"turn {t.get('turn')}: evidence points at an unknown document")
                    pno = ev.get("page", 0)
                    if isinstance(pno, bool) or not isinstance(pno, int) or not 0 <= pno < len(d.pages):
                        raise ValueError(f"turn {t.get('turn')}: page {pno!r} out of range for {d.doc_id!r}")
                    ids.append(d.pages[pno].page_id)
                turns.append({**t, "gold_passage_ids": ids, "rewritten_question": t.get("rewrite", "")})
            questions += seen.check(_conversation({**rec, "turns": turns}, where, path, line_no, path.stem), line_no)
        except (ValueError, TypeError, AttributeError) as e:
            skipped.append(Skipped(str(path), str(e), line_no))
    return questions, skipped


IS_CONVERSATION_PEEK = 4 * 1024 * 1024  # what deciding the file's kind reads of it: its head, never the whole file


def is_conversation_file(path: str | Path) -> bool:
    """Is the first record a conversation ({"turns": ...})? Reads the first non-blank line of the file's head only
    (a 1 GB questions file was read whole to answer this)."""
    path = Path(path)
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            head = f.read(IS_CONVERSATION_PEEK)
    else:
        with open(path, "rb") as f:
            head = f.read(IS_CONVERSATION_PEEK)
    if len(head) == IS_CONVERSATION_PEEK and b"\n" not in head.lstrip(b"\r\n\t "):
        # a first line longer than the peek: a conversation's object opens with its fields, "turns" among them
        return head.lstrip()[:1] == b"{" and b'"turns"' in head
    for _, line, _why in decode_lines(head):
        if line is None:
            return False
        try:
            first = loads_bounded(line)
        except ValueError:
            return False
        return isinstance(first, dict) and "turns" in first
    return False


def with_fillers(questions: list[Question], rate: float, seed: int = 0) -> list[Question]:
    """Insert realistic filler turns ("thanks", "ok") after turns, with probability ``rate`` each,
    seeded; marked ``metadata["filler"] = True`` and renumbered so turns stay 1..n."""
    if not 0 <= rate <= 1:
        raise ValueError(f"--insert-fillers must be within [0, 1], got {rate}")
    rng = random.Random(seed)
    out, by_conv = [], {}
    for q in questions:
        by_conv.setdefault(q.conversation_id, []).append(q)
    for cid, turns in by_conv.items():
        n = 0
        for i, q in enumerate(turns):
            n += 1
            out.append(Question(q.qid, q.text, q.answers, q.answerable, q.qtype, q.language, q.evidence,
                                {**q.metadata, "source_turn": q.turn}, cid, n, q.rewrite))
            if i < len(turns) - 1 and rng.random() < rate:
                n += 1
                out.append(Question(f"{cid}::filler{n}", rng.choice(FILLER_TEXTS), [FILLER_ANSWER], False, "filler",
                                    q.language, [], {**{k: "" for k in q.metadata}, "filler": True}, cid, n, ""))
    return out


def gold_bypass(q: Question) -> bool:
    """Should this turn skip retrieval? Inserted fillers and MTRAG's CONVERSATIONAL turns."""
    return bool(q.metadata.get("filler")) or q.metadata.get("answerability") == "CONVERSATIONAL"
