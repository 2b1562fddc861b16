"""``gptgate batch submit | status | collect | cancel``: an offline job through a provider's
Batch API from the shell, durable in its job directory (docs/batch.md).

``submit`` remembers the configuration and items files in ``JOB_DIR/cli.json``, so the other
commands need only the directory; each of them takes the job up as ``gate.batch`` does (the
same items, the same ``job_dir``), which never sends anything twice.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio

from ..batch import BatchJob, take_up_batch
from ..batch_store import JobStore
from ..config_file import ConfigFileError, load_config
from ..errors import BadRequestError, BatchItemsError, GateError, NoBackendError
from ..gateway import Gateway
from ..results import ChatResult
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    Command,
    RunFailed,
    UsageError,
    add_json_flag,
    out_problem,
    positive_float,
    print_json,
    wrapped,
)

__all__ = ["COMMAND"]

_CLI_FILE = "cli.json"

EXAMPLES = """\
examples:
  gptgate batch submit items.jsonl --config gateway.toml --backend openai --job-dir jobs/nightly
  gptgate batch status jobs/nightly
  gptgate batch collect jobs/nightly --out results.jsonl
  gptgate batch cancel jobs/nightly

ITEMS.jsonl holds one JSON object a line: gate.chat's arguments ({"messages": [...],
"max_tokens": 200, ...}). Running submit again after a crash resumes the job; other items in a
used job directory are refused.

exit codes: 0 done, 1 failed (every item failed, or the provider refused), 2 bad usage,
130 interrupted (the job keeps running at the provider: collect it later)
"""


def _read_items(path: Path) -> list[dict[str, Any]]:
    return [item for _, item in _numbered_items(path)]


def _numbered_items(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The items of ``path`` with their line numbers (blank lines skipped; a UTF-8 BOM, as
    Windows editors save one, read as nothing)."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    items: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise UsageError(f"{path}:{number}: not a JSON object") from None
        if not isinstance(item, dict):
            raise UsageError(f"{path}:{number}: not a JSON object")
        items.append((number, item))
    if not items:
        raise UsageError(f"{path}: no items (one JSON object a line: gate.chat's arguments)")
    return items


#: refused items named in the error, at most (the rest counted)
_SHOWN = 20


def _refused(error: GateError, path: Path, numbers: list[int]) -> UsageError:
    """gate.batch's refusal of these items before anything was sent, as bad usage naming
    the file's line of the item it names (``item N``: the N-th item, blank lines skipped) —
    every such item's when several were refused (``BatchItemsError``), on the error's one
    line."""
    if isinstance(error, BatchItemsError) and len(error.refused) > 1:
        shown = sorted(error.refused)[:_SHOWN]
        lines = [f"{path}:{numbers[i]}: {error.refused[i]}" for i in shown]
        if len(error.refused) > len(shown):
            lines.append(f"... and {len(error.refused) - len(shown)} more items refused")
        return UsageError("; ".join(lines))
    found = re.match(r"item (\d+)\b", error.message)
    if found is not None and int(found[1]) < len(numbers):
        return UsageError(f"{path}:{numbers[int(found[1])]}: {error.message}")
    return UsageError(error.message.replace("backend=NAME", "--backend NAME"))


def _remembered(job_dir: Path) -> dict[str, Any]:
    try:
        saved = json.loads((job_dir / _CLI_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"{job_dir}: no job submitted from the command line here "
            "(gptgate batch submit ... --job-dir DIR)"
        ) from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{job_dir / _CLI_FILE}: cannot read it ({exc})") from None
    if not isinstance(saved, dict):
        raise UsageError(f"{job_dir / _CLI_FILE}: not a job description")
    return saved


async def _with_job(
    saved: dict[str, Any],
    job_dir: Path,
    poll_s: float,
    then: Callable[[BatchJob], Coroutine[Any, Any, int]],
    send: bool,
) -> int:
    try:
        config = load_config(saved["config"])
    except ConfigFileError as exc:
        raise UsageError(str(exc)) from None
    items = _read_items(Path(saved["items"]))
    async with Gateway(config=config) as gate:
        if send:
            job = await gate.batch(items, backend=saved.get("backend"), job_dir=job_dir,
                                   retry=saved.get("retry"), poll_s=poll_s)
        else:  # status, cancel: never send the parts a submission left uncreated
            job = await take_up_batch(gate, items, backend=saved.get("backend"),
                                      job_dir=job_dir, retry=saved.get("retry"), poll_s=poll_s)
        return await then(job)


def _summary(job: BatchJob) -> dict[str, Any]:
    return {"id": job.id, "job_dir": job.job_dir, "status": job.status,
            "counts": dataclasses.asdict(job.counts), "batch_ids": job.batch_ids,
            "resumed": job.resumed}


def _show(job: BatchJob, as_json: bool) -> None:
    if as_json:
        print_json(_summary(job))
        return
    c = job.counts
    print(f"{job.id}: {job.status} — {c.completed}/{c.total} answered, {c.failed} failed"
          f" ({len(job.batch_ids)} batch(es) at the provider)")


def _run_job(args: argparse.Namespace, then: Callable[[BatchJob], Coroutine[Any, Any, int]],
             saved: dict[str, Any] | None = None, *, send: bool = True) -> int:
    job_dir = Path(args.job_dir)
    saved = saved if saved is not None else _remembered(job_dir)
    if getattr(args, "config", None):
        saved["config"] = os.path.abspath(args.config)
    code: int = anyio.run(_with_job, saved, job_dir, args.poll_s, then, send)
    return code


# -- the commands -------------------------------------------------------------------------------


def submit(args: argparse.Namespace) -> int:
    job_dir = Path(args.job_dir)
    problem = out_problem(job_dir, directory=True)
    if problem is not None:
        raise UsageError(f"--job-dir {job_dir}: {problem}")
    saved = {"config": os.path.abspath(args.config), "items": os.path.abspath(args.items),
             "backend": args.backend, "retry": args.retry}
    # a bad items file fails before anything is written
    numbers = [number for number, _ in _numbered_items(Path(saved["items"]))]
    store = JobStore(job_dir)
    recorded = store.path.exists()
    before = _remembered_raw(job_dir)
    if not recorded:
        # before anything is sent: a submit killed part-way (SIGKILL, an OOM kill) leaves
        # parts running at the provider, which status and cancel must reach without sending
        # the rest
        _remember(job_dir, saved)

    async def then(job: BatchJob) -> int:
        _remember(job_dir, saved)  # once the job is its own: a refused one changes nothing
        _show(job, args.json)
        return EXIT_OK

    try:
        return _run_job(args, then, saved)
    except BaseException as error:
        if recorded:
            raise
        if not store.path.exists():  # refused before its record: as it was before
            _restore(job_dir, before)
            if isinstance(error, BadRequestError | NoBackendError) and error.status is None:
                raise _refused(error, Path(saved["items"]), numbers) from None  # sent nothing
            raise
        if not isinstance(error, GateError):
            raise
        # this submit recorded the job, then stopped part-way (a create refused): parts may
        # run at the provider; the other commands reach them (cli.json is written)
        raise RunFailed(f"{error}; {_stopped_part_way(store, job_dir)}") from None


def _stopped_part_way(store: JobStore, job_dir: Path) -> str:
    """What a submission that failed after recording its job left, and what to do."""
    record = store.load()
    parts = record.parts if record is not None else []
    created = sum(p.batch_id is not None or p.created_after is not None for p in parts)
    if not created:
        return f"the job is recorded in {job_dir}, nothing is running: submit again to send it"
    return (
        f"the job is recorded in {job_dir}, {created} of its {len(parts)} part(s) may be "
        f"running at the provider: submit again to send the rest, `gptgate batch status "
        f"{job_dir}` to see it, `gptgate batch cancel {job_dir}` to stop it"
    )


def status(args: argparse.Namespace) -> int:
    async def then(job: BatchJob) -> int:
        await job.refresh()
        _show(job, args.json)
        return EXIT_OK

    return _run_job(args, then, send=False)


def cancel(args: argparse.Namespace) -> int:
    async def then(job: BatchJob) -> int:
        await job.cancel()
        _show(job, args.json)
        return EXIT_OK

    return _run_job(args, then, send=False)


def _line(index: int, outcome: ChatResult | GateError) -> dict[str, Any]:
    if isinstance(outcome, ChatResult):
        return {"index": index, "ok": True, "text": outcome.text,
                "finish_reason": outcome.finish_reason,
                "usage": dataclasses.asdict(outcome.usage), "cost_usd": outcome.cost_usd}
    return {"index": index, "ok": False, "error": {
        "type": type(outcome).__name__, "message": outcome.message, "status": outcome.status}}


def _remember(job_dir: Path, saved: dict[str, Any]) -> None:
    """Write ``cli.json`` whole or not at all (a kill mid-write leaves the old one)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    temp = job_dir / f".{_CLI_FILE}.{os.getpid()}.tmp"
    temp.write_text(json.dumps(saved, indent=1), encoding="utf-8")
    os.replace(temp, job_dir / _CLI_FILE)


def _remembered_raw(job_dir: Path) -> bytes | None:
    try:
        return (job_dir / _CLI_FILE).read_bytes()
    except OSError:
        return None


def _restore(job_dir: Path, before: bytes | None) -> None:
    """Put ``cli.json`` back as a submit found it (it recorded no job)."""
    path = job_dir / _CLI_FILE
    if before is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(before)


def _write_results(out: Path, results: list[ChatResult | GateError]) -> None:
    """All of them or none: written aside, then renamed over ``out``."""
    temp = out.with_name(f".{out.name}.tmp")
    with open(temp, "w", encoding="utf-8") as sink:
        for index, outcome in enumerate(results):
            sink.write(json.dumps(_line(index, outcome), ensure_ascii=False) + "\n")
    os.replace(temp, out)


def collect(args: argparse.Namespace) -> int:
    out = Path(args.out)
    problem = out_problem(out, directory=False)
    if problem is not None:
        raise UsageError(f"--out {out}: {problem}")
    saved = _remembered(Path(args.job_dir))
    for role in ("items", "config"):  # the job is the hash of its items: keep them whole
        if isinstance(saved.get(role), str) and out.resolve() == Path(saved[role]).resolve():
            raise UsageError(f"--out {out}: is the job's {role} file; write the results "
                             "elsewhere")

    async def then(job: BatchJob) -> int:
        quiet = args.quiet or args.json
        while not quiet and await job.refresh() not in ("completed", "failed", "expired",
                                                        "cancelled"):
            c = job.counts
            print(f"{job.id}: {job.status}, {c.completed}/{c.total} answered", file=sys.stderr)
            await anyio.sleep(args.poll_s)
        results = await job.wait()
        _write_results(out, results)
        _show(job, args.json)
        ok = sum(isinstance(r, ChatResult) for r in results)
        return EXIT_OK if ok or not results else EXIT_FAILED

    return _run_job(args, then, saved)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="batch_command", required=True, metavar="COMMAND")

    def sub(name: str, summary: str, run: Callable[[argparse.Namespace], int]) -> Any:
        p = commands.add_parser(name, help=summary, description=wrapped(summary),
                                epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(batch_run=run)
        return p

    p = sub("submit", "submit (or resume) ITEMS.jsonl as a Batch API job", submit)
    p.add_argument("items", metavar="ITEMS.jsonl")
    p.add_argument("--config", required=True, help="the gateway's TOML or JSON configuration")
    p.add_argument("--backend", default=None, help="the backend's name (needed with several)")
    p.add_argument("--job-dir", required=True, help="where the job is recorded")
    p.add_argument("--retry", choices=("live", "batch"), default=None,
                   help="send failed items again: live, or as one more batch (default: no)")
    for name, summary, run in (
        ("status", "poll the job once and show where it is", status),
        ("collect", "wait for the job and write its results, one JSON line an item", collect),
        ("cancel", "cancel the job (what ran is still collected)", cancel),
    ):
        p = sub(name, summary, run)
        p.add_argument("job_dir", metavar="JOB_DIR")
        p.add_argument("--config", default=None,
                       help="another configuration file than the one submit used")
        if name == "collect":
            p.add_argument("--out", required=True, help="the results file (JSONL)")
            p.add_argument("--quiet", action="store_true", help="no progress on stderr")
        _common(p)
    _common(commands.choices["submit"])


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--poll-s", type=positive_float, default=30.0, metavar="S",
                        help="seconds between polls at first (they grow; default: 30)")
    add_json_flag(parser, "print the job as one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    try:
        result: int = args.batch_run(args)
    except GateError as error:
        raise RunFailed(str(error)) from None
    return result


COMMAND = Command(
    name="batch",
    summary="offline jobs through the Batch API (submit, status, collect, cancel)",
    description="Offline jobs through a provider's Batch API at the batch price, durable in "
    "a job directory: submit, status, collect, cancel.",
    add_arguments=add_arguments,
    run=run,
    examples=EXAMPLES,
)
