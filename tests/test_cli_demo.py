"""``gptgate demo`` as a new user tries it: a failed run says why in one line and exits 1,
the knee is named only where it was measured, bad options are one line and exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gptgate.cli import main
from gptgate.sim import SimServer
from gptgate.sim.process import free_port


@pytest.fixture(scope="module")
def loopback() -> Iterator[str]:
    """A simulator over real HTTP on 127.0.0.1, 200x faster than the wall clock."""
    with SimServer("gpu", time_scale=200, seed=3) as base_url:
        yield base_url


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_an_unreachable_endpoint_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    assert main(["demo", "--base-url", url, "--requests", "3", "--levels", "1,2", "--quiet"]) == 1
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert url in line and "connection failed" in line
    for claim in ("nan", "<- knee", "peaks at"):
        assert claim not in captured.out


def test_a_wrong_path_is_one_line_and_exit_1(
    loopback: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = loopback.removesuffix("/v1") + "/wrong"
    assert main(["demo", "--base-url", url, "--requests", "3", "--levels", "1,2", "--quiet"]) == 1
    captured = capsys.readouterr()
    assert "status=404" in _one_line(captured.err)
    assert "nan" not in captured.out and "knee" not in captured.out


@pytest.mark.parametrize("requests", ["0", "-1", "many"])
def test_requests_must_be_at_least_one(
    requests: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--requests", requests, "--quiet"]) == 2
    assert "--requests" in _one_line(capsys.readouterr().err)


def test_the_top_fixed_level_is_not_called_the_knee(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--requests", "60", "--levels", "1,5,auto", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "<- knee" not in out and "peaks at" not in out
    five = next(line for line in out.splitlines() if line.strip().startswith("5 "))
    assert five.endswith("<- best so far")
    assert "the knee was not reached" in " ".join(out.split())


def test_auto_alone_has_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--requests", "60", "--levels", "auto", "--quiet"]) == 0
    out = capsys.readouterr().out
    summary = " ".join(out.split("-" * 20)[-1].split())
    assert "found its limit online" in summary and "Add fixed levels" in summary
    assert "knee" not in out


def test_an_invalid_base_url_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--base-url", "notaurl", "--requests", "3", "--quiet"]) == 2
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert "absolute http(s) URL" in line and "validation error" not in line
    assert captured.out == ""


def test_the_banner_says_simulated_seconds_only_on_the_simulator(
    loopback: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--requests", "4", "--levels", "2", "--quiet"]) == 0
    assert "simulated seconds" in capsys.readouterr().out
    # 8 requests: a full micro-batch of the batch_content scenario, sent at once
    assert main(["demo", "--base-url", loopback, "--requests", "8", "--levels", "8",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "simulated" not in out and "wall-clock seconds" in out


def test_real_without_a_key_never_runs_the_simulator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["demo", "--real", "--requests", "3", "--quiet"]) == 2
    captured = capsys.readouterr()
    assert "OPENAI_API_KEY" in _one_line(captured.err)
    assert captured.out == ""


def test_json_output_parses(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--requests", "30", "--levels", "1,4,auto", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["concurrency"] for row in report["rows"]] == [1, 4, "auto"]
    assert report["simulated"] is True and report["interrupted"] is False
    assert report["knee"] == {"concurrency": 4, "confirmed": False}
    assert all(row["ok"] == 30 and row["cost_per_call_usd"] > 0 for row in report["rows"])


def test_help_has_examples_and_no_rest_markup(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["demo", "--help"], ["sweep", "--help"], ["plan", "--help"],
                 ["sim", "serve", "--help"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "examples:" in out and "``" not in out and "SEEDS" not in out, argv
