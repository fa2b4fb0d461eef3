"""Scoring figures: our offline scorers against ragas's, an LLM re-run from the response cache, the support scorer's speed."""
from __future__ import annotations

from .costs import hash_index_config
import time
from pathlib import Path


def _scoring_rows(ds, workspace, cfg, n):
    """Real rows to score: the chunks strategy's contexts and extractive answers for n questions."""
    from rag.answer.answerers import ExtractiveAnswerer
    from rag.index.workspace import Workspace
    from rag.index.retrieval import Retriever
    from rag.strategies import retrieve

    from evals.score.metrics import ScoringInput

    ws = Workspace(workspace)
    r = Retriever(ws, ws.index_name(ds.name, cfg))
    qs = ds.questions[:n]
    r.warm([q.text for q in qs])
    ans = ExtractiveAnswerer()
    rows = []
    for q in qs:
        ctx = retrieve(r, "chunks", q.text)
        a = ans.answer(q.text, ctx.blocks)
        rows.append(ScoringInput(q, ctx.blocks, a.text, "ok", a.prompt_tokens, a.completion_tokens))
    return rows


def ragas_comparison(ds, workspace, cfg, n) -> dict:
    """Our offline scorers (all families) vs ragas's non-LLM metrics on the same rows."""
    try:
        import warnings

        warnings.filterwarnings("ignore")
        from ragas import SingleTurnSample
        from ragas.metrics import NonLLMContextPrecisionWithReference, NonLLMContextRecall
        from ragas.metrics.collections import ExactMatch, NonLLMStringSimilarity, StringPresence
    except Exception as e:  # optional extra: say why the figure is missing
        return {"skipped": f"ragas not importable ({type(e).__name__}: {e}); pip install -e '.[ragas]'"}
    from evals.score.metrics import score_all

    rows = _scoring_rows(ds, workspace, cfg, n)
    t = time.perf_counter()
    for r in rows:
        score_all(r)
    ours = time.perf_counter() - t
    em, sim, pres = ExactMatch(), NonLLMStringSimilarity(), StringPresence()
    crec, cprec = NonLLMContextRecall(), NonLLMContextPrecisionWithReference()
    t = time.perf_counter()
    for r in rows:
        ref = r.question.answers[0] if r.question.answers else "The document does not mention this."
        em.score(reference=ref, response=r.answer)
        sim.score(reference=ref, response=r.answer)
        pres.score(reference=ref, response=r.answer)
        refs = [e.text for e in r.question.evidence if e.text] or [ref]
        smp = SingleTurnSample(retrieved_contexts=[b.text for b in r.blocks] or [""], reference_contexts=refs)
        crec.single_turn_score(smp)
        cprec.single_turn_score(smp)
    theirs = time.perf_counter() - t
    return {"rows": len(rows), "ours_s": ours, "ragas_s": theirs, "speedup": theirs / ours, "target": ">= 10x",
            "ours": "all offline families (answer, abstention, citation, retrieval incl. nDCG/MRR, faithfulness, cost)",
            "ragas": "ExactMatch, NonLLMStringSimilarity, StringPresence, NonLLMContextRecall, "
                     "NonLLMContextPrecisionWithReference"}


def llm_rerun(dataset, workspace, n) -> dict:
    """Run against the test suite's OpenAI-compatible server (tests/openai_server.py: a checkout) twice;
    the second run must make 0 calls."""
    import sys

    from rag.llm.client import LLMConfig

    from rag.ingest.bundled import need_checkout

    tests = need_checkout("ragwb bench --only llm (tests/openai_server.py)") / "tests"
    if not (tests / "openai_server.py").is_file():
        return {"skipped": "needs a checkout (tests/openai_server.py)", "first_run_calls": 0, "rerun_calls": 0,
                "rerun_cache_hits": 0, "target": "0 calls"}
    sys.path.insert(0, str(tests))
    from openai_server import Handler, start

    from evals.run.runner import RunConfig, run_evaluation

    srv, url = start()
    try:
        cfg = RunConfig(dataset=dataset, limit=n, answerer="openai", llm=LLMConfig(url, "local-extractive"),
                        index=hash_index_config())
        c0 = Handler.calls
        run_evaluation(cfg, workspace=workspace, progress=False)
        first = Handler.calls - c0
        c1 = Handler.calls
        s = run_evaluation(cfg, workspace=workspace, progress=False)
        return {"first_run_calls": first, "rerun_calls": Handler.calls - c1, "rerun_cache_hits": s.llm.get("hits"),
                "target": "0 calls"}
    finally:
        srv.shutdown()


def support_speed(n: int) -> dict:
    """Statements per second of the offline support scorer with e5, on the held-out ExpertQA claims:
    cold (empty vector memo) and warm (the same statements again, as across strategies and budgets)."""
    from evals.score import support
    from evals.score.agreement import agreement_set

    rows = agreement_set()[:n]
    embed = support.support_embedder()
    support._e5_cache.clear()
    out = {"statements": len(rows), "e5": embed is not None, "target": ">= 300 statements/s"}
    for label in ("cold", "warm"):
        t = time.perf_counter()
        for r in rows:
            support.support_score(r["claim"], r["evidence"], "en", embed)
        out[f"{label}_per_s"] = len(rows) / (time.perf_counter() - t)
    return out
