"""``ragwb gate``: the CI regression gate."""
from __future__ import annotations


def cmd_gate(a) -> int:
    from evals.analyze.gate import main_gate

    return main_gate(a)


def add_gate(sub) -> None:
    from evals.analyze.gate import add_gate_args
    s = sub.add_parser("gate", help="CI regression gate with paired bootstrap intervals",
                       description="Compare a candidate run against a baseline (run id or committed baseline "
                       "file) per strategy and metric; exit 1 on a regression beyond tolerance, too many non-ok "
                       "statuses, or different question sets.")
    add_gate_args(s)
    s.set_defaults(fn=cmd_gate)
