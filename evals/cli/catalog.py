"""``ragwb strategies``, ``metrics``, ``memory``: what the registries hold."""
from __future__ import annotations


def cmd_strategies(a) -> int:
    from rag.strategies import BUILTIN, describe_strategies, load_plugins
    from rag.strategies.plugins import ORIGIN

    load_plugins(a.plugins or [])
    for s in describe_strategies():
        src = "" if s["name"] in BUILTIN else f" [plugin {ORIGIN.get(s['name'], 'installed')}]"
        print(f"{s['name']}: {s['description']}{src}")
        print("    " + ", ".join(f"{k}={v!r}" for k, v in s["params"].items()))
    return 0


def cmd_metrics(a) -> int:
    from evals.score.metrics import METRICS

    for m in METRICS.values():
        arrow = "higher" if m.higher_is_better else "lower"
        print(f"{m.name:24s} [{m.family}, {arrow} is better] {m.description}")
    return 0


def cmd_memory(a) -> int:
    from rag.answer.memory import QUERY_MODES, describe_memory

    for m in describe_memory():
        print(f"{m['name']}: {m['description']}")
        print("    " + ", ".join(f"{k}={v!r}" for k, v in m["params"].items()))
    print("query modes: " + "; ".join(f"{k}: {v}" for k, v in QUERY_MODES.items()))
    return 0


def add_strategies(sub) -> None:
    s = sub.add_parser("strategies", help="list strategies and their budgets (shipped defaults), plugins included")
    s.add_argument("--plugins", nargs="*", default=None, metavar="FILE",
                   help="strategy plugin files or modules to load (docs/your-system.md)")
    s.set_defaults(fn=cmd_strategies)


def add_metrics(sub) -> None:
    s = sub.add_parser("metrics", help="list metrics, their family and direction")
    s.set_defaults(fn=cmd_metrics)


def add_memory(sub) -> None:
    s = sub.add_parser("memory", help="list conversation memory policies, their budgets and the query modes")
    s.set_defaults(fn=cmd_memory)
