"""Requests we hung up on, on llama.cpp's llama-server: does the server stay within the limit?

A request we hang up on (a deadline or timeout cut it, the caller cancelled) is not over at
the backend when the client closes its connection: llama-server ends a streamed one at its
next token, but finishes a non-streamed one whole. Its concurrency slot therefore stays taken
for the backend's ``abandon_grace_s`` after we hang up (``Permit.abandon``), or, with
``abandoned_answers="finish"``, gptgate does not hang up: it reads the answer to its end in
the background and holds the slot until then. Each call has a deadline of ``--timeout``
seconds (its whole time; the backend's own timeout stays 60 s) and asks for 20-120 tokens, or
for 2,000 one time in five (far past the deadline). The parent polls the server's
``/metrics`` every 5 ms: requests processing plus deferred (queued behind its slots) is the
server's real concurrency.

Start the server first (``bash ../shared/realserver/start_server.sh 18080``: 4 slots), then:

    python benchmarks/abandoned.py [--base-url http://127.0.0.1:18080/v1] [--limit 4]
                                   [--calls 60] [--callers 8] [--timeout 1] [--stream]
                                   [--graces 0,0.1,2] [--answers stop,finish]
                                   [--via chat|sdk|guard]

``--via``: ``chat`` (``gate.chat``, the deadline per call), ``sdk`` (the openai SDK on
``gate.http_client``, ``timeout=--timeout``: its read timeout from the send, and at most that
long waiting for a permit) or ``guard`` (``@gate.guard`` around the SDK, the gateway's
``deadline_s=--timeout``).

``--callers`` callers each send their next call when one ends. Columns: calls, cut by
their deadline, failed (cut, or shed before the send), the server's peak concurrency against
the limit, the share of polls above the limit, goodput. Not in CI (it needs the real server).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import openai

import gptgate as gg

_METRIC = re.compile(r"^llamacpp:(requests_processing|requests_deferred) (\S+)", re.M)


@dataclass(frozen=True, slots=True)
class Row:
    answers: str
    grace_s: float
    calls: int
    cut: int
    failed: int
    peak: int
    over_share: float
    goodput: float


async def _server_load(client: httpx2.AsyncClient, metrics_url: str) -> int:
    text = (await client.get(metrics_url)).text
    return int(sum(float(value) for _, value in _METRIC.findall(text)))


async def _wait_idle(client: httpx2.AsyncClient, metrics_url: str) -> None:
    with anyio.fail_after(60):
        while await _server_load(client, metrics_url):
            await anyio.sleep(0.05)


async def run(args: argparse.Namespace, answers: str, grace_s: float) -> Row:
    metrics_url = args.base_url.removesuffix("/v1") + "/metrics"
    rng = random.Random(args.seed)
    # most answers fit the timeout; every few asks for far more than it allows
    sizes = [2000 if rng.random() < 0.2 else rng.randint(20, 120) for _ in range(args.calls)]
    backend = gg.Backend(
        name="llama", base_url=args.base_url, model="tiny", concurrency=args.limit,
        timeout=60.0, abandon_grace_s=grace_s, api_key="none",
        abandoned_answers=answers,
    )
    polls: list[int] = []
    deadline = {"deadline_s": args.timeout} if args.via == "guard" else {}
    async with httpx2.AsyncClient() as client:
        await _wait_idle(client, metrics_url)
        async with gg.Gateway([backend], max_attempts=1, seed=args.seed, **deadline) as gate:
            done = anyio.Event()
            send = _sender(gate, args)

            async def poll() -> None:
                while not done.is_set():
                    polls.append(await _server_load(client, metrics_url))
                    await anyio.sleep(0.005)

            cut = [0]

            async def one(max_tokens: int) -> bool:
                body = {"messages": [{"role": "user", "content": "count on"}],
                        "max_tokens": max_tokens, "ignore_eos": True}
                try:
                    await send(body)
                except (gg.RequestTimeout, openai.APITimeoutError):
                    cut[0] += 1
                    return False
                except (gg.GateError, openai.APIError):
                    return False
                return True

            ok: list[bool] = []
            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                todo = iter(sizes)

                async def caller() -> None:  # a closed loop: the next call when one ends
                    for size in todo:
                        ok.append(await one(size))

                async with anyio.create_task_group() as calls:
                    for _ in range(args.callers):
                        calls.start_soon(caller)
                elapsed = time.perf_counter() - start
                done.set()
    over = sum(1 for p in polls if p > args.limit)
    return Row(answers, grace_s, args.calls, cut[0], ok.count(False), max(polls, default=0),
               over / max(1, len(polls)), ok.count(True) / elapsed)


def _sender(
    gate: gg.Gateway, args: argparse.Namespace
) -> Callable[[dict[str, Any]], Awaitable[None]]:
    """One call, the way ``--via`` says."""
    if args.via == "chat":

        async def chat(body: dict[str, Any]) -> None:
            if args.stream:
                async with gate.stream(**body, timeout=args.timeout) as s:
                    async for _ in s:
                        pass
            else:
                await gate.chat(**body, stream=False, timeout=args.timeout)

        return chat
    sdk = openai.AsyncOpenAI(
        api_key="none", base_url=args.base_url, http_client=gate.http_client("llama"),
        max_retries=0, **({"timeout": args.timeout} if args.via == "sdk" else {}),
    )

    async def ask(body: dict[str, Any]) -> None:
        extra = {"ignore_eos": body.pop("ignore_eos")}
        if args.stream:
            chunks = await sdk.chat.completions.create(
                model="tiny", stream=True, extra_body=extra, **body
            )
            async for _ in chunks:
                pass
        else:
            await sdk.chat.completions.create(model="tiny", extra_body=extra, **body)

    return gate.guard(backend="llama")(ask) if args.via == "guard" else ask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:18080/v1")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--graces", default="0,0.1,2")
    parser.add_argument("--answers", default="stop,finish",
                        help="Backend.abandoned_answers values to run (each with every grace)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--via", choices=["chat", "sdk", "guard"], default="chat")
    args = parser.parse_args()
    print("$ python " + " ".join(sys.argv))
    rows = [anyio.run(run, args, answers, float(g))
            for answers in args.answers.split(",") for g in args.graces.split(",")]
    print(f"\n{'stream' if args.stream else 'non-stream'} calls via {args.via}, fixed limit "
          f"{args.limit}, "
          f"a deadline of {args.timeout:g} s per call, no retries")
    print(f"{'answers':>8} {'grace s':>8} {'calls':>6} {'cut':>8} {'failed':>6} {'peak/limit':>10} "
          f"{'polls over':>10} {'goodput/s':>9}")
    for r in rows:
        print(f"{r.answers:>8} {r.grace_s:>8g} {r.calls:>6} {r.cut:>8} {r.failed:>6} "
              f"{f'{r.peak}/{args.limit}':>10} {r.over_share:>10.1%} {r.goodput:>9.1f}")


if __name__ == "__main__":
    main()
