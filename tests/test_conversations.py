"""Conversation memory: MTRAG importers, memory policies on a hand-built conversation, the bloat
ordering, retrieval bypass on inserted fillers, export columns, bad conversation input."""
import json

import numpy as np
import pandas as pd
import pytest

from evals.cli import main
from rag.ingest.conversations import gold_bypass, load_mtrag, with_fillers
from rag.ingest.readers import datasets_dir
from rag.ingest.corpora import load_bundled
from rag.ingest.folders import load_folder
from rag.answer.memory import (FillerDetector, MemoryContext, TurnRecord, build_history, filler_rule, make_memory_params,
                        retrieval_query)


@pytest.mark.parametrize("name,convs,turns,passages", [("mtrag-govt", 28, 214, 833), ("mtrag-clapnq", 29, 224, 2000)])
def test_mtrag_importers(name, convs, turns, passages):
    ds = load_bundled(name)
    assert not ds.skipped
    assert len({q.conversation_id for q in ds.questions}) == convs and len(ds.questions) == turns
    pages = {p.page_id: d for d in ds.documents for p in d.pages}
    assert len(pages) == passages
    for q in ds.questions:
        for e in q.evidence:  # gold passages are pages of their documents
            assert pages[e.page_id].doc_id == e.doc_id
    by_conv = {}
    for q in ds.questions:
        by_conv.setdefault(q.conversation_id, []).append(q.turn)
    assert all(t == list(range(1, len(t) + 1)) for t in by_conv.values())
    assert sum(1 for q in ds.questions if q.rewrite) >= 0.9 * turns
    doc = ds.documents[0]
    assert all(doc.text[p.start:p.end] == p.text for p in doc.pages)


def _four_turns():
    return [TurnRecord(1, "What is a safe room?", "A room built to FEMA criteria for tornadoes.", ["B1"]),
            TurnRecord(2, "Who pays for one?", "Grants may cover part of the cost.", ["B2"]),
            TurnRecord(3, "How big should it be?", "Big enough for everyone in the house.", ["B3"]),
            TurnRecord(4, "Can it flood?", "Below-ground rooms can flood in storms.", ["B4"])]


def _ctx():
    words = ["safe", "room", "grant", "cost", "big", "flood", "tornado", "fema"]

    def embed(texts):  # a transparent embedder: one axis per word
        m = np.array([[t.lower().count(w) for w in words] for t in texts], np.float32) + 1e-3
        return m / np.linalg.norm(m, axis=1, keepdims=True)
    return MemoryContext(embed=embed)


def _users(msgs):
    return [m["content"] for m in msgs if m["role"] == "user"]


def test_each_policy_holds_exactly_the_right_turns():
    from rag.strategies import Block
    past = _four_turns()
    for r, t in zip(past, "ABCD"):
        r.blocks = [Block(1, f"block text {t}", "chunks", ("d",), ("p",), ("c",), (("d", 0, 12),), 3, 1.0)]
    current = "What did the grant cost cover?"
    ctx = _ctx()
    assert build_history("none", make_memory_params("none"), past, current, ctx) == []
    full = build_history("full_history", make_memory_params("full_history"), past, current, ctx)
    assert len(full) == 8 and all(f"block text {t}" in u for u, t in zip(_users(full), "ABCD"))
    win = build_history("window", make_memory_params("window", window_turns=2), past, current, ctx)
    assert _users(win) == ["How big should it be?", "Can it flood?"] and "block text" not in str(win)
    rt = build_history("retrieved_turns", make_memory_params("retrieved_turns", recent_turns=2, top_k=1), past,
                       current, ctx)
    assert rt[0]["role"] == "system" and "(turn 2)" in rt[0]["content"] and "(turn 1)" not in rt[0]["content"]
    assert _users(rt) == ["How big should it be?", "Can it flood?"]
    rt2 = build_history("retrieved_turns", make_memory_params("retrieved_turns", recent_turns=1, top_k=2), past,
                        current, ctx)
    body = rt2[0]["content"]
    assert body.index("(turn 1)") < body.index("(turn 2)")  # chronological, not rank order
    rs = build_history("recent_summaries", make_memory_params("recent_summaries", entries=3, snippet_chars=10),
                       past, current, ctx)
    assert len(rs) == 1 and "What is a safe room?" not in rs[0]["content"]  # only the 3 most recent
    assert rs[0]["content"].index("Can it flood?") < rs[0]["content"].index("Who pays for one?")  # newest first
    assert "Memory: Below-grou\n" in rs[0]["content"] + "\n"  # snippet cut at 10 characters
    capped = build_history("full_history", make_memory_params("full_history", max_history_tokens=40), past,
                           current, ctx)
    assert 0 < len(capped) < len(full) and capped == full[-len(capped):]  # oldest dropped first
    assert retrieval_query("history_concat", current, past, query_turns=2) == \
        "How big should it be? Can it flood? What did the grant cost cover?"
    assert retrieval_query("gold_rewrite", current, past, gold_rewrite="standalone?") == "standalone?"
    with pytest.raises(ValueError, match="needs an LLM"):
        retrieval_query("rewrite", current, past)


def test_bypass_detects_inserted_fillers():
    ds = load_bundled("mtrag-govt")
    qs = with_fillers(ds.questions, 0.4, seed=3)
    fillers = [q for q in qs if q.metadata.get("filler")]
    assert len(fillers) > 40 and all(q.qtype == "filler" for q in fillers)
    assert [q.turn for q in qs if q.conversation_id == qs[0].conversation_id] == \
        list(range(1, 1 + sum(1 for q in qs if q.conversation_id == qs[0].conversation_id)))
    assert qs == with_fillers(ds.questions, 0.4, seed=3)  # seeded
    det = FillerDetector()
    pred = [det(q.text) for q in qs]
    gold = [gold_bypass(q) for q in qs]
    tp = sum(p and g for p, g in zip(pred, gold))
    precision, recall = tp / max(1, sum(pred)), tp / max(1, sum(gold))
    assert precision >= 0.95 and recall >= 0.9
    assert filler_rule("thanks!") and filler_rule("Ok, thank you so much") and not filler_rule("thanks, what about taxes?")


def _small_conversations(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    for i in range(3):
        (root / f"doc{i}.md").write_text(f"# Topic {i}\n\n" + " ".join(f"Fact {i}.{j} about topic {i} and items "
                                                                          f"{j}." for j in range(60)) + "\n")
    conv = [{"conversation_id": f"c{c}", "turns": [
        {"turn": t, "question": f"Tell me fact {c}.{t} about topic {c}?", "answer": f"Fact {c}.{t} about topic {c}. "
         * 8, "answerable": True, "passages": ["doc%d.md#p0" % c], "rewrite": f"What is fact {c}.{t}?"}
        for t in range(1, 7)]} for c in range(3)]
    q = tmp_path / "conv.jsonl"
    q.write_text("\n".join(json.dumps(x) for x in conv) + "\n")
    return root, q


def test_bloat_ordering_and_export_columns(tmp_path):
    root, q = _small_conversations(tmp_path)
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", str(root), "--questions", str(q), "--embedder", "hash", "--workspace", str(ws),
                 "--strategies", "chunks", "--memory", "none,full_history,window,retrieved_turns",
                 "--query-mode", "last_turn,gold_rewrite", "--set", "memory.window_turns=1", "--run-id", "C",
                 "--no-progress", "--no-report"]) == 0
    assert main(["export", "C", "--format", "csv", "--out", str(tmp_path / "x"), "--workspace", str(ws)]) == 0
    res = pd.read_csv(tmp_path / "x" / "C_results.csv")
    assert {"conversation_id", "turn", "query_mode"} <= set(res.columns)
    assert len(res) == 18 * 4 * 2 and set(res.turn) == set(range(1, 7))
    res["memory"] = [json.loads(p)["memory"]["policy"] for p in res.params]
    late = res[res.turn >= 4].groupby("memory").prompt_tokens.mean()
    assert late["full_history"] > late["retrieved_turns"] > late["none"]
    assert late["full_history"] > late["window"] > late["none"]
    grow = res[res.memory == "full_history"].groupby("turn").prompt_tokens.mean()
    assert grow.is_monotonic_increasing and grow[6] > 2 * grow[1]  # the bloat curve
    flat = res[res.memory == "window"].groupby("turn").prompt_tokens.mean()
    assert flat[6] < 1.5 * flat[2]  # bounded


def test_bad_conversations_are_named_and_skipped(tmp_path):
    root, q = _small_conversations(tmp_path)
    lines = q.read_text().splitlines()
    bad = [json.loads(lines[0]), json.loads(lines[0]), json.loads(lines[0])]
    bad[0]["conversation_id"], bad[0]["turns"] = "gap", [bad[0]["turns"][0], bad[0]["turns"][2]]
    bad[1]["conversation_id"] = "ghost"
    bad[1]["turns"][1]["passages"] = ["nope#p9"]
    bad[2]["conversation_id"] = "empty"
    bad[2]["turns"][2]["question"] = "  "
    q.write_text("\n".join(lines + [json.dumps(b) for b in bad]) + "\n")
    ds = load_folder(root, q)
    reasons = {s.line: s.reason for s in ds.skipped}
    assert "out-of-order" in reasons[4] and "unknown passage" in reasons[5] and "empty" in reasons[6]
    assert all(str(q) in s.path for s in ds.skipped)
    assert len({x.conversation_id for x in ds.questions}) == 3
    # MTRAG-format files are checked the same way
    src = tmp_path / "m"
    src.mkdir()
    import gzip
    (src / "passages.jsonl").write_bytes(gzip.decompress((datasets_dir() / "mtrag" / "govt" / "passages.jsonl.gz")
                                                         .read_bytes()))
    convs = gzip.decompress((datasets_dir() / "mtrag" / "govt" / "conversations.jsonl.gz").read_bytes()).decode()
    first = json.loads(convs.splitlines()[0])
    first["turns"] = first["turns"][::-1]
    (src / "conversations.jsonl").write_text("\n".join([json.dumps(first)] + convs.splitlines()[1:]) + "\n")
    m = load_mtrag(src, "m")
    assert len(m.skipped) == 1 and m.skipped[0].line == 1 and "out-of-order" in m.skipped[0].reason
    assert len({x.conversation_id for x in m.questions}) == 27
