"""``gptgate sweep``: the table, sweep.csv and sweep.png, on the in-process simulator and
against a real loopback ``gptgate sim serve``; Ctrl-C writes what was measured."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

import gptgate as gg
import gptgate.cli.measure as measure
from gptgate.cli import main

from .clitools import cli_env, cli_server

#: the sweep.csv contract (docs/cli.md): one row per level, these columns in this order
COLUMNS = [
    "concurrency", "final_limit", "requests", "ok", "errors", "duration_s", "goodput_rps",
    "latency_mean_s", "latency_p50_s", "latency_p95_s", "latency_p99_s",
    "ttft_p50_s", "ttft_p95_s", "ttft_p99_s",
    "input_tokens_per_call", "cached_input_tokens_per_call", "output_tokens_per_call",
    "cost_per_call_usd", "cost_usd", "rate_limited", "retries", "timeouts",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as file:
        reader = csv.DictReader(file)
        return list(reader.fieldnames or []), list(reader)


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000


def test_sweep_on_the_simulator_writes_csv_and_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["sweep", "--sim", "hosted", "--requests", "40", "--concurrency", "1,5,20",
            "--out", str(out), "--quiet"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "goodput" in text and "cost/call" in text and "simulated seconds" in text
    columns, rows = _rows(out / "sweep.csv")
    assert columns == COLUMNS
    assert [r["concurrency"] for r in rows] == ["1", "5", "20", "auto"]  # auto last
    assert all(r["ok"] == "40" and r["errors"] == "0" for r in rows)
    goodput = [float(r["goodput_rps"]) for r in rows]
    assert goodput[0] < goodput[1] < goodput[2]
    for r in rows:
        assert float(r["latency_p50_s"]) <= float(r["latency_p95_s"]) <= float(r["latency_p99_s"])
        assert float(r["cost_per_call_usd"]) == pytest.approx(
            float(r["cost_usd"]) / int(r["ok"]), rel=1e-4)
        # $10 per million tokens: a call's tokens and its cost agree
        tokens = float(r["input_tokens_per_call"]) + float(r["output_tokens_per_call"])
        assert float(r["cost_per_call_usd"]) == pytest.approx(tokens * 10 / 1e6, rel=1e-4)
    assert int(rows[-1]["final_limit"]) >= 1
    _assert_png(out / "sweep.png")


def test_json_names_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", "--sim", "gpu", "--requests", "20", "--concurrency", "2,4", "--no-auto",
            "--out", str(tmp_path), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["csv"] == str(tmp_path / "sweep.csv")
    assert report["png"] == str(tmp_path / "sweep.png")
    assert [row["concurrency"] for row in report["rows"]] == [2, 4]
    assert set(COLUMNS) <= set(report["rows"][0])


def test_sweep_against_a_loopback_sim_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with cli_server("--profile", "gpu", "--time-scale", "50") as (base_url, _):
        argv = ["sweep", "--base-url", base_url, "--model", "m", "--requests", "8",
                "--concurrency", "2,8", "--no-auto", "--stream", "--max-tokens", "40",
                "--scenario", "default", "--out", str(tmp_path), "--quiet"]
        assert main(argv) == 0
    text = capsys.readouterr().out
    assert "wall-clock seconds" in text and "simulated" not in text
    _, rows = _rows(tmp_path / "sweep.csv")
    assert [r["concurrency"] for r in rows] == ["2", "8"]
    assert all(r["ok"] == "8" for r in rows)
    assert all(float(r["ttft_p50_s"]) < float(r["latency_p50_s"]) for r in rows)
    assert all(0 < float(r["output_tokens_per_call"]) <= 40 for r in rows)
    _assert_png(tmp_path / "sweep.png")


def test_an_endpoint_failing_every_call_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with cli_server("--time-scale", "100", "--error-rate", "1") as (base_url, _):
        argv = ["sweep", "--base-url", base_url, "--model", "m", "--requests", "4",
                "--out", str(tmp_path), "--quiet"]
        assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "did not answer a test call" in err and "status=50" in err
    assert not (tmp_path / "sweep.csv").exists()


def test_ctrl_c_writes_the_levels_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = measure.measure_level
    calls = 0

    async def interrupted_at_the_second_level(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt
        return await real(*args, **kwargs)

    monkeypatch.setattr(measure, "measure_level", interrupted_at_the_second_level)
    argv = ["sweep", "--sim", "hosted", "--requests", "20", "--concurrency", "1,5,10",
            "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 130
    captured = capsys.readouterr()
    assert "interrupted; 1 of 4 levels measured" in captured.err
    _, rows = _rows(tmp_path / "sweep.csv")
    assert [r["concurrency"] for r in rows] == ["1"]
    _assert_png(tmp_path / "sweep.png")


def test_a_real_sigint_mid_sweep(tmp_path: Path) -> None:
    """SIGINT to a running ``gptgate sweep`` process, in its second level: exit 130 and the
    first level in sweep.csv."""
    with cli_server("--profile", "gpu") as (base_url, _):
        code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
                "from gptgate.cli import main; sys.exit(main(sys.argv[1:]))")
        argv = ["sweep", "--base-url", base_url, "--model", "m", "--requests", "10",
                "--concurrency", "5,1", "--no-auto", "--scenario", "default",
                "--max-tokens", "40", "--out", str(tmp_path), "--no-plot", "--quiet"]
        sweep = subprocess.Popen([sys.executable, "-c", code, *argv], env=cli_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # the test call, the 10 calls at 5, then 2 of the 10 at 1 (~0.2 s each): a second
        # or more into the second level
        deadline = time.monotonic() + 60
        while httpx2.get(f"{base_url}/sim/ledger", timeout=5).json()["ok"] < 1 + 10 + 2:
            assert sweep.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        sweep.send_signal(signal.SIGINT)
        _, err = sweep.communicate(timeout=30)
    assert sweep.returncode == 130, err
    assert "interrupted; 1 of 2 levels measured" in err
    _, rows = _rows(tmp_path / "sweep.csv")
    assert [r["concurrency"] for r in rows] == ["5"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sim", "hosted"], "--out"),
        (["--sim", "hosted", "--base-url", "http://x/v1", "--out", "d"], "not allowed with"),
        (["--base-url", "http://127.0.0.1:1/v1", "--out", "d"], "--base-url needs --model"),
        (["--sim", "hosted", "--concurrency", "0,5", "--out", "d"], "'0' is neither"),
        (["--sim", "hosted", "--concurrency", "5,5", "--out", "d"], "given twice"),
        (["--sim", "hosted", "--requests", "0", "--out", "d"], "must be >= 1"),
        (["--sim", "hosted", "--prompt-file", "/nonexistent", "--out", "d"], "cannot read"),
        (["--sim", "hosted", "--scenario", "nope", "--out", "d"], "unknown scenario 'nope'"),
        (["--sim", "hosted", "--price", "1,2", "--out", "d"], "--price"),
        (["--sim", "nope", "--out", "d"], "unknown simulator profile 'nope'"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], captured.err
    assert captured.out == ""


def test_without_matplotlib_it_fails_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    argv = ["sweep", "--sim", "hosted", "--requests", "5", "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == "gptgate: sweep.png needs matplotlib: pip install 'gptgate[cli]'"
    assert captured.out == ""
    # --no-plot needs no matplotlib
    assert main([*argv, "--no-plot"]) == 0
    assert (tmp_path / "sweep.csv").exists() and not (tmp_path / "sweep.png").exists()


def test_a_prompt_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(
        "Summarise the plot of Hamlet in one line.\n\n"
        '{"messages": [{"role": "user", "content": "Name three rivers."}], "max_tokens": 30}\n'
    )
    argv = ["sweep", "--sim", "gpu", "--requests", "10", "--concurrency", "2", "--no-auto",
            "--prompt-file", str(prompts), "--max-tokens", "50", "--out", str(tmp_path),
            "--no-plot", "--quiet"]
    assert main(argv) == 0
    _, rows = _rows(tmp_path / "sweep.csv")
    # short prompts, not the 1,900-token default job; answers within their caps
    assert float(rows[0]["input_tokens_per_call"]) < 100
    assert 0 < float(rows[0]["output_tokens_per_call"]) <= 50


def test_the_progress_bar_appears_only_after_its_delay(capsys: pytest.CaptureFixture[str]) -> None:
    from gptgate.cli.progress import SweepProgress

    quick = SweepProgress(2, show_after_s=60.0)
    quick(5, 10, 0, 1)
    assert quick._bar is None  # a sweep that ends within the delay draws nothing
    quick.close()
    slow = SweepProgress(2, show_after_s=0.0)
    slow(5, 10, 0, 1)
    slow(10, 10, 1, "auto")
    assert slow._bar is not None
    assert slow._bar.tasks[0].completed == 10
    assert slow._bar.tasks[0].description == "concurrency auto (level 2/2)"
    slow.close()
    assert capsys.readouterr().out == ""  # the bar is on stderr: stdout stays the table/JSON


def test_without_rich_progress_is_a_note_and_a_line_per_level(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gptgate.cli.progress import SweepProgress

    monkeypatch.setitem(sys.modules, "rich.progress", None)
    progress = SweepProgress(2, show_after_s=0.0)
    progress(3, 10, 0, 1)
    progress(10, 10, 0, 1)
    progress(0, 10, 1, "auto")
    progress.close()
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "gptgate: no progress bar without rich (pip install 'gptgate[cli]'); one line per level",
        "  level 1/2 done",
    ]


def test_a_run_where_every_call_failed_is_one_line_and_no_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a 0.5 s attempt timeout against ~1.8 s calls: nothing ever completes
    argv = ["sweep", "--sim", "hosted", "--timeout", "0.5", "--requests", "5",
            "--concurrency", "1,2", "--out", str(tmp_path / "run"), "--quiet"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    # the calls' last tries are refused by the open circuit now (before, tries admitted while
    # it was open were sent anyway: 20 timeouts on a backend that never answered, now 6)
    assert "\n" not in err and err.startswith("gptgate: every call failed: ")
    assert "no response" in err or "circuit is open" in err
    assert "nan" not in captured.out and "knee" not in captured.out
    assert "goodput" not in captured.out  # no table of empty rows
    assert not (tmp_path / "run").exists()


def _level(concurrency: int | str, ok: int, duration_s: float, cost: float) -> Any:
    return measure.LevelResult(
        concurrency=concurrency, requests=10, ok=ok, errors=10 - ok, duration_s=duration_s,
        latencies_s=(1.0,) * ok, ttfts_s=(), input_tokens=1000 * ok, cached_input_tokens=0,
        output_tokens=100 * ok, cost_usd=cost, rate_limited=0, retries=0, timeouts=10 - ok,
        final_limit=concurrency if isinstance(concurrency, int) else 7,
        first_error=None if ok else "no response before the attempt deadline",
    )


def test_a_level_where_every_call_failed_is_a_measured_fall() -> None:
    from gptgate.cli.report import SWEEP_COLUMNS, find_knee, format_table, summary

    rows = [_level(10, 10, 5.0, 0.2), _level(80, 0, 9.0, 0.3)]
    knee = find_knee(rows)
    assert knee is not None and knee.confirmed and knee.row.concurrency == 10
    text = summary(rows)
    assert "Throughput peaks at concurrency 10 (2.00 req/s); at 80 every call failed." in text
    table = format_table(rows, SWEEP_COLUMNS)
    eighty = next(line for line in table.splitlines() if line.strip().startswith("80 "))
    assert "nan" not in eighty and " - " in eighty and eighty.split()[-1] == "10"


def test_an_out_that_cannot_be_created_is_refused_before_anything_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out below a file can never be written: exit 2 before the test call, as ``gptgate
    profile`` does, not a whole billed sweep thrown away at the end."""
    blocker = tmp_path / "afile"
    blocker.write_text("")
    with cli_server("--time-scale", "100") as (base_url, _):
        argv = ["sweep", "--base-url", base_url, "--model", "m", "--requests", "4",
                "--concurrency", "1", "--no-auto", "--out", str(blocker / "run"), "--quiet"]
        assert main(argv) == 2
        assert httpx2.get(f"{base_url}/sim/ledger", timeout=5).json()["requests"] == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        f"gptgate: --out {blocker / 'run'}: cannot be created, {blocker} is not a directory")


def test_a_write_that_fails_at_the_end_still_prints_what_was_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out removed and replaced by a file while the sweep runs: the table is still printed
    (nothing measured is lost), then the write failure, exit 1."""
    out = tmp_path / "run"
    out.mkdir()
    real = measure.measure_level

    async def out_replaced_by_a_file(*args: Any, **kwargs: Any) -> Any:
        out.rmdir()
        out.write_text("")
        return await real(*args, **kwargs)

    monkeypatch.setattr(measure, "measure_level", out_replaced_by_a_file)
    argv = ["sweep", "--sim", "gpu", "--requests", "10", "--concurrency", "2", "--no-auto",
            "--out", str(out), "--quiet"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "goodput" in captured.out and "wrote" not in captured.out
    assert captured.err.strip().startswith(f"gptgate: cannot write {out / 'sweep.csv'}: ")
    out.unlink()
    out.mkdir()
    assert main([*argv, "--json"]) == 1  # the JSON report too
    report = json.loads(capsys.readouterr().out)
    assert report["csv"] is None and [row["concurrency"] for row in report["rows"]] == [2]


def test_provider_names_the_servers_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--provider llamacpp`` measures a llama-server as gptgate would call it (its slot
    caches, its signals' dialect); without it every URL was measured as ``openai``."""
    from gptgate.cli import build_parser
    from gptgate.cli.sweep import target_from

    argv = ["sweep", "--base-url", "http://127.0.0.1:8080/v1", "--model", "m", "--out", "d",
            "--provider", "llamacpp"]
    args = build_parser().parse_args(argv)
    assert target_from(args).backend(4).provider == "llamacpp"
    plain = build_parser().parse_args(argv[:-2])
    assert target_from(plain).backend(4).provider == "openai"


def test_an_unknown_provider_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["sweep", "--base-url", "http://127.0.0.1:8080/v1", "--model", "m",
                 "--out", "d", "--provider", "lamacpp"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "lamacpp" in err and "llamacpp" in err
    assert main(["sweep", "--sim", "gpu", "--out", "d", "--provider", "llamacpp"]) == 2
    assert "--provider" in capsys.readouterr().err


def test_the_progress_bar_does_not_change_what_the_simulator_measures() -> None:
    """docs/cli.md: on the simulator the figures are exact and repeatable for a given
    ``--seed``. They were, but two of them: the progress bar's watcher woke every 0.25
    simulated seconds, and those extra timers changed the order of the run's events — a
    ``gptgate demo`` at concurrency 80 took 76 s with 225 retries on a terminal and 79 s with
    229 under ``--quiet`` or ``--json``. Progress now comes from the calls' own ends."""
    target = measure.Target(model="gpt-5.5", profile="hosted",
                            price=gg.Price(input_per_mtok=10, output_per_mtok=10))
    items = measure.workload(200, 7)
    seen: list[int] = []
    quiet = measure.run_sweep(target, [80], items, seed=7).rows[0]
    shown = measure.run_sweep(target, [80], items, seed=7,
                              on_progress=lambda done, *_: seen.append(done)).rows[0]
    assert shown == quiet
    assert seen[-1] == 200 and seen == sorted(seen) and len(seen) > 10  # it still reports
