"""The prompt of an attempt abandoned before its backend's usual first token is possibly
billed, not surely free: the ledger books it as uncertain.

Before, ``gate.chat`` and the SDK transport booked nothing for an attempt left before the
backend's *median* time to first token, taken to be still queued at the server. A server whose
queue was long a while ago teaches a long median (8 s here), and a call later sent to the
quiet server is prefilled in a fraction of a second: cancelled after that, it was billed its
prompt and booked nothing (one chaos run: the cpu ledger 6.26% under the bill). Here the
ledger's prompt tokens were 9.7% (``gate.chat``) and 15.7% (the SDK) under the bill's; now
equal. Now only an attempt left before the backend's *fastest* recent
first token books no prompt; any other books it, as uncertain while nothing of its answer came.
Virtual time: every figure is exact.
"""

from __future__ import annotations

import random

import anyio
import pytest

import gptgate as gg
from gptgate.sim.profiles import PROFILES
from gptgate.testing import LoopClock, run_virtual, sim_backend

URL = "http://127.0.0.1:8000/v1/chat/completions"


async def _busy_then_quiet(path: str) -> tuple[int, int, int]:
    """(prompt tokens booked, tokens booked as uncertain, prompt tokens billed): a busy period
    (48 calls on 4 slots: a long queue, a long median first token), then 30 calls alone, each
    cancelled 0.3-1.5 s in."""
    clock = LoopClock()
    profile = PROFILES["gpu"].model_copy(update={"slots": 4, "max_queue": None})
    backend, engine = sim_backend(
        profile, name="gpu", clock=clock, seed=1, concurrency=64,
        price=gg.Price(input_per_mtok=1.0, output_per_mtok=2.0),
    )
    rng = random.Random(1)
    async with gg.Gateway([backend], clock=clock, seed=1, max_attempts=1) as gate:
        client = gate.http_client("gpu")

        async def one(i: int, give_up: float, stream: bool) -> None:
            messages = [{"role": "user", "content": f"q{i} " + "word " * rng.randint(500, 1500)}]
            with anyio.move_on_after(clock.to_real(give_up)):
                if path == "chat":
                    await gate.chat(messages, max_tokens=200, stream=stream)
                    return
                body = {"model": profile.model, "messages": messages, "max_tokens": 200,
                        "stream": stream}
                response = await client.post(URL, json=body)
                await response.aread()

        async with anyio.create_task_group() as group:  # the busy period
            for i in range(48):
                group.start_soon(one, i, 1e9, i % 2 == 0)
        first_token = gate.backend_state("gpu").ttft.percentile(0.5)
        assert first_token is not None and first_token > 5.0  # the queue's, not the server's
        for i in range(30):  # quiet: each call alone, cancelled after its prefill
            await one(100 + i, rng.uniform(0.3, 1.5), False)
            await clock.sleep(5.0)
        entry = gate.ledger.entries["gpu"]
        bill = engine.ledger.snapshot()
        return entry.input_tokens, entry.uncertain_tokens, bill.input_tokens


@pytest.mark.parametrize("path", ["chat", "sdk"])
def test_a_prompt_left_before_the_median_first_token_is_booked_as_possibly_billed(
    path: str,
) -> None:
    booked, uncertain, billed = run_virtual(_busy_then_quiet, path)
    slack = 0.005 * billed
    assert billed <= booked + slack, f"the ledger is {1 - booked / billed:.1%} under the bill"
    assert booked - uncertain - slack <= billed  # what it is sure of was billed
    assert uncertain > 0.2 * booked  # the prompts left unanswered: possibly billed, not surely
