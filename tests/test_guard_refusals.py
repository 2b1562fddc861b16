"""A server's refusal before any work (a 429 with retry-after, nothing billed) of a guarded
body's request is requeued by the guard as ``gate.chat`` and the SDK transport outside a guard
requeue it: without spending the retry budget or one of ``max_attempts`` (gptgate/shed.py).
Before, the guard retried it as a failed attempt: the docs' recommended path (the official
SDK with ``max_retries=0`` on ``gate.http_client`` inside ``@gate.guard``) failed 39 of 100
calls with ``openai.RateLimitError`` on a 600 RPM Azure deployment, once the budget was spent,
where the SDK alone and ``gate.chat`` completed all 100."""

from __future__ import annotations

import collections
from typing import Any

import anyio
import openai

import gptgate as gg
from gptgate.retry import RetryPolicy
from gptgate.sim import LoopClock, SimEngine, SimTransport, run_virtual
from gptgate.sim.azure import AZURE_PROFILE
from tests.mockbackend import USER, Script, backend, error, gateway, ok

CALLS = 60


def _run(path: str) -> tuple[collections.Counter[str], int]:
    """``CALLS`` concurrent calls on a simulated Azure deployment at 360 RPM counted in 1-s
    windows (virtual time, seeded): the outcomes and the server's 429s."""

    async def main() -> tuple[collections.Counter[str], int]:
        clock = LoopClock()
        profile = AZURE_PROFILE.model_copy(
            update={"rpm": 360, "rpm_window_s": 1.0, "api_key": None}
        )
        engine = SimEngine(profile, clock=clock, seed=4)
        az = gg.Backend(
            name="az", provider="azure", base_url="http://127.0.0.1:2", deployment="gpt-4o",
            api_key="k", transport=SimTransport(engine), concurrency=16,
            price=gg.Price(input_per_mtok=1, output_per_mtok=1),
        )
        outcomes: collections.Counter[str] = collections.Counter()
        async with gg.Gateway([az], clock=clock, seed=1, max_attempts=10) as gate:
            client = openai.AsyncAzureOpenAI(
                azure_endpoint="http://127.0.0.1:2", api_key="k", api_version="2024-10-21",
                http_client=gate.http_client("az"), max_retries=0,
            )

            async def sdk(i: int) -> Any:
                return await client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": f"q{i}"}],
                    max_tokens=20,
                )

            guarded = gate.guard(backend="az")(sdk)

            async def one(i: int) -> None:
                try:
                    if path == "chat":
                        await gate.chat([{"role": "user", "content": f"q{i}"}], max_tokens=20)
                    elif path == "sdk":
                        await sdk(i)
                    else:
                        await guarded(i)
                    outcomes["ok"] += 1
                except Exception as exc:  # counted by type
                    outcomes[type(exc).__name__] += 1

            async with anyio.create_task_group() as tg:
                for i in range(CALLS):
                    tg.start_soon(one, i)
        return outcomes, engine.ledger.snapshot().rate_limited

    return run_virtual(main)


def test_the_sdk_in_a_guard_completes_what_the_sdk_alone_completes() -> None:
    """Every call completes on all three paths, and the SDK's paths meet about as many 429s
    as gate.chat: each request takes its place in the backend's pacer (gptgate/sdk_pace.py),
    so after a 1-s window's 429 the requests the pause held go one spacing apart instead of
    all at once. Before, the SDK alone met 5× gate.chat's 429s (84 to 17 at 100 calls); 2×
    leaves room for the seeded back-off's different draws on each path."""
    chat, chat_429s = _run("chat")
    alone, alone_429s = _run("sdk")
    guarded, guarded_429s = _run("guard")
    assert chat == {"ok": CALLS}
    assert alone == {"ok": CALLS}
    assert guarded == {"ok": CALLS}  # before: RateLimitError once the retry budget was spent
    assert chat_429s > 0  # the limit was met
    assert alone_429s <= 2 * chat_429s
    assert guarded_429s <= 2 * chat_429s


def _sdk_on(gate: gg.Gateway) -> openai.AsyncOpenAI:
    """The openai SDK on the mock backend's ``gate.http_client``, retrying nothing itself."""
    return openai.AsyncOpenAI(
        api_key="x", base_url="http://127.0.0.1:9/v1", max_retries=0,
        http_client=gate.http_client("mock"),
    )


def test_refusals_in_a_guard_spend_no_attempts() -> None:
    """Three refusals then an answer, under ``max_attempts=2``: the guarded SDK call gets its
    answer (before: the second refusal ended it with the SDK's RateLimitError)."""

    async def main() -> tuple[str | None, int]:
        script = Script(*[error(429, "slow down", retry_after="1")] * 3, ok("fine"))
        async with gateway(
            backend(script), clock=LoopClock(), max_attempts=2, deadline_s=60.0
        ) as gate:
            client = _sdk_on(gate)

            @gate.guard(backend="mock")
            async def ask() -> str | None:
                r = await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
                return r.choices[0].message.content

            return await ask(), len(script.requests)

    answer, sent = run_virtual(main)
    assert (answer, sent) == ("fine", 4)


def test_a_refusal_after_the_tries_work_counts_as_an_attempt() -> None:
    """A body that read one answer and then met a refusal did work the retry repeats: that
    refusal is a counted attempt (``max_attempts=2``: one retry, then the error), as any
    failure after work is."""

    async def main() -> tuple[BaseException | None, int]:
        refused = error(429, "slow down", retry_after="1")
        script = Script(ok("one"), refused, ok("one"), refused, ok("late"))
        async with gateway(
            backend(script), clock=LoopClock(), max_attempts=2, deadline_s=60.0
        ) as gate:
            client = _sdk_on(gate)

            @gate.guard(backend="mock")
            async def ask_twice() -> None:
                for _ in range(2):
                    await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]

            try:
                await ask_twice()
            except openai.RateLimitError as exc:
                return exc, len(script.requests)
            return None, len(script.requests)

    raised, sent = run_virtual(main)
    assert isinstance(raised, openai.RateLimitError)
    assert sent == 4


def test_the_backoff_after_a_thousand_refusals_is_a_number() -> None:
    """A call requeued past ~1025 refusals (a server refusing with a 1 ms retry-after until
    the call's bound) had its back-off window overflow the float: ``OverflowError``."""
    policy = RetryPolicy(
        max_attempts=3, backoff_base_s=0.5, backoff_cap_s=20.0, max_retry_after_s=60.0,
        clock=LoopClock(), seed=1,
    )
    assert 0.0 <= policy.backoff(2000, None, None) <= 20.0
