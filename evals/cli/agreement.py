"""``ragwb score-claims`` and ``ragwb agreement``: the support scorer, and how far each judge agrees with people."""
from __future__ import annotations


from .common import URL_SECRETS, YES_HELP, at_least, between, positive_float


def cmd_score_claims(a) -> int:
    from evals.score.agreement import main_score_claims

    return main_score_claims(a)


def cmd_agreement(a) -> int:
    from evals.score.agreement import main_agreement

    return main_agreement(a)


def add_score_claims(sub) -> None:
    s = sub.add_parser("score-claims", help="score claims against evidence with the offline support model",
                       description="Read JSONL lines {\"statement\": ..., \"passages\": [...]} and write each with "
                       "'support' (the probability that the passages support it) and 'supported' (at the documented "
                       "threshold). docs/metrics.md, 'Support scorer'.")
    s.add_argument("file", help="JSONL file of claims")
    s.add_argument("--out", default=None, help="write JSONL here (default: standard output)")
    s.add_argument("--lang", default="en", help="language of the claims (stemming; default en)")
    s.add_argument("--no-e5", action="store_true", help="lexical features only (no e5 model load)")
    s.set_defaults(fn=cmd_score_claims)


def add_agreement(sub) -> None:
    s = sub.add_parser("agreement", help="how well each faithfulness judge agrees with human support labels",
                       description="AUROC and F1 (with 95% bootstrap intervals), statements per second and dollars "
                       "per 1,000 statements of each judge on held-out human-labelled ExpertQA claims: the offline "
                       "support model, baselines, and LLM judges when --judge-base-url is set.")
    s.add_argument("--limit", type=at_least(1), default=None, help="only the first N claims")
    s.add_argument("--resamples", type=at_least(100), default=1000, help="bootstrap resamples (1000)")
    s.add_argument("--judge-base-url", default=None, help="OpenAI-compatible endpoint of an LLM judge" + URL_SECRETS)
    s.add_argument("--judge-model", default=None, help="judge model name")
    s.add_argument("--judge-key-env", default="OPENAI_API_KEY", help="environment variable holding the judge's key")
    s.add_argument("--judges", nargs="*", default=None, help="LLM judges (default llm_faithfulness; "
                   "ragas_faithfulness needs the ragas extra)")
    s.add_argument("--judge-max-tokens", type=at_least(1), default=1024,
                   help="max tokens per judge reply (1024; a truncated JSON verdict is a parse_error)")
    s.add_argument("--timeout", type=positive_float, default=60.0, help="per-call timeout in seconds (60)")
    s.add_argument("--judge-repeats", type=between(1, 20), default=1, metavar="N",
                   help="judge each claim N times, sampled, as `ragwb run --judge-repeats N` does (the mean of the "
                        "samples is another instrument: its figure is stored for that judge identity)")
    s.add_argument("--json", dest="json_out", default=None, help="also write the table as JSON")
    s.add_argument("--workspace", default="results", help="workspace (LLM cache)")
    s.add_argument("--yes", action="store_true", help=YES_HELP)
    s.set_defaults(fn=cmd_agreement)
