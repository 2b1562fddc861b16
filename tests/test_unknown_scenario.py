"""A scenario name that is not a preset is the caller's bad request wherever a scenario is
taken — ``gate.chat`` said so with ``BadRequestError``; ``@gate.guard(scenario=...)`` and
``gate.http_client(..., scenario=...)`` (async and sync) raised a bare ``KeyError``
(docs/errors.md: an unknown ``scenario`` is a ``BadRequestError``, refused before sending)."""

from __future__ import annotations

import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual, sim_backend


def test_guard_and_http_client_refuse_an_unknown_scenario_as_a_bad_request() -> None:
    async def main() -> None:
        clock = LoopClock()
        backend, _ = sim_backend("gpu", name="gpu", clock=clock)
        async with gg.Gateway([backend], clock=clock) as gate:
            with pytest.raises(gg.BadRequestError, match="unknown scenario 'nope'; known: "):
                gate.guard(scenario="nope")
            with pytest.raises(gg.BadRequestError, match="unknown scenario 'nope'"):
                gate.http_client("gpu", scenario="nope")
            with pytest.raises(gg.BadRequestError, match="unknown scenario 'nope'"):
                await gate.chat([{"role": "user", "content": "hi"}], scenario="nope")

    run_virtual(main)


def test_the_sync_gateway_refuses_it_the_same_way() -> None:
    clock = gg.ScaledClock(100)
    backend, _ = sim_backend("gpu", name="gpu", clock=clock)
    with gg.SyncGateway([backend], clock=clock) as gate:
        with pytest.raises(gg.BadRequestError, match="unknown scenario 'nope'"):
            gate.guard(scenario="nope")
        with pytest.raises(gg.BadRequestError, match="unknown scenario 'nope'"):
            gate.http_client("gpu", scenario="nope")
