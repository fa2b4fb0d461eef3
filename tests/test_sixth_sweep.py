"""Outside input, sixth sweep (issue 73), each item from its repro as a user hits it: real files, a real 127.0.0.1
server, real kills."""
import base64
import json
import re
import sqlite3
from pathlib import Path

import duckdb

from evals.cli import main

ANSWER_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # 40 characters, not key-shaped (no sk- to give it away)
JUDGE_KEY = "Zq8/Lm3+Rt6Vw9Yb2Nc5Xd7Fg1Hj4Kp0Qs/Tu"


def _forms(key: str) -> set[str]:
    """The key as the echo spells it, computed here apart from the scrubber: raw, percent-encoded (hex upper; the
    text is compared with its %xx upper-cased), base64 at each alignment (the characters that carry the key's bytes
    alone), hex in either case, JSON with \\/ escapes."""
    raw = key.encode()
    pct = "".join(f"%{b:02X}" if chr(b) in "/+=:" else chr(b) for b in raw)
    out = {key, pct, raw.hex(), raw.hex().upper(), json.dumps(key).replace("/", "\\/")[1:-1]}
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + raw).decode().rstrip("=")
        out.add(enc[(shift * 8 + 5) // 6:-1])
    return out


def _leaks(text: str, key: str, run: int = 16) -> list[str]:
    text = re.sub(r"%[0-9a-fA-F]{2}", lambda m: m.group().upper(), text)
    return sorted({f[k:k + run] for f in _forms(key) for k in range(len(f) - run + 1) if f[k:k + run] in text})


def test_a_key_echoed_encoded_and_cut_short_is_stored_and_printed_nowhere(tmp_path, monkeypatch, capsys):
    """Item 1: a server echoing the answerer's and the judge's keys percent-encoded (mixed hex case), as base64,
    hex and JSON-escaped, each cut at 16-30 characters, left 26 of 40 characters readable in results, scores'
    detail, the response cache, exports, the report and the terminal."""
    from openai_server import start

    srv, url = start()
    ws = tmp_path / "ws"
    monkeypatch.setenv("RAGWB_T_KEY", ANSWER_KEY)
    monkeypatch.setenv("RAGWB_J_KEY", JUDGE_KEY)
    printed = []
    try:
        for cut in (16, 23, 30):
            # an answer that echoes it (the judge echoes its own key: every verdict a parse error, exit 7), and a 400
            for prefix, rc in (("", 7), ("fault-", 6)):
                rid = f"{prefix}E{cut}"
                assert main(["run", "--dataset", "squad2", "--limit", "2", "--embedder", "hash", "--strategies",
                             "chunks", "--workspace", str(ws), "--no-progress", "--run-id", rid, "--retries", "0",
                             "--llm-base-url", url, "--llm-model", f"{prefix}echo-encoded-{cut}",
                             "--llm-key-env", "RAGWB_T_KEY", "--judge-base-url", url,
                             "--judge-model", f"echo-encoded-{cut}", "--judge-key-env", "RAGWB_J_KEY",
                             "--judges", "llm_faithfulness", "--yes"]) == rc
                assert main(["export", rid, "--format", "csv", "--out", str(tmp_path / "x" / rid),
                             "--workspace", str(ws)]) == 0
                assert main(["show", rid, "--workspace", str(ws)]) == 0
                out = capsys.readouterr()
                printed.append(out.out + out.err)
    finally:
        srv.shutdown()
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    stored = [str(r) for t in ("results", "scores") for r in con.execute(f"SELECT * FROM {t}").fetchall()]
    echoed = con.execute("SELECT count(*) FROM results WHERE answer LIKE '%bad key%' OR answer_error LIKE "
                         "'%bad key%'").fetchone()[0]
    judged = con.execute("SELECT count(*) FROM scores WHERE metric = 'llm_faithfulness' AND detail LIKE "
                         "'%bad key%'").fetchone()[0]
    con.close()
    assert echoed >= 6 and judged >= 1  # the echoes arrived (answers, errors, the judge's reply), scrubbed
    cache = sqlite3.connect(ws / "cache" / "llm.sqlite")
    stored += [str(r) for (t,) in cache.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
               for r in cache.execute(f"SELECT * FROM {t}").fetchall()]
    cache.close()
    files = [p.read_text(errors="replace") for p in [*(tmp_path / "x").rglob("*.csv"),
                                                    *(ws / "reports").rglob("*.html")]]
    assert files
    everything = "\n".join(stored + files + printed)
    assert "bad key PCT[" in everything
    for key in (ANSWER_KEY, JUDGE_KEY):
        assert _leaks(everything, key) == [], key
