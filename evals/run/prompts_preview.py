"""``ragwb run --show-prompt``: the prompt each point would send, shown without calling or storing anything."""
from __future__ import annotations

import sys
from pathlib import Path

from rag.index.workspace import Workspace
from rag.strategies import make_params

from .config import RunConfig
from .items import ItemEvaluator, point_label
from .runner import expand_grid, with_remembered_questions


def show_prompts(cfg: RunConfig, workspace: str | Path = "results", out=None) -> int:
    """``ragwb run --show-prompt``: the prompt the LLM answerer would be sent for the first question under
    each point (the run's --prompt or the built-in one, the context each shape packs, exact token counts).
    Calls no endpoint and stores no run (the index is built if missing: retrieval needs it)."""
    from rag.answer.prompts import PromptTemplate, build_messages, prompt_tokens, template_messages
    from rag.index.retrieval import Retriever
    from rag.strategies import get_strategy

    out = out or sys.stdout
    if cfg.index_grid:  # said, never silently less than asked: the prompts of one index config stand for all
        print(f"notice: --show-prompt shows the prompts on the run's base index; the index axes "
              f"({', '.join(f'{k}={v}' for k, v in cfg.index_grid.items())}) change which chunks a prompt holds",
              file=out)
    ws = Workspace(workspace)
    cfg = with_remembered_questions(cfg, ws)
    ds = ws.load(cfg.dataset, cfg.questions_file, cfg.index, progress=False)
    ingest = ws.ingest(ds, cfg.index, progress=False)
    questions = [q for q in ds.questions if q.qtype != "filler"]
    if not questions:
        raise ValueError(f"dataset {ds.name!r} has no questions to show a prompt for")
    q = questions[0]
    r = Retriever(ws, ingest.index)
    enc = r.reader.config.chunking.encoding
    tpl = PromptTemplate.from_dict(cfg.prompt) if cfg.prompt else None
    ev = ItemEvaluator(r, None, {}, plugin_timeout=cfg.plugin_timeout)
    print(f"prompt: {tpl.file + ' (sha256 ' + tpl.hash[:12] + ')' if tpl else 'built-in'}; question {q.qid}: "
          f"{q.text}", file=out)
    shown = 0
    for name, kw in (expand_grid(cfg.grid, notice=False) if (cfg.grid or not cfg.systems) else []):
        label = point_label(kw)
        if getattr(get_strategy(name), "escalates", False):
            print(f"\n=== {name} [{label}]: answers with its cheap point, then its rich one (see those points)",
                  file=out)
            continue
        ctx, _, _ = ev.retrieve(q.text, name, make_params(name, **kw))
        msgs = template_messages(tpl, q.text, ctx.blocks, None) if tpl else build_messages(q.text, ctx.blocks)
        print(f"\n=== {name} [{label}]: {len(ctx.blocks)} blocks, {ctx.context_tokens:,} context tokens, "
              f"{prompt_tokens(msgs, enc):,} prompt tokens", file=out)
        for m in msgs:
            print(f"--- {m['role']}\n{m['content']}", file=out)
        shown += 1
    for s in cfg.systems:
        print(f"\n=== {s.name}: a deployed service builds its own prompt (nothing to show)", file=out)
    return shown
