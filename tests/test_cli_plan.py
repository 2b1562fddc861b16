"""``gptgate plan``: the field table from a sweep.csv, a plan measured on the simulator, and
bad usage in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gptgate.cli import main

FIELD_CSV = (
    "concurrency,final_limit,goodput_rps,cost_per_call_usd\n"
    "10,10,4.76,0.0215\n"
    "30,30,11.24,0.0219\n"
    "50,50,13.89,0.0225\n"
)


@pytest.fixture
def field_csv(tmp_path: Path) -> Path:
    path = tmp_path / "sweep.csv"
    path.write_text(FIELD_CSV)
    return path


def test_plan_prints_the_field_table(field_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--budget", "10/h", "--from", str(field_csv)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()[:2].isdigit()}
    assert rows["10"].split()[1:3] == ["$0.0215", "465"] and rows["10"].endswith("<- best")
    assert rows["30"].split()[1:3] == ["$0.0219", "456"]
    assert rows["50"].split()[1:3] == ["$0.0225", "444"] and "-4.5%" in rows["50"]
    assert "concurrency 10 buys the most: 465 requests an hour" in out
    assert "cost $10.46/h (+4.6%)" in " ".join(out.split())


def test_plan_json(field_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--budget", "240/day", "--from", str(field_csv), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["budget_usd_per_hour"] == 10.0
    assert [b["requests_per_hour"] for b in report["bands"]] == [465, 456, 444]
    assert report["best"]["concurrency"] == 10
    assert report["worst_overrun"]["concurrency"] == 50


def test_plan_from_a_sweep_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--sim", "hosted", "--requests", "30", "--concurrency", "1,10",
                 "--out", str(tmp_path), "--no-plot", "--quiet", "--json"]) == 0
    sweep = json.loads(capsys.readouterr().out)
    assert main(["plan", "--budget", "10/h", "--from", sweep["csv"], "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [b["concurrency"] for b in report["bands"]] == [
        1, 10, f"auto→{sweep['rows'][-1]['final_limit']}"
    ]
    for band, row in zip(report["bands"], sweep["rows"], strict=True):
        assert band["cost_per_request_usd"] == pytest.approx(row["cost_per_call_usd"], rel=1e-5)


def test_plan_on_the_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--budget", "100/h", "--sim", "hosted", "--requests", "30",
                 "--concurrency", "1,10", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    one, ten = report["bands"]
    assert (one["concurrency"], ten["concurrency"]) == (1, 10)
    # ~0.6 calls a second at concurrency 1 is ~2,000 an hour, fewer than $100 buys (~5,300):
    # that band is capped by its throughput, concurrency 10 by the budget
    assert one["limited_by"] == "throughput" and ten["limited_by"] == "budget"
    assert report["best"]["concurrency"] == 10


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--budget", "ten", "--sim", "hosted"], "--budget"),
        (["--budget", "10/week", "--sim", "hosted"], "period"),
        (["--budget", "10/h"], "one of the arguments --from --sim is required"),
        (["--budget", "10/h", "--from", "/nonexistent.csv"], "cannot read"),
        (["--from", "x.csv"], "--budget"),
        (["--budget", "10/h", "--sim", "hosted", "--requests", "-1"], "must be >= 1"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], lines


def test_a_csv_that_is_not_a_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    assert main(["plan", "--budget", "10/h", "--from", str(path)]) == 2
    assert "is not a sweep.csv" in capsys.readouterr().err


def test_the_overrun_line_agrees_with_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The summary never runs the best band's requests at a band whose own row completes
    fewer: concurrency 50 completes 360 an hour, so the overrun is 30's and 50 is too slow."""
    path = tmp_path / "sweep.csv"
    path.write_text("concurrency,goodput_rps,cost_per_call_usd\n"
                    "10,4.76,0.0215\n30,11.24,0.0219\n50,0.1,0.0225\n")
    assert main(["plan", "--budget", "10/h", "--from", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("Planned at that price but run at concurrency 30, the same 465 requests cost "
            "$10.18/h (+1.8%).") in out
    assert ("Run at concurrency 50, the same 465 requests would not fit in an hour: it "
            "completes at most 360.") in out
