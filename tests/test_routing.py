"""The oracle bound of routing (issue 28, part 1), computed by hand on a small frame: ties on quality and on
cost, missing scores, not_applicable, and the tolerance."""
import pandas as pd
import pytest

from evals.routing import oracle_bound


def _frame(rows):
    out = []
    for q, point, f1, tokens, status in rows:
        s, label = point.split(" · ")
        out.append({"strategy": s, "point_label": label, "question_id": q, "repeat": 0, "metric": "f1",
                    "value": f1, "status": status})
        out.append({"strategy": s, "point_label": label, "question_id": q, "repeat": 0, "metric": "prompt_tokens",
                    "value": tokens, "status": "ok"})
    return pd.DataFrame(out)


A, B, C = "a · cheap", "b · rich", "c · cheap2"
ROWS = [("q0", A, 1.0, 100, "ok"), ("q0", B, 1.0, 500, "ok"), ("q0", C, 0.2, 300, "ok"),   # tie on quality: cheapest
        ("q1", A, 0.0, 100, "ok"), ("q1", B, 0.8, 500, "ok"), ("q1", C, 0.1, 300, "ok"),
        ("q2", A, None, 100, "timeout"), ("q2", B, 0.5, 500, "ok"), ("q2", C, None, 300, "timeout"),  # one scored
        ("q3", A, None, 100, "not_applicable"), ("q3", B, None, 500, "not_applicable"),  # nothing: left out
        ("q3", C, None, 300, "not_applicable"),
        ("q4", A, 0.7, 100, "ok"), ("q4", B, 0.4, 500, "ok"), ("q4", C, 0.9, 100, "ok")]  # tie on cost: better one


def test_oracle_picks_the_cheapest_point_within_tolerance_of_the_best():
    t, info = oracle_bound(_frame(ROWS), "f1", "prompt_tokens", 0.0)
    o = t.iloc[-1]
    # q0 -> a (1.0, 100); q1 -> b (0.8, 500); q2 -> b (0.5, 500); q4 -> c (0.9, 100)
    assert o["f1"] == pytest.approx((1.0 + 0.8 + 0.5 + 0.9) / 4) and o["prompt_tokens"] == pytest.approx(1200 / 4)
    assert info["questions"] == 4 and info["left_out"] == 1
    chosen = dict(zip(t.point, t.chosen))
    assert chosen[A] == 1 and chosen[B] == 2 and chosen[C] == 1
    fixed = t.set_index("point")
    assert fixed.loc[A, "n"] == 3 and fixed.loc[A, "f1"] == pytest.approx((1.0 + 0.0 + 0.7) / 3)
    assert info["best_fixed"] == B and info["saving_vs_best_fixed"] == pytest.approx(1 - 300 / 500)


def test_a_tolerance_trades_quality_for_tokens():
    t, _ = oracle_bound(_frame(ROWS), "f1", "prompt_tokens", 0.9)
    o = t.iloc[-1]
    # q0 -> a; q1: a is within 0.9 of 0.8 -> a (0.0, 100); q2 -> b (only one); q4: everything is within 0.9 of 0.9,
    # a and c cost 100 -> the better of them, c
    assert o["f1"] == pytest.approx((1.0 + 0.0 + 0.5 + 0.9) / 4) and o["prompt_tokens"] == pytest.approx(800 / 4)


def test_bad_tolerance_and_missing_metric_are_errors():
    with pytest.raises(ValueError, match="tolerance"):
        oracle_bound(_frame(ROWS), "f1", "prompt_tokens", -1)
    with pytest.raises(ValueError, match="no ok scores of 'faithfulness'"):
        oracle_bound(_frame(ROWS), "faithfulness", "prompt_tokens", 0)


def test_show_oracle_and_the_report_section(tmp_path, capsys):
    from evals.cli import main
    from evals.reports import write_report

    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "20", "--embedder", "hash", "--no-progress", "--no-report",
                 "--workspace", str(ws), "--run-id", "O", "--strategies", "chunks,full_documents"]) == 0
    capsys.readouterr()
    assert main(["show", "O", "--oracle", "f1", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert "oracle (tolerance 0)" in out and "best fixed point chunks · defaults" in out
    html = write_report("O", db=ws / "results.duckdb", out_dir=tmp_path / "rep").read_text()
    assert "How much could routing save at most?" in html
