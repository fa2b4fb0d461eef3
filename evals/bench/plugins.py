"""`ragwb bench --only plugins`: what running a plugin's shape in a worker process costs (issue 54, item 7).

The plugin example of docs/your-system.md (``first_lines``, read from the doc itself) over a bundled set at three
budgets, as a whole run: in this process (``plugin_timeout=0``, no limit, the only way a thread-held GIL is not
a risk) against the default (a worker process that can be stopped at the limit). The worker's start (building its
index reader and loading the plugin once per run) is reported apart from the per-item overhead."""
from __future__ import annotations

import re
import statistics
import time
from pathlib import Path

def plugin_example(root: Path) -> Path:
    from rag.ingest.bundled import need_checkout

    doc = need_checkout("ragwb bench --only plugins (the example in docs/your-system.md)") / "docs" / "your-system.md"
    m = re.search(r"```python\n# my_strategies.py\n(.*?)```", doc.read_text(), re.S)
    if not m:
        raise ValueError(f"{doc}: the my_strategies.py example is gone")
    path = root / "my_strategies.py"
    path.write_text(m.group(1))
    return path


def plugins_figure(root: Path, dataset: str = "xquad-en", repeats: int = 3) -> dict:
    from evals.run.runner import RunConfig, run_evaluation
    from rag.strategies import load_plugins
    from rag.strategies.plugins import plugin_hashes

    root.mkdir(parents=True, exist_ok=True)
    plugin = plugin_example(root)
    load_plugins([str(plugin)], entry_points=False)
    grid = {"first_lines": {"top_k": [2, 4, 8]}}
    hashes = plugin_hashes([str(plugin)])
    run_evaluation(RunConfig(dataset=dataset, grid=grid, plugins=hashes, limit=5), workspace=root, progress=False)
    times: dict = {"in_process": [], "worker": []}
    boots, waits, items = [], [], 0
    for i in range(repeats):  # alternated, so a drift of the machine hits both
        for mode, limit in (("in_process", 0.0), ("worker", 60.0)):
            t = time.perf_counter()
            s = run_evaluation(RunConfig(dataset=dataset, grid=grid, plugins=hashes, plugin_timeout=limit,
                                         use_cache=False), workspace=root, run_id=f"{mode}-{i}", progress=False)
            times[mode].append(time.perf_counter() - t)
            items = s.items
            if mode == "worker":
                boots.append(s.plugin_worker.get("boot_s", 0.0))
                waits.append(s.plugin_worker.get("wait_s", 0.0))
    inp, wrk, boot = (statistics.median(times["in_process"]), statistics.median(times["worker"]),
                      statistics.median(boots))
    per_item = (wrk - boot - inp) / items * 1000
    return {"dataset": dataset, "items": items, "in_process_s": round(inp, 2), "worker_s": round(wrk, 2),
            "worker_start_s": round(boot, 2), "overhead_per_item_ms": round(per_item, 3),
            "in_process_item_ms": round(inp / items * 1000, 3),
            "waited_for_worker_s": round(statistics.median(waits), 3),
            "overhead_excluding_start": round((wrk - boot - inp) / inp, 3),
            "overhead_with_start": round((wrk - inp) / inp, 3), "target": "< 5% per item against in-process"}


def render(f: dict) -> list[str]:
    return [f"plugin in a worker process ({f['items']} items of the docs' first_lines on {f['dataset']}): in process "
            f"{f['in_process_s']} s, worker {f['worker_s']} s of which {f['worker_start_s']} s starting it once; "
            f"per item {f['overhead_per_item_ms']:+.3f} ms on {f['in_process_item_ms']:.3f} ms (waited for the worker "
            f"{f['waited_for_worker_s']} s in all) "
            f"({f['overhead_excluding_start']:+.1%} excluding the start, {f['overhead_with_start']:+.1%} with it; "
            f"target {f['target']})"]
