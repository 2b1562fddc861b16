"""A revoked key on one backend, a healthy fallback beside it: what N requests through the
SDK path see (``openai.AsyncOpenAI`` on ``gate.http_client("primary")``, bare and inside
``@gate.guard(backend="primary")``, and on ``gate.http_client("primary",
fallback=["fallback"])``), then N routed ``gate.chat`` calls.

Real ``openai`` package, two loopback servers that check the bearer key (primary's configured
key is revoked: 401). Counts, per phase: answered, failed with the server's 401, refused
unsent by the gateway (the open circuit's 503), and the requests each server got.

    python benchmarks/revoked_key.py [--n 200] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import ExitStack

import openai

import gptgate as gg
from benchmarks._keyserver import KeyServer, key_server

REVOKED = "sk-proj-revoked-0123456789abcdef"
ROTATED = "sk-proj-rotated-aaaabbbbccccdddd"
FALLBACK = "sk-proj-fallback-fedcba9876543210"
USER = [{"role": "user", "content": "hi"}]


async def _run(n: int, concurrency: int, call: Callable[[], Awaitable[object]]) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            try:
                await call()
                outcomes["answered"] += 1
            except openai.APIStatusError as error:
                outcomes["refused unsent (503)" if error.status_code == 503
                         else f"failed {error.status_code}"] += 1
            except gg.GateError as error:
                outcomes[f"failed {type(error).__name__}"] += 1

    await asyncio.gather(*(one() for _ in range(n)))
    return outcomes


async def phase(name: str, n: int, concurrency: int) -> dict[str, object]:
    with ExitStack() as stack:
        primary: KeyServer = stack.enter_context(key_server(ROTATED))
        fallback: KeyServer = stack.enter_context(key_server(FALLBACK))
        backends = [
            gg.Backend(name="primary", base_url=primary.url, model="m", hardware="tpu",
                       api_key=REVOKED),
            gg.Backend(name="fallback", base_url=fallback.url, model="m", hardware="cpu",
                       api_key=FALLBACK),
        ]
        gate = gg.Gateway(backends, max_breaker_wait_s=0.0)  # defaults: threshold 5
        async with gate:
            client = openai.AsyncOpenAI(api_key=REVOKED, base_url=primary.url, max_retries=0,
                                        http_client=gate.http_client(
                                            "primary",
                                            fallback=["fallback"] if name == "fallback" else None,
                                        ))

            async def sdk() -> object:
                return await client.chat.completions.create(model="m", messages=USER)

            guarded = gate.guard(backend="primary")(sdk)

            async def routed() -> object:
                return await gate.chat(USER)

            outcomes = await _run(n, concurrency, guarded if name == "guard" else sdk)
            sdk_primary, sdk_fallback = primary.requests, fallback.requests
            after = await _run(n, concurrency, routed)
            circuit = gate.stats()["primary"].circuit
        return {
            "phase": name, **outcomes, "primary got": sdk_primary, "circuit": circuit,
            "then gate.chat": dict(after), "gate.chat hits on primary": primary.requests
            - sdk_primary, "fallback got (SDK)": sdk_fallback,
            "fallback got (all)": fallback.requests,
        }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    for name in ("sdk", "guard", "fallback"):
        print(await phase(name, args.n, args.concurrency))


if __name__ == "__main__":
    asyncio.run(main())
