"""``ragwb``: the RAG Workbench command line. One module per command group beside this one; each
declares its sub-commands (``add_NAME(sub)``) next to the function that runs them (``cmd_NAME``)."""
from __future__ import annotations

import argparse
import sys

from . import agreement, bench, best, catalog, ci, gate, generate, ingest, judge, report, results, route, run, workbench

EPILOG = """examples:
  ragwb ingest squad2                       # bundled SQuAD 2.0 set into results/lancedb
  ragwb ingest my_docs/ --questions q.jsonl # your own folder + JSONL gold questions
  ragwb run                                 # every bundled set, every strategy, offline
  ragwb run --dataset squad2 --set chunks.top_k=4,8,16 --set hybrid.alpha=0.5,0.8
  ragwb run --config sweep.toml             # budget grid from TOML (see docs/sweeps.md)
  ragwb runs ; ragwb show latest ; ragwb export latest --format csv
  ragwb gate --baseline BASE --candidate latest
  ragwb workbench --dataset my_docs/        # the page on 127.0.0.1 (it prints the URL)
"""


# the order `ragwb --help` lists them in
COMMANDS = [ingest.add_ingest, run.add_run, run.add_score, results.add_runs, results.add_show, results.add_compare,
            route.add_route, best.add_best, results.add_export, report.add_report, ingest.add_search, catalog.add_strategies,
            catalog.add_metrics, agreement.add_score_claims, agreement.add_agreement, catalog.add_memory,
            judge.add_judge, generate.add_generate, gate.add_gate, ci.add_ci, workbench.add_workbench, bench.add_bench]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ragwb", description="RAG Workbench: measure how the shape of retrieved "
                                "context changes a RAG system's answers.", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return a.fn(a) or 0
    except (KeyError, ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"ragwb {a.cmd}: error: {msg}", file=sys.stderr)
        return 2
    except RecursionError:  # input nested past any sane depth that a parser below did not catch itself
        print(f"ragwb {a.cmd}: error: input nested too deeply to read (a hostile or broken file or reply)",
              file=sys.stderr)
        return 2
    except RuntimeError as e:  # a busy or damaged store or workspace, a failing endpoint: one line, no traceback
        if type(e).__name__ not in ("StoreBusy", "WorkspaceBusy", "StoreUnreadable", "EndpointError", "RunBusy",
                                    "WorkspaceDamaged", "CheckoutOnly"):
            raise
        print(f"ragwb {a.cmd}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what was committed is kept (a run says how to resume)
        print(f"ragwb {a.cmd}: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a read-only or full disk, a path that cannot be written
        print(f"ragwb {a.cmd}: error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
