"""The page's ``ragwb generate``: gold questions an LLM writes from the open dataset's passages (docs/generate.md),
with the cost line counted before anything is sent, then written, remembered for the folder and reviewed.
The sampling, prompts, checks and drops are ``evals.generate``'s: the page and the CLI write the same set."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rag.llm.client import PRICES, LLMClient, dollars_text, price_known
from rag.llm.spend import CallPlan, plan_calls

GENERATE_MAX_TOKENS = 200  # `ragwb generate --max-tokens`'s default: a question and a short answer


@dataclass
class GeneratePlan:
    """What a generation would send: one call per sampled passage (a reply that is not the JSON asked for is
    asked once more: at most twice the calls, said in the line), the calls' cost (``rag.llm.spend``), the
    corpus's shortfall and the file it writes."""
    out: Path
    calls: CallPlan
    jobs: int = 0
    short: str = ""  # the corpus has passages for fewer than asked
    replaces: int | None = None  # lines of the file at ``out`` that the write would replace

    @property
    def new_calls(self) -> int:
        return self.calls.new_calls

    def line(self) -> str:
        if not self.jobs:
            return "nothing to ask about: every page is shorter than 40 words or a table of contents"
        return (f"{self.jobs:,} passage(s) to ask about{self.short}; {self.calls.line()}; a reply that is not JSON "
                f"is asked once more; writes {self.out}"
                + (f", replacing its {self.replaces:,} line(s)" if self.replaces is not None else ""))


def generator_client(sess, llm, model: str = "", prices: dict | None = None) -> LLMClient:
    """The page's LLM endpoint as ``ragwb generate`` calls it (temperature 0, 200 tokens a reply), with the
    model typed in the page (the answerer's by default) and the workspace's response cache."""
    cfg = replace(llm, model=(model or "").strip() or llm.model, temperature=0.0, max_tokens=GENERATE_MAX_TOKENS)
    return LLMClient(cfg, sess.retriever.ws.root / "cache" / "llm.sqlite", prices={**PRICES, **(prices or {})})


def default_out(sess, workspace: str) -> Path:
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in sess.dataset.name)
    return Path(workspace) / "generated" / f"{name}.questions.jsonl"


def _types(types) -> tuple:
    from ..generate import check_types

    return check_types(types, "question types")


def plan_generation(documents, client: LLMClient, n: int, types, seed: int, out: Path,
                    encoding: str = "o200k_base", corpus: str | Path | None = None,
                    language: str = "auto") -> GeneratePlan:
    """The cost line of asking for ``n`` questions about ``documents``, counted before anything is sent: the
    passages are sampled as ``generate`` will sample them and each prompt is looked up in the response cache
    (the page and ``ragwb generate`` both say it first). ``corpus``: the folder the documents come from, which
    the file must not be written into; ``language``: as ``generate`` asks (the prompt, so the cache lookup)."""
    from ..generate import question_messages, reply_format, sample_passages

    types = _types(types)
    out = Path(out).expanduser()
    if out.is_dir():
        raise ValueError(f"{out} is a folder; give the JSONL file to write")
    if corpus is not None and Path(corpus).is_dir() and out.resolve().is_relative_to(Path(corpus).resolve()):
        raise ValueError(f"{out} is inside the corpus folder {corpus}: the next ingest would read it as one of its "
                         "documents (and a document there could be replaced); write it elsewhere")
    jobs, _ = sample_passages(documents, n, types, seed)
    plan = GeneratePlan(out, plan_calls(client, [question_messages(k, pages, language or "auto") for k, pages in jobs],
                                        reply_format(client), encoding), len(jobs))
    if 0 < len(jobs) < n:
        plan.short = f" (asked for {n:,}: the corpus has passages for {len(jobs):,})"
    if out.is_file():
        with open(out, "rb") as f:
            plan.replaces = sum(1 for _ in f)
    return plan


def generate_plan(sess, client: LLMClient, n: int, types, seed: int = 0, out: str | Path = "",
                  language: str = "auto") -> GeneratePlan:
    """The page's cost line (``plan_generation`` over the session's documents; the default file if none)."""
    out = Path(out).expanduser() if str(out).strip() else default_out(sess, str(sess.retriever.ws.root))
    return plan_generation(sess.dataset.documents, client, n, types, seed, out,
                           sess.retriever.reader.config.chunking.encoding, sess.spec, language)


def generate_for_page(sess, client: LLMClient, n: int, types, seed: int, out: Path, progress=None,
                      language: str = "auto", max_overlap: int = 0) -> tuple[Path, str]:
    """Ask, check and write the questions (``evals.generate.generate``, the file replaced whole when done), and
    remember the file as the folder's questions (the page loads it at once; a later open of the folder too). (path, the line saying
    what came of it). Nothing is written when no question survives."""
    from ..generate import generate, write_jsonl

    res = generate(client, sess.dataset.documents, n, _types(types), seed, embed=sess.retriever.embed_queries,
                   max_overlap=max_overlap, progress=progress, language=(language or "").strip() or "auto")
    # the shortfall was said on the cost line; each drop or flag with its count
    counted = "; ".join(f"{k}: {v}" for k, v in sorted(res.counts.items()) if not k.startswith("asked for")) or "none"
    s = res.stats
    spent = (f"calls {s.calls:,} (cache hits {s.hits:,}); "
             f"{dollars_text(s.dollars_spent, price_known(client.cfg.model, client.prices))}")
    if not res.questions:
        raise ValueError(f"no question survived ({spent}; dropped: {counted}); {out} was not written")
    out.parent.mkdir(parents=True, exist_ok=True)
    path = write_jsonl(res.questions, out)
    remembered = ""
    if Path(sess.spec).is_dir():
        sess.retriever.ws.remember_questions(sess.spec, str(path))
        remembered = "; remembered as this folder's questions (a later open of the folder evaluates on them too)"
    by_type = ", ".join(f"{t} {sum(q['type'] == t for q in res.questions)}" for t in _types(types))
    return path, (f"wrote {path}: {len(res.questions)} question(s) ({by_type}) with {client.cfg.model}; {spent}; "
                  f"dropped or flagged: {counted}{remembered}")


def done_line(line: str, path, answers_with_llm: bool) -> str:
    """What the page says once questions are written: the page loads them as its questions, and says what it does
    next. With an LLM answerer the Apply waits for its Send (issue 83, item 16: the line said "The page evaluates
    them now" while the page waited for "Send up to 239 call(s)")."""
    from .page import esc, md_code

    nxt = ("They are loaded above as the page's questions; **nothing is answered until you press Send** on the "
           "Apply line above (it counts the calls first)" if answers_with_llm else
           "They are loaded above as the page's questions, and the page evaluates them now (offline: nothing is sent)")
    review = md_code(f"marimo run notebooks/review.py -- --questions {path}")
    return f"**Generated:** {esc(line)}. {nxt}. Review them before trusting them: {review}."
