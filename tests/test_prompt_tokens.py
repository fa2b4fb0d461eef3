"""The memoised prompt count (``count_prompt_tokens``) equals encoding the whole prompt, exactly."""
import gzip
import json
import random
from pathlib import Path

import pytest

from rag.answer.prompts import build_messages, count_prompt_tokens, prompt_tokens
from rag.strategies import Block

DATA = Path(__file__).resolve().parents[1] / "datasets"

# texts whose ends and starts stress tiktoken's split regex at the cuts: trailing spaces, tabs and
# newlines, punctuation runs, slashes, digits, apostrophes, special-token text, CJK, emoji, empty
ADVERSARIAL = ["", " ", "ends with spaces   ", "ends with tab\t", "ends with newline\n", "trailing\r\n\r\n",
               "3.14", "1,000,000", "a/b/", "end.", "end?!", "…", "--", "x's", "don't", "'ll",
               "<|endoftext|>", "<|endoftext|", "日本語のテキスト。", "emoji 🎉🎉", "Ελληνικά.", "русский текст",
               "[1]", "[2][3]", "## heading", "(paren)", "Question: inner\nAnswer:", "\n", "  \n  ", "ALLCAPS",
               "mixedCASEWord", "https://example.com/a?b=c", "/leading slash", "//", "\nleading newline",
               "'s leading apostrophe", "\u00a0non-breaking space", "tab\tinside", "   leading spaces"]


def _texts():
    out = list(ADVERSARIAL)
    for name in ("squad2/squad2-dev-subset.json.gz", "xquad/xquad.el.json.gz", "xquad/xquad.ru.json.gz"):
        data = json.loads(gzip.open(DATA / name).read())
        for art in data["data"][:3]:
            for p in art["paragraphs"][:12]:
                out.append(p["context"])
                out.append(p["context"][: len(p["context"]) // 3])  # cut mid-sentence
    return out


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_count_prompt_tokens_equals_whole_prompt(encoding):
    rng = random.Random(7)
    texts = _texts()
    groups = ["chunks", "pages", "documents", "parents"]
    for trial in range(300):
        k = rng.randint(0, 6)
        first = rng.choice([1, 1, 9, 99, 999, 1000, 12345])  # markers of 1 to 5 digits
        blocks = [Block(n=first + i, text=rng.choice(texts), group=rng.choice(groups[:2]) if trial % 2 else "chunks",
                        doc_ids=(f"doc {rng.randint(1, 9)}",), page_ids=((f"p{i}",) if rng.random() < .5 else ()),
                        chunk_ids=(), spans=(), n_tokens=0, score=0.0) for i in range(k)]
        question = rng.choice(texts[:40])
        history = ([{"role": "user", "content": rng.choice(texts)}, {"role": "assistant", "content": rng.choice(texts)}]
                   if trial % 3 == 0 else None)
        want = prompt_tokens(build_messages(question, blocks, history=history), encoding)
        assert count_prompt_tokens(question, blocks, history, encoding) == want, (trial, [b.text[-20:] for b in blocks])


def test_blocks_json_equals_json_dumps_of_each_block():
    import numpy as np

    from rag.strategies import blocks_json

    texts = _texts()
    blocks = [Block(n=i + 1, text=t, group="pages", doc_ids=("Ελλάδα.md",), page_ids=(f"p{i}",), chunk_ids=("c1", "c2"),
                    spans=(("Ελλάδα.md", i, i + len(t)),), n_tokens=i, score=np.float32(0.1 * i), truncated=i % 2 == 0)
              for i, t in enumerate(texts[:60])]
    blocks.append(Block(n=99, text="lists inside", group="chunks", doc_ids=["d"], page_ids=[], chunk_ids=[],
                        spans=[["d", 0, 5]], n_tokens=2, score=-0.0, truncated=False))  # unhashable: not memoised
    want = json.dumps([b.to_dict() for b in blocks], ensure_ascii=False)
    assert blocks_json(blocks) == want
    assert blocks_json(blocks) == want  # second time from the memo
    assert blocks_json([]) == "[]"
