"""``gptgate batch submit`` SIGKILLed part-way (a real child process; an OOM kill, a node
drained at 3 a.m.): its first part runs at the provider, so ``status`` and ``cancel`` must
reach the job without sending the rest. Before, ``cli.json`` was written only once
``submit`` returned (or caught an error / Ctrl-C): after a SIGKILL both said "no job
submitted from the command line here", and the only way to reach the running part was to
``submit`` again — sending and paying for every part left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gptgate as gg
from gptgate.cli import main
from gptgate.sim import SimBatches, SimBatchPlan, SimEngine, SimServer

_CHILD = """
import os, signal, sys
import gptgate as gg
import gptgate.batch_apis
from gptgate.batch_openai import OpenAIBatches
from gptgate.cli import main

gptgate.batch_apis.OPENAI_LIMITS = gg.BatchLimits(max_requests=20, max_bytes=10**9)
real = OpenAIBatches.create

async def create_then_die(self, *args):
    await real(self, *args)
    os.kill(os.getpid(), signal.SIGKILL)   # the first part created, its id never recorded

OpenAIBatches.create = create_then_die
sys.exit(main(["batch", "submit", *sys.argv[1:]]))
"""


def test_a_submit_killed_part_way_can_be_seen_and_cancelled_without_sending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = SimEngine("hosted", clock=gg.ScaledClock(1000))
    batches = SimBatches(engine, SimBatchPlan(complete_after_s=1e8)).attach()
    root = Path(__file__).resolve().parent.parent
    with SimServer(batches.engine) as base_url:
        config = tmp_path / "gateway.toml"
        config.write_text(
            f'[[backends]]\nname = "oa"\nbase_url = "{base_url}"\n'
            f'model = "{engine.profile.model}"\n'
        )
        items = tmp_path / "items.jsonl"
        items.write_text("".join(
            json.dumps({"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 20})
            + "\n" for i in range(50)
        ))
        job = tmp_path / "job"
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(items), "--config", str(config),
             "--job-dir", str(job)],
            env={**os.environ, "PYTHONPATH": str(root)}, cwd=root, capture_output=True,
            timeout=60,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
        assert (batches.uploads, batches.creates) == (1, 1)
        assert main(["batch", "status", str(job), "--json"]) == 0, capsys.readouterr().err
        shown = json.loads(capsys.readouterr().out)
        assert shown["status"] == "submitting" and len(shown["batch_ids"]) == 1
        assert main(["batch", "cancel", str(job), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "cancelling"
        assert (batches.uploads, batches.creates) == (1, 1)  # the other parts never sent
