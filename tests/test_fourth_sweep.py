"""Issue 54, the fourth sweep of outside input: every refused encoding named on every client's path, every byte of
a compressed body counted (what follows a gzip stream is refused), secrets scrubbed in every spelling before any cut,
formula cells escaped in every CSV the product writes, and imports that never lose a row silently."""
import json
import os

import pytest

from openai_server import Handler, start
from rag.index.embedders import EmbedderConfig, get_embedder
from rag.llm.client import LLMClient, LLMConfig, _short
from rag.llm.urls import register_secret, scrub, scrub_cut


@pytest.fixture(scope="module")
def server():
    srv, url = start()
    yield url
    srv.shutdown()


@pytest.mark.parametrize("kind,said", [("br", "Content-Encoding 'br' is not supported"),
                                       ("zstd", "Content-Encoding 'zstd' is not supported"),
                                       ("compress", "Content-Encoding 'compress' is not supported"),
                                       ("gzipgzip", "Content-Encoding 'gzip, gzip' is not supported"),
                                       ("twice", "continues after the end of its gzip/deflate stream"),
                                       ("tail", "continues after the end of its gzip/deflate stream")])
def test_a_refused_encoding_is_named_on_the_answer_judge_and_embeddings_paths(server, kind, said):
    from evals.score.judges import LLMFaithfulness

    client = LLMClient(LLMConfig(server, f"enc-{kind}", "NO_SUCH_KEY_VAR", retries=0), None)
    res = client.chat([{"role": "user", "content": "hi"}])
    assert res.status == "error" and said in res.error and "Connection error" not in res.error
    judged = LLMFaithfulness(client).score("q?", "An answer [1].", ["a context"])
    assert judged.status == "error" and said in judged.detail
    with pytest.raises(Exception) as e:
        get_embedder(EmbedderConfig("openai", server, f"enc-{kind}", "NO_SUCH_KEY_VAR")).embed_passages(["a"])
    assert said in str(e.value) and "Connection error" not in str(e.value)


def test_what_follows_a_gzip_stream_is_counted_and_refused_not_stored(server):
    """20 s of junk after a valid reply was stored ok after ~62 MB: now the first byte past the stream's end is
    refused by name, whatever the junk's size, and raw deflate (no zlib header) is decoded, as browsers do."""
    Handler.tail_mb = 50  # far more than the cap: refused at the first chunk past the member, not read to the end
    try:
        client = LLMClient(LLMConfig(server, "enc-tail", "NO_SUCH_KEY_VAR", retries=0, timeout=20), None)
        res = client.chat([{"role": "user", "content": "hi"}])
        assert res.status == "error" and "continues after the end of its gzip/deflate stream" in res.error
    finally:
        Handler.tail_mb = 0.5
    ok = LLMClient(LLMConfig(server, "enc-deflate", "NO_SUCH_KEY_VAR", retries=0), None)
    assert ok.chat([{"role": "user", "content": "hi"}]).text == "fine"


def test_a_compressed_body_counts_its_bytes_read_against_the_cap():
    """The cap counts what is read off the wire as well as what is decoded (trailing bytes never hide in the
    decoder's unused data)."""
    import gzip

    import httpx

    from rag.llm.guard import ReadBudget, ResponseTooLarge

    req = httpx.Request("POST", "http://127.0.0.1/")
    b = ReadBudget(req, 10, 1000)
    b.check_headers(httpx.Response(200, headers={"content-encoding": "gzip"}))
    body = gzip.compress(os.urandom(3000))  # incompressible: 3 KB read for 3 KB decoded
    with pytest.raises(ResponseTooLarge):
        for i in range(0, len(body), 500):
            b.take(body[i:i + 500])
    assert b.raw <= 1500


def test_secrets_are_scrubbed_in_every_spelling_and_before_the_cut():
    secret = "TOKh2/Yw3Jk8%Zq9"
    register_secret(secret)
    raw = secret.encode()
    spellings = {"every byte %XX": "".join(f"%{x:02X}" for x in raw),
                 "every byte %xx": "".join(f"%{x:02x}" for x in raw),
                 "every character \\uXXXX": "".join(f"\\u{ord(c):04x}" for c in secret),
                 "JSON-escaped twice": json.dumps(json.dumps(secret))[1:-1],
                 "percent-encoded": "TOKh2%2FYw3Jk8%25Zq9"}
    for name, spelled in spellings.items():
        assert "***" in scrub(f"echo: api_key={spelled}&x=1"), name
        assert spelled not in scrub(f"echo: api_key={spelled}&x=1"), name
    # a secret straddling the cut: scrubbed whole, then cut (no prefix of it stays)
    text = "x" * 285 + "api_key=" + "TOKh2%2FYw3Jk8%25Zq9" + " and more"
    for cut in (scrub_cut(text, 300), _short(RuntimeError(text))):
        assert "TOK" not in cut and len(cut) <= 300
