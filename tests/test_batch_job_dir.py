"""A ``job_dir`` gate.batch cannot use is a typed error naming it, before anything is sent
or held. Before: a path under a file, a file, or a directory that cannot be created raised
the OS's own ``NotADirectoryError`` / ``FileExistsError`` / ``FileNotFoundError`` (no
``gg.GateError``: ``except gg.GateError`` let it through), and ``job_dir=""`` was taken for
the current directory — the job recorded there, beside whatever else it holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import gptgate as gg
from tests.test_batch import Sim, _run

ITEMS = [{"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 10}
         for i in range(3)]


def test_a_job_dir_that_cannot_be_used_is_a_bad_request_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    where = tmp_path / "cwd"
    where.mkdir()
    monkeypatch.chdir(where)  # job_dir="" was the current directory

    async def body(sim: Sim) -> None:
        async with sim.gate(budget=gg.Budget(usd_per_hour=1.0)) as gate:
            for job_dir in (a_file, a_file / "sub", str(a_file / "sub" / "deeper")):
                with pytest.raises(gg.BadRequestError, match="job_dir") as caught:
                    await gate.batch(ITEMS, job_dir=job_dir)
                assert os.fspath(job_dir) in str(caught.value)
            with pytest.raises(gg.BadRequestError, match="job_dir"):
                await gate.batch(ITEMS, job_dir="")
            assert gate.budget_status().reserved_usd == 0  # type: ignore[union-attr]
        assert (sim.batches.uploads, sim.batches.creates) == (0, 0)

    _run(body)
    assert list(where.iterdir()) == []


def test_taking_up_a_job_dir_that_does_not_exist_leaves_nothing_behind(tmp_path: Path) -> None:
    """``take_up_batch`` (what ``gptgate batch status`` runs) on a mistyped ``job_dir``
    created it, and a ``.lock`` file in it, before saying it holds no job."""
    typo = tmp_path / "jobs" / "nightyl"

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BadRequestError, match="holds no batch job"):
                await gate.take_up_batch(ITEMS, job_dir=typo)
        assert sim.batches.uploads == 0

    _run(body)
    assert not typo.exists() and not typo.parent.exists()
