"""A rolling deploy: processes of an earlier release and of this tree, as real OS processes
on one namespace, one redis-server and one loopback backend. Two earlier releases: 8304dcb
(before the fleet's script changes: acquire without the "lost" flag, renewal without Redis's
TIME, the limit key kept alive by every acquire) and 54ef0d3 (the release before leases moved
to Redis's clock: it still sweeps by its own wall clock). The fleet's limit holds across both,
neither crashes on the other's keys, and a 429's pause seen by either holds the other
(docs/fleet.md, "Upgrading a fleet"). Each process runs its own scripts by their SHA, and the
keys' types and values are the same in every release: nothing to refuse. Skipped where the
old release is not in git."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.countserver import count_server
from tests.fleettools import namespace

#: earlier releases run against this tree
OLD = ("8304dcb", "54ef0d3")
ROOT = Path(__file__).resolve().parents[1]
WORKER = str(Path(__file__).with_name("fleetworker.py"))
LIMIT = 3


@pytest.fixture(scope="module", params=OLD)
def old_tree(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    release = request.param
    where = tmp_path_factory.mktemp(f"old{release}")
    archive = where / "old.tar"
    done = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "-o", str(archive), release, "gptgate"],
        capture_output=True, check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"release {release} not in this checkout's git")
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    return where


class Worker:
    def __init__(self, tree: Path, args: list[str], *, wall_offset_s: float = 0.0) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree), "FLEET_WALL_OFFSET_S": str(wall_offset_s)}
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, *args], env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", self.finish()

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self) -> str:
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0 and "done" in out, err[-3000:]
        return err


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait()


def test_old_and_new_processes_keep_one_fleet_limit(
    redis_url: str, old_tree: Path, workers: list[Worker]
) -> None:
    ns = namespace()
    with count_server(delay_s=0.03) as (base_url, counts):
        for tree in (old_tree, ROOT, old_tree, ROOT):
            workers.append(Worker(tree, [redis_url, ns, base_url, str(LIMIT), "15", "hi"]))
        for worker in workers:
            worker.go()
        errors = [worker.finish() for worker in workers]
    assert len(counts.arrivals) == 60
    assert counts.most == LIMIT  # reached, never passed
    assert not any("Traceback" in err or "ERROR" in err for err in errors), errors


def test_new_processes_an_hour_ahead_keep_the_limit_beside_old_ones(
    redis_url: str, old_tree: Path, workers: list[Worker]
) -> None:
    """This release judges its leases on Redis's clock: its processes' clocks may be off,
    and the old release's processes (which sweep by their own clocks) still find the new
    leases' expiries on Redis's clock, which theirs agree with. Before, a new process an hour
    ahead swept the old ones' permits as expired (tests/test_shared_redis_clock.py)."""
    ns = namespace()
    with count_server(delay_s=0.03) as (base_url, counts):
        args = [redis_url, ns, base_url, str(LIMIT), "15", "hi"]
        for tree, offset in ((old_tree, 0.0), (ROOT, 3600.0), (old_tree, 0.0), (ROOT, 3600.0)):
            workers.append(Worker(tree, args, wall_offset_s=offset))
        for worker in workers:
            worker.go()
        for worker in workers:
            worker.finish()
    assert len(counts.arrivals) == 60
    assert counts.most <= LIMIT, counts.most


@pytest.mark.parametrize("old_tree", OLD[-1:], indirect=True)  # (the pause is the same in both)
@pytest.mark.parametrize("tripper", ["old", "new"])
def test_a_pause_seen_by_one_release_holds_the_other(
    redis_url: str, old_tree: Path, workers: list[Worker], tripper: str
) -> None:
    ns = namespace()
    trees = (old_tree, ROOT) if tripper == "old" else (ROOT, old_tree)
    raw = redis.Redis.from_url(redis_url)
    with count_server(retry_after_s=2) as (base_url, counts):
        args = [redis_url, ns, base_url, str(LIMIT)]
        trips = Worker(trees[0], [*args, "1", "trip"])
        follows = Worker(trees[1], [*args, "3", "after"])
        workers += [trips, follows]
        trips.go()
        assert counts.tripped.wait(30)
        deadline = time.monotonic() + 10
        while not raw.keys(f"gptgate:{ns}:*:pause") and not raw.keys(f"{ns}:*:pause"):
            assert time.monotonic() < deadline, raw.keys(f"*{ns}*")
            time.sleep(0.01)
        follows.go()
        follows.finish()
        trips.finish()
    raw.close()
    tripped_at = next(t for t, word, status in counts.arrivals if status == 429)
    after = [t - tripped_at for t, word, _ in counts.arrivals if word == "after"]
    assert len(after) == 3
    assert min(after) >= 2 - 0.25, after  # the follower waited out the tripper's retry-after
