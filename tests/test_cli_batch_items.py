"""``gptgate batch submit`` with an items file as users have them: one saved with a UTF-8 BOM
(Windows Notepad, PowerShell 5's ``Out-File -Encoding utf8``) is read (before: "line 1: not a
JSON object", exit 2, for a valid object); an item gate.batch refuses before anything is
sent (no ``messages``, a bad ``max_tokens``, an empty file, a config of several backends
without ``--backend``) is bad usage, exit 2 naming the file and line (before: exit 1, "the
provider refused", and "item 1" for what is line 3 of the file); nothing is sent and no
job is left recorded. ``collect --out`` naming the job's own items (or configuration) file
is bad usage too (it replaced them with the results: the job could not be taken up again)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gptgate.cli import main
from gptgate.sim import SimBatches
from tests.test_cli_batch import provider  # noqa: F401 - the fixture

_OK = json.dumps({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 5})
_HOT = json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})


def test_an_items_file_with_a_utf8_bom_is_read(
    provider: tuple[SimBatches, Path, Path],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    batches, config, _ = provider
    items = tmp_path / "bom.jsonl"
    items.write_bytes(b"\xef\xbb\xbf" + f"{_OK}\r\n{_OK}\r\n".encode())
    job = str(tmp_path / "job")
    code = main(["batch", "submit", str(items), "--config", str(config), "--job-dir", job,
                 "--json"])
    assert code == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["counts"]["total"] == 2
    assert batches.uploads == 1


@pytest.mark.parametrize(
    ("lines", "where", "why"),
    [
        ([_OK, "", '{"messages": 5}'], ":3:", "item 1 needs 'messages'"),
        ([_OK, '{"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"}'], ":2:",
         "max_tokens"),
        ([], "", "no items"),
        # several refused: each named, not the first only (line 2's temperature, line 5)
        ([_OK, _HOT, "", _OK, '{"messages": 5}'], ":5:", "temperature must be a number"),
    ],
)
def test_an_item_refused_before_anything_is_sent_is_bad_usage_naming_its_line(
    provider: tuple[SimBatches, Path, Path],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    lines: list[str],
    where: str,
    why: str,
) -> None:
    batches, config, _ = provider
    items = tmp_path / "items.jsonl"
    items.write_text("".join(f"{line}\n" for line in lines))
    job = tmp_path / "job"
    code = main(["batch", "submit", str(items), "--config", str(config), "--job-dir", str(job)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{items}{where}" in err and why in err
    assert (batches.uploads, batches.creates) == (0, 0)
    assert not (job / "job.json").exists() and not (job / "cli.json").exists()


def test_several_backends_without_backend_is_bad_usage(
    provider: tuple[SimBatches, Path, Path],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    batches, config, items = provider
    text = config.read_text()
    two = tmp_path / "two.toml"
    two.write_text(text + text.replace('name = "oa"', 'name = "ob"'))
    code = main(["batch", "submit", str(items), "--config", str(two), "--job-dir",
                 str(tmp_path / "job")])
    err = capsys.readouterr().err
    assert code == 2 and "backend" in err, err
    assert batches.uploads == 0


def test_collect_never_writes_its_results_over_the_jobs_own_items_or_config(
    provider: tuple[SimBatches, Path, Path],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``collect DIR --out items.jsonl`` replaced the items file with the results: the job,
    the hash of its items, could then never be taken up again ("holds another job")."""
    _, config, items = provider
    job = str(tmp_path / "job")
    assert main(["batch", "submit", str(items), "--config", str(config), "--job-dir", job]) == 0
    before = items.read_bytes(), config.read_bytes()
    for out in (items, config, tmp_path / "." / items.name):
        code = main(["batch", "collect", job, "--out", str(out), "--poll-s", "0.02"])
        err = capsys.readouterr().err
        assert code == 2 and "--out" in err, err
    assert (items.read_bytes(), config.read_bytes()) == before
    assert main(["batch", "status", job]) == 0
