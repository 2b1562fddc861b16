"""The command line: the demo prints the field table (concurrency, total time, mean latency,
throughput, total tokens, cost); bad input is one clear line."""

from __future__ import annotations

import pytest

from gptgate.cli import main


def test_demo_prints_the_concurrency_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--requests", "60", "--levels", "1,10", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "concurrency" in out and "throughput" in out and "total tokens" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("1 ", "10 "))]
    assert [r[0] for r in rows] == ["1", "10"]
    # ten at once finish the same work much sooner than one at a time
    total_1, total_10 = (float(r[1].rstrip("s")) for r in rows)
    assert total_10 < total_1 / 4


def test_unknown_profile_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--profile", "nope", "--requests", "5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "unknown simulator profile 'nope'" in err and "Traceback" not in err


def test_demo_runs_auto_after_the_fixed_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--requests", "60", "--levels", "1,10,auto", "--quiet"]) == 0
    out = capsys.readouterr().out
    auto = [line.split() for line in out.splitlines() if line.strip().startswith("auto→")]
    assert len(auto) == 1
    limit = int(auto[0][0].removeprefix("auto→"))
    assert limit >= 1
    # the summary compares auto with the best fixed row and names the limit it ended at
    assert f"concurrency='auto' (the default) found its limit online, {limit} at the end" in out
    auto_line = next(line for line in out.splitlines() if line.strip().startswith("auto→"))
    ten_line = next(line for line in out.splitlines() if line.strip().startswith("10 "))
    # 10 is the best fixed level but also the highest measured: not a knee, only the best so far
    assert "<- best so far" in ten_line and "<- knee" not in out
    assert "knee" not in auto_line  # marked among the fixed rows only


def test_demo_marks_the_knee_only_where_a_fall_was_measured(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--requests", "150", "--levels", "20,50,80", "--quiet"]) == 0
    out = capsys.readouterr().out
    knee = [line for line in out.splitlines() if "<- knee" in line]
    assert len(knee) == 1 and knee[0].split()[0] == "50"
    assert "Throughput peaks at concurrency 50" in out and "at 80 it is" in out


def test_bad_levels_are_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--levels", "10,fast", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "'fast' is neither a concurrency >= 1 nor 'auto'" in err and "Traceback" not in err


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from gptgate import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"gptgate {__version__}"
