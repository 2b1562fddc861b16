"""``gptgate batch submit | status | collect | cancel`` against the simulator's Batch API over
loopback HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import gptgate as gg
from gptgate.cli import main
from gptgate.sim import SimBatches, SimBatchPlan, SimEngine, SimServer


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[tuple[SimBatches, Path, Path]]:
    """A simulated provider (batches take 0.06 s of wall time), a configuration file for
    it, and an items file of 50 prompts."""
    engine = SimEngine("hosted", clock=gg.ScaledClock(1000))
    batches = SimBatches(engine, SimBatchPlan(complete_after_s=60, fail_rate=0.1, seed=4))
    with SimServer(batches.attach().engine) as base_url:
        config = tmp_path / "gateway.toml"
        config.write_text(
            f'[[backends]]\nname = "oa"\nbase_url = "{base_url}"\n'
            f'model = "{engine.profile.model}"\n'
            "price = {input_per_mtok = 2.0, output_per_mtok = 8.0}\n"
        )
        items = tmp_path / "items.jsonl"
        items.write_text("".join(
            json.dumps({"messages": [{"role": "user", "content": f"q{i} " * (i + 1)}],
                        "max_tokens": 20}) + "\n"
            for i in range(50)
        ))
        yield batches, config, items


def test_submit_status_collect(
    provider: tuple[SimBatches, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batches, config, items = provider
    job = str(tmp_path / "job")
    args = [str(items), "--config", str(config), "--job-dir", job, "--poll-s", "0.02"]
    assert main(["batch", "submit", *args, "--json"]) == 0
    submitted = json.loads(capsys.readouterr().out)
    assert submitted["counts"]["total"] == 50 and len(submitted["batch_ids"]) == 1
    assert main(["batch", "submit", *args, "--json"]) == 0  # again: resumed, nothing sent
    assert json.loads(capsys.readouterr().out)["resumed"] is True
    assert main(["batch", "status", job, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == submitted["id"]
    out = tmp_path / "results.jsonl"
    assert main(["batch", "collect", job, "--out", str(out), "--poll-s", "0.02"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["index"] for line in lines] == list(range(50))
    failed = [line for line in lines if not line["ok"]]
    assert failed and all(line["error"]["status"] == 500 for line in failed)
    assert "completed" in capsys.readouterr().out
    assert batches.creates == 1 and batches.uploads == 1


def test_cancel_and_usage_errors(
    provider: tuple[SimBatches, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batches, config, items = provider
    batches.plan = SimBatchPlan(complete_after_s=3600)
    job = str(tmp_path / "job")
    assert main(["batch", "submit", str(items), "--config", str(config), "--job-dir", job]) == 0
    assert "validating" in capsys.readouterr().out
    assert main(["batch", "cancel", job, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "cancelling"
    assert main(["batch", "status", str(tmp_path / "nowhere")]) == 2
    assert "no job submitted" in capsys.readouterr().err
    other = tmp_path / "other.jsonl"
    other.write_text('{"messages": [{"role": "user", "content": "else"}]}\n')
    code = main(["batch", "submit", str(other), "--config", str(config), "--job-dir", job])
    assert code == 1 and "another job" in capsys.readouterr().err
    assert json.loads((Path(job) / "cli.json").read_text())["items"] == str(items)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("[1, 2]\n")
    assert main(["batch", "submit", str(bad), "--config", str(config), "--job-dir", job]) == 2


def test_a_job_whose_submission_failed_part_way_can_be_seen_and_cancelled_without_sending(
    provider: tuple[SimBatches, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job of three parts whose second create the provider refuses (OpenAI's "Enqueued
    token limit reached", a 400): the first part runs at the provider. ``status`` shows the
    job and ``cancel`` stops that part — neither sends the parts never created — and
    ``collect`` afterwards creates nothing either: the cancelled items end cancelled. Before,
    ``submit`` left no ``cli.json`` (``status``/``cancel``: "no job submitted here"), and
    taking the job up tried the refused creates again first."""
    import gptgate.batch_apis
    from gptgate.sim.openai_batches import _error

    batches, config, items = provider
    batches.plan = SimBatchPlan(complete_after_s=1e8)  # nothing ends before the cancel
    monkeypatch.setattr(gptgate.batch_apis, "OPENAI_LIMITS",
                        gg.BatchLimits(max_requests=20, max_bytes=10**9))
    create, tried = batches._create, []

    def refuse_after_the_first(body: bytes) -> object:
        tried.append(body)
        if batches.creates >= 1:
            return _error(400, "Enqueued token limit reached for m in organization org.")
        return create(body)

    monkeypatch.setattr(batches, "_create", refuse_after_the_first)
    job = str(tmp_path / "job")
    args = [str(items), "--config", str(config), "--job-dir", job]
    assert main(["batch", "submit", *args]) == 1
    err = capsys.readouterr().err
    assert "Enqueued token limit" in err and f"gptgate batch cancel {job}" in err
    assert (batches.creates, len(tried)) == (1, 2)
    assert main(["batch", "status", job, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "submitting" and len(shown["batch_ids"]) == 1
    assert main(["batch", "cancel", job, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "cancelling"
    assert [b.status in ("cancelling", "cancelled") for b in batches.batches.values()] == [True]
    out = tmp_path / "results.jsonl"
    assert main(["batch", "collect", job, "--out", str(out), "--poll-s", "0.02"]) == 1
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 50
    assert {line["error"]["type"] for line in lines} == {"BatchCancelledError"}
    assert (batches.creates, len(tried)) == (1, 2)  # nothing was created or tried again
