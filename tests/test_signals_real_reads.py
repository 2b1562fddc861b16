"""Reads of ONE real llama-server are not judged "several servers behind one URL".

Captured from llama.cpp's llama-server (the build in /work/shared/realserver, ``MODEL=tiny
PARALLEL=2 EXTRA_ARGS="--metrics --slots"``), ``gate.map`` of 600 calls of 64 tokens with
``concurrency="auto"``, ``signals=True``, ``signals_interval_s=0.5``: the first reads as
``(running, waiting)`` at the server and this process's calls in flight at that moment were

    (2, 0) of 4   — the first read, taken as the job's first calls were being sent
    (2, 0) of 2
    (2, 0) of 2
    (1, 0) of 2   — one call between its answer and the next request (a 60-ms call)

and the reader warned "the server's reports count 1 of the 2 calls in flight to it, on most
reads: several servers behind one URL?" and ignored that read. The same warning came on the
4-slot ``MODEL=slow`` server in one of two 200-call runs. Two misses in the first four reads
(one of them the read before the first calls reached the server, one a single call in transit
out of two) are not "most reads" of a balancer: one call not counted is in transit
(``signals.IN_TRANSIT``).
"""

from __future__ import annotations

import logging

import pytest

import gptgate as gg
from gptgate.signals import SignalReader
from gptgate.signals_parse import ServerLoad
from tests.test_limits_limiter import FakeClock

#: (running, waiting, our calls in flight) per read, as captured
CAPTURED = [(2, 0, 4), (2, 0, 2), (2, 0, 2), (1, 0, 2)]


def test_one_real_llama_server_is_not_read_as_several(caplog: pytest.LogCaptureFixture) -> None:
    in_flight = [0]
    clock = FakeClock()
    backend = gg.Backend(name="llama", provider="llamacpp", model="m", signals=True,
                         signals_interval_s=0.5)
    reader = SignalReader(backend, clock, lambda: in_flight[0])
    with caplog.at_level(logging.WARNING, logger="gptgate"):
        for running, waiting, ours in CAPTURED:
            in_flight[0] = ours
            clock.t += 0.5
            reader.observe(ServerLoad(running=running, waiting=waiting, slots_total=2,
                                      slots_busy=running))
    assert not reader.partial
    assert not [r for r in caplog.records if "behind one URL" in r.getMessage()]
