"""An OpenAI account out of quota (429 ``insufficient_quota``) behind one backend, a healthy
fallback beside it: N requests through the SDK path (``openai.AsyncOpenAI`` on
``gate.http_client("primary")``, the SDK's own ``max_retries`` as given), then N routed
``gate.chat`` calls.

Real ``openai`` package; the empty account is a loopback server sending OpenAI's body
(chunked), optionally with a ``retry-after``; the fallback answers at once. Prints, for the
SDK phase: the requests the empty account got, wall time, what the SDK saw (statuses), the
429s gptgate counted as rate limits, how long the backend was left paused, its circuit; then
where the ``gate.chat`` calls went.

    python benchmarks/sdk_out_of_funds.py [--n 50] [--concurrency 5] [--max-retries 2]
        [--retry-after 20]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter

import httpx2
import openai

import gptgate as gg
from benchmarks._errorserver import error_server

KEY = "sk-proj-empty-account-0123456789"
USER = [{"role": "user", "content": "hi"}]
QUOTA = {"error": {
    "message": "You exceeded your current quota, please check your plan and billing details.",
    "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}
ANSWER = {"id": "c", "object": "chat.completion", "model": "m",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                       "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


async def main(n: int, concurrency: int, max_retries: int, retry_after: str | None) -> None:
    headers = {"retry-after": retry_after} if retry_after else {}
    with error_server(429, QUOTA, headers) as server:
        primary = gg.Backend(name="primary", base_url=server.url + "/v1", model="gpt-4o-mini",
                             api_key=KEY, hardware="tpu")
        fallback = gg.Backend(
            name="fallback", base_url="http://127.0.0.1:8/v1", model="m", hardware="cpu",
            api_key="EMPTY",
            transport=httpx2.MockTransport(lambda r: httpx2.Response(200, json=ANSWER)),
        )
        async with gg.Gateway([primary, fallback], deadline_s=30.0) as gate:
            sdk = openai.AsyncOpenAI(api_key=KEY, base_url=server.url + "/v1",
                                     max_retries=max_retries,
                                     http_client=gate.http_client("primary"))
            seen: Counter[str] = Counter()
            slots = asyncio.Semaphore(concurrency)
            paused_s = 0.0

            async def one() -> None:
                async with slots:
                    try:
                        await sdk.chat.completions.create(model="gpt-4o-mini", messages=USER)
                        seen["answered"] += 1
                    except openai.APIStatusError as error:
                        seen[str(error.status_code)] += 1
                    except openai.APIError as error:
                        seen[type(error).__name__] += 1

            start = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n)))
            elapsed = time.perf_counter() - start
            state = gate.backend_state("primary")
            paused_s = max(0.0, state.pacer.paused_until - gate.clock.now())
            stats = gate.stats()["primary"]
            sdk_sent = server.requests
            routed = Counter([(await gate.chat(USER)).backend for _ in range(n)])
        print(f"SDK phase: {n} requests, concurrency {concurrency}, max_retries {max_retries}, "
              f"retry-after {retry_after or '-'}")
        print(f"  sent to the empty account: {sdk_sent}")
        print(f"  wall time: {elapsed:.1f} s")
        print(f"  SDK saw: {dict(seen)}")
        print(f"  counted as rate limited: {stats.rate_limited}; backend still paused for "
              f"{paused_s:.1f} s; circuit {stats.circuit}")
        print(f"gate.chat phase: {dict(routed)}; sent to the empty account "
              f"{server.requests - sdk_sent}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=5)
    parser.add_argument("--max-retries", type=int, default=2)
    parser.add_argument("--retry-after", default=None)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.concurrency, args.max_retries, args.retry_after))
