"""``ragwb generate``: gold questions written by an LLM from the corpus, evidence by construction (docs/generate.md)."""
from __future__ import annotations

import sys
from pathlib import Path

from .common import (URL_SECRETS, YES_HELP, add_index_args, add_price_arg, at_least, cli_prices, confirm_spend,
                     index_config, positive_float)


def _counted(counts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def cmd_generate(a) -> int:
    from tqdm import tqdm

    from evals.generate import check_types, generate, write_jsonl
    from rag.index.embedders import get_embedder
    from rag.index.workspace import Workspace
    from rag.llm.client import LLMClient, LLMConfig, dollars_text, price_known

    if not (a.llm_base_url and a.llm_model):
        raise ValueError("generating questions needs an LLM endpoint: --llm-base-url URL --llm-model M (offline: "
                         "a local llama.cpp server, docs/llm.md 'A local model')")
    types = check_types(t.strip() for t in a.types.split(","))
    out = Path(a.out)  # checked before the first call: every call's answers are lost if the file cannot be written
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give the JSONL file to write (e.g. {out / 'gold.jsonl'})")
    if not out.parent.exists():
        raise ValueError(f"--out {out}: its folder {out.parent} does not exist")
    cfg = index_config(a)
    ws = Workspace(a.workspace)
    ds = ws.load(a.dataset, None, cfg)
    if not ds.documents:
        raise ValueError(f"dataset {a.dataset!r} has no documents to ask about")
    client = LLMClient(LLMConfig(a.llm_base_url, a.llm_model, a.llm_key_env, max_tokens=a.max_tokens,
                                 timeout=a.timeout, retries=a.retries, max_concurrency=a.concurrency,
                                 response_format=a.llm_format, temperature=0.0),
                       Path(a.workspace) / "cache" / "llm.sqlite", use_cache=not a.no_cache,
                       prices=cli_prices(a))
    from evals.workbench.generating import plan_generation

    plan = plan_generation(ds.documents, client, a.n, types, a.seed, out, cfg.chunking.encoding, a.dataset,
                           a.language)
    if not confirm_spend("ragwb generate", plan, a.yes):
        print(f"nothing sent; {out} " + ("keeps what it held" if out.exists() else "was not written"))
        return 0
    embedder = get_embedder(cfg.embedder)
    with tqdm(total=a.n, desc="generating", unit="question", disable=not sys.stderr.isatty()) as bar:
        res = generate(client, ds.documents, a.n, types, a.seed, embed=embedder.embed_queries,
                       max_overlap=a.max_overlap, progress=bar, language=a.language)
    if not res.questions:  # every call failed or every reply was dropped: nothing is written over --out
        from rag.llm.urls import redact_url

        print("dropped: " + _counted(res.counts), file=sys.stderr)
        print(f"ragwb generate: error: no question survived (calls {res.stats.calls:,} to "
              f"{redact_url(a.llm_base_url)}); {a.out} was not written"
              + (" and keeps what it held" if Path(a.out).exists() else ""), file=sys.stderr)
        return 6
    out = write_jsonl(res.questions, a.out)
    by_type = {t: sum(q["type"] == t for q in res.questions) for t in types}
    print(f"wrote {out}: {len(res.questions)} questions ({', '.join(f'{t} {n}' for t, n in by_type.items())}) "
          f"from {a.dataset} with {a.llm_model} (seed {a.seed})")
    if res.skipped_pages:
        print("pages not asked about: " + ", ".join(f"{k} {v}" for k, v in res.skipped_pages.items()))
    print("dropped or flagged: " + _counted(res.counts))
    lexical = sum(q["metadata"]["generator"]["overlap_words"] >= 6 for q in res.questions)
    if res.questions:
        print(f"lexical share: {lexical / len(res.questions):.0%} of the questions copy 6 or more words in a row "
              "from their passage (they favour BM25; --max-overlap K drops those over K)")
    s = res.stats
    print(f"calls {s.calls:,} (cache hits {s.hits:,}); tokens {s.tokens_used:,}; "
          f"{dollars_text(s.dollars_spent, price_known(a.llm_model, client.prices))}")  # unknown is never $0
    if a.validate:
        _validate(a, out)
    elif Path(a.dataset).is_dir():
        print(f"next: ragwb run --dataset {a.dataset} --questions {out}")
    return 0


def _validate(a, out) -> None:
    import pandas as pd

    from evals.generate import validate
    from evals.workbench.calls import open_session
    from rag.ingest.questions import load_questions_jsonl

    sess = open_session(a.dataset, a.workspace, a.embedder)
    human = [q for q in sess.dataset.questions if q.answerable and q.evidence]
    if not human:
        raise ValueError(f"--validate needs a set with human questions and evidence; {a.dataset!r} has none")
    sess.dataset.questions = human
    generated, skipped = load_questions_jsonl(out, sess.dataset.documents)
    generated = [q for q in generated if q.answerable and q.evidence]
    for sk in skipped:
        print(f"validate: {sk}")
    from evals.generate import MIN_VALIDATE

    if len(generated) < MIN_VALIDATE:
        print(f"\nvalidation on {a.dataset}: not run: {len(generated)} answerable generated question(s) survived the "
              f"filters, fewer than the {MIN_VALIDATE} that ranking nine points needs (see the drops above; a "
              "stronger model, or more --n)")
        return
    rows = validate(sess, generated, limit=a.validate_limit)
    print(f"\nvalidation on {a.dataset}: the same 9 points over its human questions and the generated ones "
          "(Kendall tau of the points' means with a 95% bootstrap interval; sign agreement of paired differences)")
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        print(pd.DataFrame(rows).to_string(index=False) if rows else "too few points scored on both sets")


def add_generate(sub) -> None:
    s = sub.add_parser("generate", help="write gold questions for a corpus with an LLM (evidence by construction)",
                       description="Sample passages of an ingested corpus (stratified by document, seeded, "
                       "tables of contents and pages under 40 words skipped), ask an LLM for a question and a short "
                       "answer per passage, keep those whose answer is found in the passage (that span is the "
                       "evidence), drop near-duplicates, and write the gold JSONL the workbench reads "
                       "(docs/generate.md). Needs an OpenAI-compatible endpoint; a local llama.cpp server works.")
    s.add_argument("dataset", help="bundled set name or a folder")
    s.add_argument("--n", type=at_least(1), default=50, help="questions to ask for (50)")
    s.add_argument("--out", required=True, help="the gold JSONL to write (replaced whole when done)")
    s.add_argument("--types", default="single", help="comma-separated: single, multi, unanswerable (single)")
    s.add_argument("--seed", type=int, default=0, help="sampling seed (0)")
    s.add_argument("--language", default="auto", metavar="LANG",
                   help="auto: each question in its passage's language (the document's, stored with it); a name or "
                        "code (en, Greek, ...) asks for that language instead")
    s.add_argument("--max-overlap", type=at_least(0), default=0, metavar="K",
                   help="drop questions that copy more than K words in a row from their passage (0 = keep, flag)")
    s.add_argument("--validate", action="store_true",
                   help="then run 9 points over the set's human questions and the generated ones and report how "
                        "alike they rank the points (Kendall tau, sign agreement; docs/generate.md)")
    s.add_argument("--validate-limit", type=at_least(1), default=200, help="human questions used by --validate (200)")
    s.add_argument("--llm-base-url", default=None, help="OpenAI-compatible base URL" + URL_SECRETS)
    s.add_argument("--llm-model", default=None, help="model name at that endpoint")
    s.add_argument("--llm-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    s.add_argument("--llm-format", default="", choices=["", "json_schema", "json_object"],
                   help="constrain replies to {question, answer}: json_schema (OpenAI's form) or json_object with a "
                        "schema (llama-cpp-python); default: plain text, parsed")
    s.add_argument("--max-tokens", type=at_least(1), default=200, help="max tokens per reply (200)")
    s.add_argument("--timeout", type=positive_float, default=60.0, help="per-call timeout in seconds (60)")
    s.add_argument("--retries", type=at_least(0), default=3, help="retries on 429/5xx/timeouts (3)")
    s.add_argument("--concurrency", type=at_least(1), default=4, help="concurrent calls (4)")
    s.add_argument("--no-cache", action="store_true", help="do not use the LLM response cache")
    s.add_argument("--yes", action="store_true", help=YES_HELP)
    add_price_arg(s)
    add_index_args(s)
    s.set_defaults(fn=cmd_generate)
