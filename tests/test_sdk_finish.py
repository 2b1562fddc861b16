"""``Backend(abandoned_answers="finish")`` for the openai SDK on ``gate.http_client``: a server
that generates a non-streamed answer whole even when its client hangs up (llama-server) keeps
the slot until the answer ends, whoever hung up. The SDK's request is not hung up on: its answer
is read to its end in the background while the SDK gets its timeout or cancellation on time.
Virtual time: every timing below is exact."""

from __future__ import annotations

from typing import Any

import anyio
import openai
import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual
from tests.lateserver import LateNoticingServer, finishing, late_backend, long_answer
from tests.mockbackend import USER, gateway


def _sdk(gate: gg.Gateway, **options: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://127.0.0.1:9/v1",
        http_client=gate.http_client("mock"), max_retries=0, **options,
    )


async def _ask(client: openai.AsyncOpenAI, **options: Any) -> str:
    answer = await client.chat.completions.create(model="m", messages=USER, **options)
    return answer.choices[0].message.content or ""


@pytest.mark.parametrize(("answers", "peak", "second_sent"), [("stop", 2, 1.1), ("finish", 1, 3.0)])
def test_an_sdk_request_the_caller_cancels_keeps_the_slot_until_its_answer_ends(
    answers: str, peak: int, second_sent: float
) -> None:
    """Limit 1; the first SDK call is cancelled after 1 s of its 3 s answer, which the server
    still generates. Hung up on, its slot went to the second call after the grace, beside the
    answer still running (peak 2); with ``"finish"`` the second is sent when it has ended."""

    async def main() -> None:
        clock = LoopClock()
        async with anyio.create_task_group() as server_tasks:
            server, backend = finishing(server_tasks, answers)
            async with gateway(backend, clock=clock) as gate:
                client = _sdk(gate)
                got: list[str] = []

                async def first() -> None:
                    with anyio.move_on_after(1.0):
                        got.append(await _ask(client))

                async def second() -> None:
                    got.append(await _ask(client))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(first)
                    await clock.sleep(0.01)
                    tg.start_soon(second)
                    await clock.sleep(1.05)
                    assert gate.stats()["mock"].abandoned_holding == 1
                stats = gate.stats()["mock"]
            assert got == ["hi there"]
            assert server.peak == peak
            assert server.sent_at[1] - server.sent_at[0] == pytest.approx(second_sent, abs=0.02)
            assert (stats.in_flight, stats.abandoned_holding, stats.pool.checked_out) == (0, 0, 0)

    run_virtual(main)


def test_the_sdks_own_timeout_comes_on_time_and_the_answer_is_billed_at_its_real_usage() -> None:
    """The SDK's read timeout (1 s) raises its ``APITimeoutError`` on time; the answer, 2,000
    tokens long, still ends at the server 2 s later, and the attempt's estimate in the ledger
    becomes its real usage. The next call waits for the slot until then."""

    async def main() -> None:
        clock = LoopClock()
        async with anyio.create_task_group() as server_tasks:
            server, backend = long_answer(server_tasks, "finish")
            async with gateway(backend, clock=clock) as gate:
                client = _sdk(gate, timeout=1.0)
                started = clock.now()
                with pytest.raises(openai.APITimeoutError):
                    await _ask(client)
                assert clock.now() - started == pytest.approx(1.0, abs=0.01)
                booked = gate.ledger.entries["mock"]
                assert booked.estimated_attempts == 1 and booked.output_tokens < 2000
                assert gate.stats()["mock"].abandoned_holding == 1
                assert (await _ask(client.with_options(timeout=10.0))).startswith("word")
                assert server.sent_at[1] - server.sent_at[0] == pytest.approx(3.0, abs=0.02)
                entry = gate.ledger.entries["mock"]
                stats = gate.stats()["mock"]
            assert server.peak == 1
            assert (entry.attempts, entry.estimated_attempts, entry.uncertain_tokens) == (2, 0, 0)
            assert entry.output_tokens == 2 * 2000  # the late answer's real usage, and the next
            assert stats.timeouts == 1 and stats.in_flight == 0

    run_virtual(main)


def test_a_guarded_sdk_call_cut_at_its_deadline_holds_the_guards_slot_until_it_ends() -> None:
    """``@gate.guard`` around the SDK, a 1 s deadline: it cuts the body; the guard's permit
    (the one the SDK's request runs on) stays taken until the answer ends, 3 s in."""

    async def main() -> None:
        clock = LoopClock()
        async with anyio.create_task_group() as server_tasks:
            server, backend = finishing(server_tasks, "finish", answer_s=0.5)
            async with gateway(backend, clock=clock, deadline_s=1.0) as gate:
                client = _sdk(gate)

                @gate.guard(backend="mock")
                async def ask() -> str:
                    return await _ask(client)

                with pytest.raises(gg.RequestTimeout):
                    await ask()
                await clock.sleep(1.9)  # 2.9 s: the answer runs on at the server
                assert gate.stats()["mock"].abandoned_holding == 1
                await clock.sleep(0.15)
                assert gate.stats()["mock"].abandoned_holding == 0
                assert await ask() == "hi there"
                stats = gate.stats()["mock"]
            assert server.peak == 1
            assert (stats.in_flight, stats.abandoned_holding) == (0, 0)

    run_virtual(main)


def test_a_streamed_sdk_request_is_hung_up_on_as_before() -> None:
    """A stream stops at the server when its client leaves (llama-server, measured): nothing
    is read in the background, the slot goes on after the grace."""

    async def main() -> None:
        clock = LoopClock()
        async with anyio.create_task_group() as server_tasks:
            server = LateNoticingServer(server_tasks, notice_s=0.05, first_s=3.0)
            backend = late_backend(server, timeout=10.0, abandoned_answers="finish")
            async with gateway(backend, clock=clock) as gate:
                client = _sdk(gate)
                with anyio.move_on_after(1.0):
                    await _ask(client, stream=True)
                await clock.sleep(0.2)
                stats = gate.stats()["mock"]
            assert (stats.in_flight, stats.abandoned_holding) == (0, 0)

    run_virtual(main)
