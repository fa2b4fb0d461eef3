"""``ragwb judge``: pooled relevance judgments for a run's questions (docs/judgments.md)."""
from __future__ import annotations

import sys

from .common import (URL_SECRETS, YES_HELP, add_price_arg, add_store_args, at_least, cli_prices, confirm_spend,
                     open_store, positive_float)


def _pairs_to_judge(pool, judged, judge: str) -> list[dict]:
    """Pooled pairs this judge has no ok grade for (failures of an earlier try are asked again)."""
    done = set()
    if len(judged):
        ok = judged[(judged.judge == judge) & (judged.status == "ok")]
        done = set(zip(ok.question_key, ok.passage_key))
    return [r for r in pool.rows[["question_key", "passage_key", "question_id", "question", "text"]].to_dict("records")
            if (r["question_key"], r["passage_key"]) not in done]


def _llm_judge(a, st, rid, pool) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from evals.score.relevance import grade_format, judge_pairs, messages_for
    from rag.llm.client import LLMClient, LLMConfig, dollars_text, price_known
    from rag.llm.spend import plan_calls
    from rag.llm.urls import redact_url

    cfg = LLMConfig(a.judge_base_url, a.judge_model, a.judge_key_env, max_tokens=a.judge_max_tokens,
                    timeout=a.timeout, retries=a.retries, max_concurrency=a.concurrency,
                    response_format=a.judge_format)
    client = LLMClient(cfg, Path(a.workspace) / "cache" / "llm.sqlite", use_cache=not a.no_cache,
                       prices=cli_prices(a))
    judge = f"llm:{a.judge_model}"
    todo = _pairs_to_judge(pool, st.judgments(set(pool.rows.question_key)), judge)
    print(f"judge {judge}: {len(todo):,} of {len(pool.rows):,} pooled pairs to grade "
          f"({len(pool.rows) - len(todo):,} already graded by it)")
    plan = plan_calls(client, [messages_for(r["question"], r["text"]) for r in todo], grade_format(client))
    if not confirm_spend("ragwb judge", plan, a.yes):
        print("nothing sent; the pairs stay ungraded (the next `ragwb judge` asks again)")
        return 0
    counts: dict[str, int] = {}
    with tqdm(total=len(todo), desc="judging", unit="pair", disable=not sys.stderr.isatty()) as bar:
        for i in range(0, len(todo), a.batch):  # each batch is stored as it lands: a killed run loses one batch
            rows = judge_pairs(client, todo[i:i + a.batch], bar)
            st.add_judgments(rows, source=f"run {rid}")
            for r in rows:
                counts[r["status"]] = counts.get(r["status"], 0) + 1
    s = client.stats
    print("statuses: " + (", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())) or "nothing to grade"))
    print(f"calls {s.calls:,} (cache hits {s.hits:,}); tokens {s.tokens_used:,}; "
          f"{dollars_text(s.dollars_spent, price_known(a.judge_model, client.prices))} "
          "(price table: rag/llm/client.py PRICES, --price)")
    bad = sum(v for k, v in counts.items() if k != "ok")
    if bad:
        print(f"{bad:,} pair(s) got no grade (stored with the reason; the next `ragwb judge` asks them again)",
              file=sys.stderr)
    if todo and bad == len(todo):  # as `ragwb run` when every answer failed: CI must not read this as a pass
        print(f"ragwb judge: error: every one of the {len(todo):,} pair(s) failed at {redact_url(a.judge_base_url)}; "
              "see the statuses above", file=sys.stderr)
        return 6
    return 0


def _from_gold(st, rid, pool) -> int:
    """The run's gold evidence as one judge's labels: a pooled passage that shows gold evidence = 3, else 0."""
    import json

    with st.session() as con:
        gold = con.execute("SELECT question_id, evidence FROM run_gold WHERE run_id = ? AND answerable",
                           [rid]).df()
    from evals.score.metrics import block_holds
    from rag.models import Evidence
    from rag.strategies import Block

    evidence = {q: [Evidence(**e) for e in json.loads(ev or "[]")] for q, ev in gold.itertuples(index=False)}
    rows = []
    for r in pool.rows.to_dict("records"):
        evs = evidence.get(r["question_id"]) or []
        if not evs:  # no gold for this question: nothing to say about its passages
            continue
        hit = any(block_holds(Block.from_dict(r["block"]), e) for e in evs)
        rows.append({k: r[k] for k in ("question_key", "passage_key", "question_id", "question", "text")}
                    | {"judge": "gold:evidence", "grade": 3 if hit else 0, "status": "ok", "detail": ""})
    n = st.add_judgments(rows, source=f"gold evidence of run {rid}")
    print(f"stored {n:,} gold:evidence judgments ({sum(r['grade'] == 3 for r in rows):,} show gold evidence)")
    return 0


def cmd_judge(a) -> int:
    import pandas as pd

    from evals.analyze.judgments import agreement_table, build_pool, ppi_table, read_pool_file, write_pool

    acts = [a.export, a.import_file, a.judge_base_url, a.agreement, a.ppi, a.from_gold]
    if not any(acts):
        raise ValueError("say what to do: --export FILE, --import FILE, --judge-base-url URL --judge-model M, "
                         "--from-gold, --agreement or --ppi")
    if bool(a.judge_base_url) != bool(a.judge_model):
        raise ValueError("an LLM judge needs both --judge-base-url and --judge-model")
    writes = bool(a.import_file or a.judge_base_url or a.from_gold)
    with open_store(a, read_only=not writes) as st:
        rid = st.resolve_run(a.run)
        pool = build_pool(st, rid, a.depth)
        print(f"run {rid}: pool of {len(pool.rows):,} distinct (question, passage) pairs, top {pool.depth} of "
              f"{pool.points} point(s) over {pool.rows.question_id.nunique():,} questions")
        if a.export:
            info = write_pool(pool, st.judgments(set(pool.rows.question_key)), a.export, a.include_judged)
            left = "marked in the judged column" if a.include_judged else "left out"
            print(f"wrote {a.export}: {info['rows']:,} rows to grade over {info['questions']:,} questions "
                  f"({info['already_judged']:,} already judged, {left}); fill 'grade' with 0-3 and "
                  f"`ragwb judge {rid} --import {a.export} --judge-name YOU`")
        if a.import_file:
            plan = read_pool_file(a.import_file, pool, a.judge_name)
            for n in plan.notes:
                print(n)
            if plan.errors:
                for e in plan.errors[:50]:
                    print(e, file=sys.stderr)
                more = f" (and {len(plan.errors) - 50} more)" if len(plan.errors) > 50 else ""
                raise ValueError(f"{a.import_file}: {len(plan.errors)} bad row(s){more}; nothing was stored")
            n = st.add_judgments(plan.rows, source=str(a.import_file))
            judges = sorted({r["judge"] for r in plan.rows})
            print(f"stored {n:,} judgments by {', '.join(judges) or 'nobody'}"
                  + (f"; {plan.ungraded:,} row(s) had no grade yet (skipped)" if plan.ungraded else ""))
        if a.from_gold:
            _from_gold(st, rid, pool)
        status = 0
        if a.judge_base_url:
            status = _llm_judge(a, st, rid, pool)
        if a.agreement:
            t, conf = agreement_table(st.judgments(set(pool.rows.question_key)))
            if t.empty:
                print("agreement: no pair of judges graded the same passages of this run's questions")
            else:
                with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
                    print("agreement (kappa: Cohen's; kappa_quadratic: weighted by squared grade distance)")
                    print(t.to_string(index=False, na_rep="n/a"))
                    for (x, y), cm in conf.items():
                        print(f"\nconfusion: rows {x}, columns {y}")
                        print(cm.to_string())
        if a.ppi:
            t = ppi_table(st, rid)
            if t.empty:
                print("ppi: needs both a person's grades and an LLM judge's grades on this run's pool")
            else:
                with pd.option_context("display.width", 220, "display.float_format", "{:.3f}".format):
                    print("prediction-powered estimates (LLM grades on all questions, corrected by people's on "
                          "the questions they graded fully; 95% intervals)")
                    print(t.to_string(index=False, na_rep="n/a"))
    return status


def add_judge(sub) -> None:
    s = sub.add_parser("judge", help="pooled relevance judgments of a run's passages: export, import, LLM judge, "
                                     "agreement",
                       description="Questions without gold evidence get relevance judgments: the top --depth "
                       "blocks of every point of RUN are pooled (one row per distinct question and passage), graded "
                       "0-3 by a person (--export, then --import) or an LLM (--judge-base-url, UMBRELA rubric), and "
                       "stored in the DuckDB store keyed by question and passage text, so later runs reuse them. "
                       "`ragwb show` then adds judged_ndcg@10, judged_recall@10, judged_precision@5 and judged@10 "
                       "(docs/judgments.md).")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--depth", type=at_least(1), default=10, help="pool the top K blocks of every point (10)")
    s.add_argument("--export", default=None, metavar="FILE", help="write the pool to grade as CSV")
    s.add_argument("--include-judged", action="store_true",
                   help="--export: keep pairs already judged, their grades in a 'judged' column (default: left out)")
    s.add_argument("--import", dest="import_file", default=None, metavar="FILE",
                   help="store the grades of a pool CSV (all rows checked first: one bad row stores nothing)")
    s.add_argument("--judge-name", default=None, metavar="NAME",
                   help="--import: who graded (stored as human:NAME) when the file has no 'judge' column")
    s.add_argument("--from-gold", action="store_true",
                   help="store the run's gold evidence as judge gold:evidence (a pooled passage showing it = 3, "
                        "else 0): to check pooling against full gold")
    s.add_argument("--judge-base-url", default=None,
                   help="OpenAI-compatible endpoint of an LLM relevance judge" + URL_SECRETS)
    s.add_argument("--judge-model", default=None, help="judge model name (stored as llm:MODEL)")
    s.add_argument("--judge-key-env", default="OPENAI_API_KEY", help="environment variable holding the judge's key")
    s.add_argument("--judge-max-tokens", type=at_least(1), default=64, help="max tokens per grade reply (64)")
    s.add_argument("--judge-format", default="", choices=["", "json_schema", "json_object"],
                   help="the server constrains each reply to {\"grade\": 0-3}: json_schema in OpenAI's form (OpenAI, "
                        "vLLM, llama.cpp's server), json_object with a schema (llama-cpp-python's server); small "
                        "models that cannot follow the rubric's reply format need it (default: plain text)")
    s.add_argument("--timeout", type=positive_float, default=60.0, help="per-call timeout in seconds (60)")
    s.add_argument("--retries", type=at_least(0), default=3, help="retries on 429/5xx/timeouts (3)")
    s.add_argument("--concurrency", type=at_least(1), default=4, help="concurrent judge calls (4)")
    s.add_argument("--batch", type=at_least(1), default=50, help="pairs stored per transaction (50)")
    s.add_argument("--no-cache", action="store_true", help="do not use the LLM response cache")
    s.add_argument("--yes", action="store_true", help=YES_HELP)
    add_price_arg(s)
    s.add_argument("--agreement", action="store_true",
                   help="Cohen's kappa (plain and quadratic-weighted) and the confusion table of every two judges")
    s.add_argument("--ppi", action="store_true",
                   help="prediction-powered estimates of the judged metrics (people's grades correcting an LLM's)")
    add_store_args(s)
    s.set_defaults(fn=cmd_judge)
