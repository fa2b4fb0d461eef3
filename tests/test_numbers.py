"""Numbers that hold on real data (issue: SEC filings): PDF pages, truncation provenance, the
official SQuAD v2 script, pytrec_eval, sentences, evidence matching, remembered questions."""
import collections
import json
import random
import re
import string

import pytest

from evals.cli import main
from evals.score.metrics import (ScoringInput, exact_match, f1_score, normalize_answer, ranking_metrics, score_all,
                           squad_gold_answers)
from rag.answer.answerers import split_sentences
from rag.ingest.folders import load_folder
from rag.index.embedders import EmbedderConfig
from rag.index.workspace import IndexConfig, Workspace
from rag.models import Evidence, Question
from rag.answer.prompts import strip_citations
from rag.strategies import Block, BaseParams, cut_provenance, pack_blocks
from rag.ingest.textmatch import locate, normalize_with_map
from pdfgen import make_pdf

HASH = IndexConfig(embedder=EmbedderConfig("hash"))


# --------------------------------------------------------------------------- the official SQuAD v2.0 script
# normalize_answer / get_tokens / compute_exact / compute_f1 and the gold filtering of
# evaluate-v2.0.py (https://rajpurkar.github.io/SQuAD-explorer/), copied as the oracle.

def _off_normalize(s):
    def remove_articles(text):
        return re.sub(re.compile(r"\b(a|an|the)\b", re.UNICODE), " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def _off_tokens(s):
    return _off_normalize(s).split() if s else []


def _off_exact(a_gold, a_pred):
    return int(_off_normalize(a_gold) == _off_normalize(a_pred))


def _off_f1(a_gold, a_pred):
    gold_toks, pred_toks = _off_tokens(a_gold), _off_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision, recall = num_same / len(pred_toks), num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def _off_scores(answers, pred):
    gold = [a for a in answers if _off_normalize(a)] or [""]
    return max(_off_exact(a, pred) for a in gold), max(_off_f1(a, pred) for a in gold)


CASES = [
    (["renewal of hostilities", ".", "the Arab–Israeli conflict"], "The"),  # the bundled gold "."
    (["."], "The"),
    (["."], "something"),
    (["Denmark Iceland"], strip_citations("Denmark[1]Iceland")),
    (["Oslo"], strip_citations("Oslo [1].")),
    (["the Eiffel Tower", "Eiffel"], "eiffel tower!"),
    (["1,000 km"], "1000 km"),
    (["a"], ""),
]


@pytest.mark.parametrize("answers,pred", CASES)
def test_em_f1_equal_the_official_squad_v2_script(answers, pred):
    golds = squad_gold_answers(answers)
    em = max(exact_match(pred, g) for g in golds)
    f1 = max(f1_score(pred, g) for g in golds)
    assert (em, f1) == pytest.approx(_off_scores(answers, pred))


def test_gold_dot_no_longer_gives_em_1_and_citations_leave_a_space():
    q = Question("q", "What released the pressure?", ["renewal of hostilities", "."], True, "extractive", "en", [])
    s = score_all(ScoringInput(q, [], "The [1]"), None)
    assert s["em"].value == 0.0  # was 1.0 against the gold "."
    assert strip_citations("Denmark[1]Iceland") == "Denmark Iceland"
    assert f1_score(strip_citations("Denmark[1]Iceland"), "Denmark Iceland") == 1.0
    rng = random.Random(3)
    words = ["the", "a", "Paris", "tower", "1,5", "U.S.", "an", "-", "Eiffel", "!", "café", ""]
    for _ in range(400):  # random strings: normalisation identical to the script's
        t = " ".join(rng.choice(words) for _ in range(rng.randint(0, 6)))
        assert normalize_answer(t) == _off_normalize(t)


# --------------------------------------------------------------------------- pytrec_eval parity

def test_ranking_metrics_equal_pytrec_eval_on_random_rankings():
    import pytrec_eval  # pytrec-eval-terrier, in the test extras: the outside oracle
    rng = random.Random(7)
    qrels, run, ours = {}, {}, {}
    for qi in range(300):
        docs = [f"d{i}" for i in range(rng.randint(1, 30))]
        rel = set(rng.sample(docs, rng.randint(1, min(6, len(docs)))))
        ranked = rng.sample(docs, rng.randint(0, len(docs)))
        q = f"q{qi}"
        qrels[q] = {d: 1 for d in rel}
        run[q] = {d: float(len(ranked) - i) for i, d in enumerate(ranked)}
        ours[q] = (ranked, rel)
    for k in (1, 3, 5, 10, 20):
        ev = pytrec_eval.RelevanceEvaluator(qrels, {f"recall_{k}", f"ndcg_cut_{k}", "recip_rank"})
        res = ev.evaluate({q: ({d: s for d, s in r.items()} if r else {"none": 0.0}) for q, r in run.items()})
        for q, (ranked, rel) in ours.items():
            m = ranking_metrics(ranked, rel, k)
            assert m["recall"] == pytest.approx(res[q][f"recall_{k}"], abs=1e-9)
            assert m["ndcg"] == pytest.approx(res[q][f"ndcg_cut_{k}"], abs=1e-9)
            if k >= len(ranked):  # MRR@k with the cut beyond the ranking is plain reciprocal rank
                assert m["mrr"] == pytest.approx(res[q]["recip_rank"], abs=1e-9)


# --------------------------------------------------------------------------- sentences

@pytest.mark.parametrize("text,expected", [
    ("The U.S. Navy bought oil from Saudi Arabia [1].", 1),
    ("Revenue grew 3.5 percent in 2023. Costs fell [2].", 2),
    ("See example.com for details. It is free.", 2),
    ("J. K. Rowling wrote it. She lives in Edinburgh.", 2),
    ("Steps:\n1. Open the valve.\n2. Close it.", 3),
    ("Dr. Smith met Acme Inc. at 5 p.m. yesterday.", 1),
    ("It ended. [1][2] Then it began again [3].", 2),
])
def test_sentence_splitter(text, expected):
    assert len(split_sentences(text)) == expected, split_sentences(text)


def test_faithfulness_counts_the_us_sentence_once():
    q = Question("q", "Who bought oil?", ["The U.S. Navy"], True, "extractive", "en", [])
    b = Block(1, "The U.S. Navy bought oil from Saudi Arabia in 1973.", "chunks", ("d",), ("d#p0",), ("c",),
              (("d", 0, 50),), 12, 0.9)
    s = score_all(ScoringInput(q, [b], "The U.S. Navy bought oil from Saudi Arabia [1]."))
    assert s["faithfulness"].value == 1.0 and s["statement_coverage"].value == 1.0


def test_extractive_answerer_metrics_by_construction_are_not_applicable():
    q = Question("q", "Who bought oil?", ["The U.S. Navy"], True, "extractive", "en", [])
    b = Block(1, "The U.S. Navy bought oil.", "chunks", ("d",), ("d#p0",), ("c",), (("d", 0, 25),), 8, 0.9)
    from rag.answer.answerers import ExtractiveAnswerer
    s = score_all(ScoringInput(q, [b], "The U.S. Navy bought oil. [1]",
                               by_construction=ExtractiveAnswerer.by_construction))
    for m in ("faithfulness", "citation_validity", "statement_coverage"):
        assert s[m].status == "not_applicable" and s[m].value is None and "extractive" in s[m].detail
    assert s["f1"].status == "ok"


# --------------------------------------------------------------------------- evidence matching

def test_normalised_and_fuzzy_matching_map_back_to_original_offsets():
    page = "Our inter-\nnational  revenue grew 12.5%\nto $4.1 billion; the “ﬁnal” figure."
    m = locate("international revenue grew 12.5% to $4.1 billion", page)
    assert m.method == "normalized" and page[m.start:m.end].startswith("inter-\nnational")
    assert page[m.end - 7:m.end] == "billion"
    m = locate('the "final" figure', page)
    assert m.method == "normalized" and page[m.start:m.end] == "the “ﬁnal” figure"
    m = locate("international revenue grew 12.6% to $4.1 billion", page)  # one typo: fuzzy
    assert m.method == "fuzzy" and m.ratio >= 0.85 and "revenue" in page[m.start:m.end]
    assert locate("net loss widened sharply in Europe", page) is None
    norm, offs = normalize_with_map(page)
    assert len(offs) == len(norm) + 1 and offs[-1] == len(page)


def test_fuzzy_matching_takes_the_best_window_and_the_earliest_of_equals():
    """The fuzzy search scores the windows sharing most words first (speed: the best bounds out the rest); the answer
    stays the one a left-to-right scan gives: the highest ratio, and of equal ratios the earliest window."""
    near = "the quarterly revenue grew 12.6% to 4.1 billion dollars"
    page = ("Filler words about nothing at all. The quarterly revenue grew 11.9% to 3.8 billion dollars in the east. "
            "More filler here. The quarterly revenue grew 12.5% to 4.1 billion dollars in the west. End. "
            "The quarterly revenue grew 12.5% to 4.1 billion dollars in the west. Again.")
    m = locate(near, page)
    first = page.index("The quarterly revenue grew 12.5%")
    assert m.method == "fuzzy" and m.start == first and "4.1 billion" in page[m.start:m.end]
    east = locate(near, page[:first])  # the nearer-worded window before it scores lower
    assert east is None or east.ratio < m.ratio
    # the same answer on a region whose words the search keeps between calls
    assert locate(near, page) == m
    assert locate("record 9 says the river floods", page) is None


def test_fuzzy_matching_is_bounded_for_long_or_shuffled_text():
    """Outside text is bounded before difflib (quadratic): a context of a document's own words shuffled passed every
    ratio bound (50 s a document). Past FUZZY_MAX_CHARS only exact and normalised matches count, as documented; a
    short near-copy inside a long page is still found fuzzily."""
    import random

    from rag.ingest.textmatch import FUZZY_MAX_CHARS

    words = [f"w{i % 97}" for i in range(6000)]
    page = " ".join(words[:3000]) + " the quarterly revenue grew 12.5% to 4.1 billion dollars " + " ".join(words[3000:])
    near = "the quarterly revenue grew 12.6% to 4.1 billion dollars"
    m = locate(near, page)
    assert m.method == "fuzzy" and "4.1 billion" in page[m.start:m.end]
    long_text = " ".join(words[100:400])
    assert len(long_text) > FUZZY_MAX_CHARS
    assert locate(long_text, page).method == "exact"  # longer text still matches exactly
    typo = long_text.replace("w5 ", "w5x ", 1)
    assert locate(typo, page) is None  # but not fuzzily: unmatched, said by the caller's counts
    shuffled = words[:140]
    random.Random(0).shuffle(shuffled)
    assert locate(" ".join(shuffled), page) is None


def _filing(root):
    root.mkdir()
    make_pdf(root / "10k.pdf", [
        ["ACME CORP ANNUAL REPORT", "Fiscal year 2024."],
        [],  # a blank page, as filings have
        ["Item 7. Results of operations.", "Our inter-", "national revenue grew 12.5% to $4.1", "billion in fiscal 2024."],
    ])
    (root / "notes.md").write_text("# Notes\n\nThe auditor is Smith & Co.\n")


def test_blank_pdf_page_keeps_its_index_and_page_evidence_resolves(tmp_path):
    root = tmp_path / "corpus"
    _filing(root)
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps(r) for r in [
        {"id": "rev", "question": "How much did international revenue grow?", "answers": ["12.5%"],
         "company": "ACME", "doc_type": "10-K",
         "evidence": [{"doc": "10k.pdf", "page": 2, "text": "international revenue grew 12.5% to $4.1 billion"}]},
        {"id": "pg", "question": "What is on the last page?", "answers": ["results"],
         "evidence": [{"doc": "10k.pdf", "page": 2}]},
        {"id": "typo", "question": "Revenue?", "answers": ["x"], "company": "ACME",
         "evidence": [{"doc": "10k.pdf", "page": 2, "text": "international revenue grew 12.6% to $4.1 billion"}]},
        {"id": "gone", "question": "Nothing?", "answers": ["x"],
         "evidence": [{"doc": "10k.pdf", "page": 2, "text": "completely different words about lunar mining"},
                      {"doc": "nope.pdf"}]},
    ]) + "\n")
    ds = load_folder(root, q)
    doc = ds.doc("10k.pdf")
    assert [p.page_no for p in doc.pages] == [0, 1, 2] and doc.pages[1].text == ""
    by = {x.qid: x for x in ds.questions}
    assert set(by) == {"rev", "pg", "typo", "gone"}  # one unmatched item never drops a question
    ev = by["rev"].evidence[0]
    assert ev.page_id == doc.pages[2].page_id and ev.start is not None
    assert doc.text[ev.start:ev.end].replace("-\n", "").replace("\n", " ").startswith("international revenue")
    assert by["pg"].evidence[0].page_id == doc.pages[2].page_id  # the page a PDF viewer shows as 3
    assert by["typo"].evidence[0].start is not None  # fuzzy
    assert by["gone"].evidence == [Evidence("10k.pdf", doc.pages[2].page_id)]  # downgraded to page level
    assert by["rev"].metadata == {"company": "ACME", "doc_type": "10-K"}
    warnings = [str(s) for s in ds.skipped if s.kind == "warning"]
    assert any("normalized" in w for w in warnings) and any("fuzzy" in w for w in warnings)
    assert any("not found" in w and "page 2" in w and "10k.pdf" in w for w in warnings)
    assert any("unknown document 'nope.pdf'" in w for w in warnings)
    summ = Workspace(tmp_path / "ws").ingest(ds, HASH, progress=False)
    assert summ.pages == 4 and summ.blank_pages == 1 and "(1 blank)" in summ.render()


def test_wrongly_typed_gold_fields_are_named(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nAlpha text.\n")
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "question": "?", "answerable": "false"},
        {"id": ["x"], "question": "?"},  # (a null or missing id is derived from the text: docs/datasets.md)
        {"id": "b", "question": "?", "evidence": {"doc": "a.md"}},
        {"id": "c", "question": "?", "evidence": [{"doc": "a.md", "page": "0"}]},
        {"id": "ok", "question": "Alpha?", "answers": ["Alpha"], "evidence": [{"doc": "a.md", "page": 0}]},
    ]) + "\n")
    ds = load_folder(root, q)
    reasons = {s.line: s.reason for s in ds.skipped}
    assert "'answerable'" in reasons[1] and "'id'" in reasons[2] and "'evidence'" in reasons[3]
    assert "'evidence[0].page'" in reasons[4]
    assert [x.qid for x in ds.questions] == ["ok"]


# --------------------------------------------------------------------------- truncation provenance

def test_truncated_multi_page_block_keeps_only_what_it_shows():
    pages = ["First page talks about revenue. " * 6, "Second page covers costs. " * 6, "Third page lists risks. " * 6]
    text = "\n\n".join(pages)
    starts = [0, len(pages[0]) + 2, len(pages[0]) + len(pages[1]) + 4]
    offsets = {"d#p0": starts[0], "d#p1": starts[1], "d#p2": starts[2],
               "d#p0/c0": 0, "d#p1/c0": starts[1], "d#p2/c0": starts[2]}
    raw = [(text, "documents", ("d",), ("d#p2", "d#p0", "d#p1"), ("d#p0/c0", "d#p1/c0", "d#p2/c0"),
            (("d", 0, len(text)),), 200, 0.9, offsets)]
    from rag.tokens import count_tokens
    budget = count_tokens(pages[0] + "\n\n" + pages[1][:60], "o200k_base")
    b = pack_blocks(raw, BaseParams(max_context_tokens=budget), "o200k_base")[0]
    assert b.truncated and len(b.text) < len(text)
    assert starts[1] < len(b.text) < starts[2]
    assert b.page_ids == ("d#p0", "d#p1")  # p2 was listed first but is not shown; order kept
    assert b.chunk_ids == ("d#p0/c0", "d#p1/c0")
    assert b.spans == (("d", 0, len(b.text)),)
    assert cut_provenance(5, ("d",), ("a", "b"), (), (("d", 10, 20), ("d", 30, 40)), {"b": 7}) == \
        (("d",), ("a",), (), (("d", 10, 15),))


def test_full_documents_under_a_token_cap_lists_only_shown_pages(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    make_pdf(root / "long.pdf", [[f"Page {i} of the filing discusses segment {i} revenue and margins."] * 3
                                 for i in range(12)])
    ds = load_folder(root)
    summ = Workspace(tmp_path / "ws").ingest(ds, HASH, progress=False)
    from rag.index.retrieval import Retriever
    from rag.strategies import retrieve
    r = Retriever(Workspace(tmp_path / "ws"), summ.index)
    full = retrieve(r, "full_documents", "segment 3 revenue")
    capped = retrieve(r, "full_documents", "segment 3 revenue", max_context_tokens=60)
    assert len(full.blocks[0].page_ids) == 12
    b = capped.blocks[0]
    assert b.truncated and 1 <= len(b.page_ids) < 12
    pages = r.reader.pages
    assert all(pages[p]["start"] < len(b.text) for p in b.page_ids)
    assert all(int(r.reader.starts[r.reader.rows[c]]) < len(b.text) for c in b.chunk_ids)
    assert b.spans[0][2] == len(b.text)
    # pages ranked by their best retrieved chunk: the page that matches the query best comes first
    assert full.blocks[0].page_ids[0] in {c.rsplit("/", 1)[0] for c in full.blocks[0].chunk_ids}


# --------------------------------------------------------------------------- runs never do less than asked

def test_run_without_questions_uses_the_remembered_file_and_never_scores_zero(tmp_path, capsys):
    root = tmp_path / "corpus"
    _filing(root)
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "rev", "question": "How much did international revenue grow?",
                             "answers": ["12.5%"], "company": "ACME",
                             "evidence": [{"doc": "10k.pdf", "page": 2}]}) + "\n")
    ws = tmp_path / "ws"
    common = ["--workspace", str(ws), "--embedder", "hash", "--no-progress", "--no-report"]
    assert main(["ingest", str(root), "--questions", str(q), "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress"]) == 0
    assert main(["run", "--dataset", str(root), "--run-id", "R1", "--strategies", "chunks"] + common) == 0
    err = capsys.readouterr().err
    assert "remembered" in err and str(q.resolve()) in err
    from evals.store import ResultStore
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        assert st.run("R1")["status"] == "finished"
        assert len(st.results("R1")) == 1
        assert len(st.questions("corpus")) == 1
    assert main(["show", "R1", "--by", "company", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert "ACME" in out and "page_recall@10" in out
    other = tmp_path / "bare"
    _filing(other)
    assert main(["run", "--dataset", str(other), "--run-id", "R2"] + common) == 2
    assert "no questions to score" in capsys.readouterr().err
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        assert "R2" not in set(st.runs().run_id)
        assert len(st.questions("corpus")) == 1  # nothing stored was deleted


def test_retrieve_ms_is_the_questions_own_search_in_any_grid(tmp_path):
    from evals.run.runner import RunConfig, run_evaluation
    from evals.store import ResultStore
    ws = tmp_path / "ws"
    grid1 = {"hybrid": {}}
    grid6 = {"hybrid": {"top_k": [2, 4, 6, 8, 10, 12]}}
    for rid, grid in (("one", grid1), ("six", grid6)):
        run_evaluation(RunConfig(dataset="xquad-en", index=HASH, grid=grid, limit=20), ws, run_id=rid,
                       progress=False)
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        one = st.results("one").set_index("question_id").retrieve_ms
        six = st.results("six")
    per_q = six.groupby("question_id").retrieve_ms.agg(["min", "max"])
    assert (per_q["min"] == per_q["max"]).all()  # every point of a question reports the same search
    assert (six.retrieve_ms > 0).all() and (one > 0).all()
