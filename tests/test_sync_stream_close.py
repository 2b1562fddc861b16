"""Closing a ``SyncGateway`` stream while iterating it ends the iteration, as closing a
generator does — it said ``GatewayClosedError: the SyncGateway closed mid-stream``, though the
gateway was open and serving, which sent an operator looking for a shutdown that never was.
A gateway that does close under a stream still ends it with ``GatewayClosedError``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import gptgate as gg
from tests.simserve import unlimited_gpu

SCALE = 5.0
USER = [{"role": "user", "content": "Tell me about connection pools."}]


@pytest.fixture
def base_url() -> Iterator[str]:
    with unlimited_gpu(2000, seed=1, scale=SCALE) as url:
        yield url


def _gate(base_url: str) -> gg.SyncGateway:
    return gg.SyncGateway([gg.Backend(name="a", base_url=base_url, model="m")],
                          clock=gg.ScaledClock(SCALE))


def test_closing_the_stream_being_iterated_ends_the_iteration(base_url: str) -> None:
    with _gate(base_url) as gate:
        stream = gate.stream(USER, max_tokens=1500)
        read: list[str] = []
        for text in stream:
            read.append(text)
            if len(read) == 3:
                stream.close()  # the reader decided it has enough
        assert len(read) == 3
        assert gate.chat(USER, max_tokens=5).text  # the gateway is open and serving


def test_a_gateway_closing_under_a_stream_still_ends_it_typed(base_url: str) -> None:
    gate = _gate(base_url)
    stream = gate.stream(USER, max_tokens=1500)
    reader = iter(stream)
    next(reader)
    gate.close(grace_s=0.0)
    with pytest.raises(gg.GatewayClosedError):
        for _ in reader:
            pass
