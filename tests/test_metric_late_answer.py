"""``gen_ai.client.token.usage`` equals the ledger when an answer given up on still arrives.

With ``Backend(abandoned_answers="finish")`` an attempt that timed out, or whose caller
cancelled it, is booked at once as an estimate (the prompt and what the elapsed time says was
generated); the answer is read to its end in the background and the ledger is set right to its
real usage (gptgate/late_answer.py). The metric now records the attempt's tokens once, when its
bill is known — the real usage, or the estimate when no answer comes — under the attempt's
``error.type`` (``gptgate.outcome="abandoned"`` for a cancelled call), for ``gate.chat`` and
an SDK on ``gate.http_client`` alike.

Before, the metric kept the estimate: 2,000 billed output tokens of a timed-out answer showed
as what 1 s of generation had made, so a dashboard's token spend ran below the bill.
Virtual time: every timing below is exact.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual
from tests.lateserver import long_answer
from tests.mockbackend import USER, gateway


def _tokens(reader: InMemoryMetricReader) -> dict[tuple[str, str | None, str | None], float]:
    """Token sums by (token type, error.type, gptgate.outcome)."""
    data = reader.get_metrics_data()
    sums: dict[tuple[str, str | None, str | None], float] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != "gen_ai.client.token.usage":
                    continue
                for point in metric.data.data_points:
                    a: Any = point.attributes or {}
                    key = (a["gen_ai.token.type"], a.get("error.type"), a.get("gptgate.outcome"))
                    sums[key] = sums.get(key, 0) + point.sum
    return sums


def _check(reader: InMemoryMetricReader, entry: Any, error: str | None, outcome: str | None,
           booked: dict[tuple[str, str | None, str | None], float]) -> None:
    assert (entry.input_tokens, entry.output_tokens, entry.estimated_attempts) == (10, 2000, 0)
    after = _tokens(reader)
    assert after == {("input", error, outcome): 10, ("output", error, outcome): 2000}
    assert booked == {}  # nothing recorded while the bill was not known


async def _give_up(how: str, gate: gg.Gateway) -> None:
    """One call whose attempt gives up on its answer after 1 s."""
    if how == "timeout":
        with pytest.raises(gg.RequestTimeout):
            await gate.chat(USER, timeout=1.0)
    elif how == "cancel":
        with anyio.move_on_after(1.0):
            await gate.chat(USER)
    else:  # the SDK's own read timeout, on gate.http_client
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:9/v1", timeout=1.0,
            http_client=gate.http_client("mock"), max_retries=0,
        )
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(
                model="m", messages=USER,  # type: ignore[arg-type]
            )


@pytest.mark.parametrize("how", ["timeout", "cancel", "sdk"])
def test_a_late_answer_reaches_the_token_metric(how: str) -> None:
    async def main() -> None:
        clock = LoopClock()
        reader = InMemoryMetricReader()
        async with anyio.create_task_group() as server_tasks:
            _, backend = long_answer(server_tasks, "finish")
            async with gateway(backend, clock=clock,
                               meter_provider=MeterProvider(metric_readers=[reader])) as gate:
                await _give_up(how, gate)
                booked = _tokens(reader)
                await clock.sleep(2.5)  # the answer has ended at the server
                entry = gate.ledger.entries["mock"]
                if how == "cancel":
                    _check(reader, entry, None, "abandoned", booked)
                else:
                    _check(reader, entry, "RequestTimeout", None, booked)
            server_tasks.cancel_scope.cancel()

    run_virtual(main)


def test_a_late_answer_that_never_comes_leaves_the_estimate_in_both() -> None:
    """The answer read on fails (a 500 after 3 s): the ledger keeps its estimate, and the
    metric records that estimate once the read has ended."""

    async def failing(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep(3.0)
        return httpx2.Response(500, json={"error": {"message": "boom"}})

    async def main() -> None:
        clock = LoopClock()
        reader = InMemoryMetricReader()
        backend = gg.Backend(
            name="mock", base_url="http://127.0.0.1:9/v1", model="m", concurrency=1,
            timeout=10.0, abandoned_answers="finish", transport=httpx2.MockTransport(failing),
            price=gg.Price(input_per_mtok=1.0, output_per_mtok=10.0),
        )
        async with gateway(backend, clock=clock,
                           meter_provider=MeterProvider(metric_readers=[reader])) as gate:
            with pytest.raises(gg.RequestTimeout):
                await gate.chat(USER, timeout=1.0)
            assert _tokens(reader) == {}
            await clock.sleep(2.5)
            entry = gate.ledger.entries["mock"]
            assert entry.estimated_attempts == 1 and entry.input_tokens > 0
            assert _tokens(reader) == {
                ("input", "RequestTimeout", None): entry.input_tokens,
                ("output", "RequestTimeout", None): entry.output_tokens,
            }

    run_virtual(main)
