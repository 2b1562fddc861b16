"""A guard without ``backend=`` around an SDK bound to one backend through
``gate.http_client("a")``: the router may give the guard's permit to another backend "b",
while every request its body sends goes to "a" (on a permit of its own there).

Found by a new-user combination (a Flask app: ``gate.chat`` and ``gate.stream`` threads beside a
guarded sync SDK on ``gate.http_client("a")``, one of two backends killed mid-run): the SDK's
connection errors on the dead "a" were reported as failures of "b", "b"'s circuit opened, and
calls that should have failed over from "a" to "b" failed with ``ConnectError`` instead
(7 ``gate.chat`` and 20 ``gate.stream`` calls in 12 s). On a healthy pair the same guard
booked each answer twice: once on "a" by the wire, once on "b" as if the SDK had used its own
client.
"""

from __future__ import annotations

import anyio
import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual, sim_backend

USER = [{"role": "user", "content": "Tell me about connection pools."}]
PRICE = gg.Price(input_per_mtok=1.0, output_per_mtok=4.0)


def _refused(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("connection refused", request=request)


async def _guarded_elsewhere(dead: bool, n: int) -> dict[str, object]:
    clock = LoopClock()
    if dead:
        a = gg.Backend(name="a", base_url="http://127.0.0.1:8000/v1", model="m",
                       transport=httpx2.MockTransport(_refused), concurrency=4, price=PRICE)
        engine_a = None
    else:
        a, engine_a = sim_backend("gpu", name="a", clock=clock, concurrency=4, price=PRICE)
    b, engine_b = sim_backend("gpu", name="b", clock=clock, seed=1, concurrency=4, price=PRICE)
    gate = gg.Gateway([a, b], clock=clock, seed=1)
    async with gate:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:8000/v1",
            http_client=gate.http_client("a"), max_retries=0,
        )

        @gate.guard(scenario="realtime_chat")  # no backend=: the router picks one
        async def ask() -> str:
            answer = await client.chat.completions.create(model="m", messages=USER, max_tokens=20)
            return answer.choices[0].message.content or ""

        outcomes: list[str] = []

        async def one() -> None:
            try:
                await ask()
                outcomes.append("ok")
            except openai.APIConnectionError:
                outcomes.append("refused")
            except (openai.InternalServerError, gg.BackendError) as error:
                # once "a"'s circuit opened: refused unsent, by the SDK's transport or the guard
                assert "circuit is open" in str(error)
                outcomes.append("refused")

        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                for _ in range(n):
                    tg.start_soon(one)
            # then a plain call, free to go anywhere: it must reach the healthy "b"
            after = await gate.chat(USER, max_tokens=10)
        stats = gate.stats()
    return {
        "outcomes": outcomes, "after": after.backend, "stats": stats,
        "bill_a": engine_a.ledger.snapshot() if engine_a else None,
        "bill_b": engine_b.ledger.snapshot(),
        "ledger": gate.ledger if hasattr(gate, "ledger") else None,
    }


def test_sdk_failures_on_another_backend_leave_the_guards_backend_healthy() -> None:
    out = run_virtual(_guarded_elsewhere, True, 16)
    stats = out["stats"]
    assert isinstance(stats, dict)
    assert out["outcomes"] == ["refused"] * 16
    assert stats["b"].failures == 0, "b never failed: nothing was sent to it"
    assert stats["b"].circuit == "closed"
    assert out["after"] == "b"


def test_a_guarded_answer_from_another_backend_is_booked_once_where_it_was_served() -> None:
    out = run_virtual(_guarded_elsewhere, False, 16)
    stats = out["stats"]
    assert isinstance(stats, dict)
    assert out["outcomes"] == ["ok"] * 16
    bill_b = out["bill_b"]
    # "b" served at most the final plain call: its ledger holds that and nothing of the SDK's
    assert stats["b"].calls == (1 if out["after"] == "b" else 0)
    assert stats["b"].input_tokens == bill_b.input_tokens  # type: ignore[attr-defined]
    assert stats["b"].output_tokens == bill_b.output_tokens  # type: ignore[attr-defined]
    bill_a = out["bill_a"]
    assert stats["a"].input_tokens == bill_a.input_tokens  # type: ignore[attr-defined]
    assert stats["a"].output_tokens == bill_a.output_tokens  # type: ignore[attr-defined]


async def _sequential(private: bool) -> tuple[int, int, int]:
    clock = LoopClock()
    a, _ = sim_backend("cpu", name="a", clock=clock, concurrency=4, price=PRICE)
    # "b" (listed first, a GPU) looks the better choice to the router, and is the private one
    b, _ = sim_backend("gpu", name="b", clock=clock, seed=1, concurrency=64, price=PRICE,
                       private=True)
    gate = gg.Gateway([b, a], clock=clock, seed=1)
    async with gate:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:8000/v1",
            http_client=gate.http_client("a"), max_retries=0,
        )

        @gate.guard(scenario="batch_content", private=private)
        async def ask() -> str:
            answer = await client.chat.completions.create(model="m", messages=USER, max_tokens=20)
            return answer.choices[0].message.content or ""

        async def wave(n: int) -> None:
            async with anyio.create_task_group() as tg:
                for _ in range(n):
                    tg.start_soon(ask)

        with anyio.fail_after(600):
            await ask()  # the first call: routed as any call
            await wave(16)  # then a burst, after the call site has seen where it sends
        stats = gate.stats()
    return stats["a"].admitted, stats["b"].admitted, stats["a"].calls


@pytest.mark.parametrize("private", [False, True])
def test_a_call_site_learns_the_backend_its_sdk_is_bound_to(private: bool) -> None:
    a_admitted, b_admitted, a_calls = run_virtual(_sequential, private)
    assert a_calls == 17  # each call counted once, where it ran
    if private:
        # the guard may only go to a private backend: it keeps "b" (a permit there per call),
        # but nothing of the call is booked on "b"
        assert b_admitted == 17 and a_admitted == 17
    else:
        # only the first call was routed to "b"; the burst went where its requests went,
        # under one permit each (the request ran under the guard's)
        assert b_admitted == 1 and a_admitted == 17
