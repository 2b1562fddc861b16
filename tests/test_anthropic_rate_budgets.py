"""Anthropic's input and output token budgets, paced apart.

Anthropic limits input tokens per minute (ITPM, which cache reads do not count on current
models) and output tokens per minute (OTPM, counted at ``max_tokens`` on admission and
settled at the answer's end) separately, and states each in ``anthropic-ratelimit-
input-tokens-*`` / ``-output-tokens-*``; ``anthropic-ratelimit-tokens-*`` is only "the most
restrictive limit currently in effect". gptgate took one token budget — the tighter of
``tokens`` and ``input-tokens`` by tokens left — and charged it ``prompt + max_tokens`` and
then the whole usage, cache reads included: 60 calls of a 9,000-token prompt served 90% from
the cache took an hour of (simulated) time where the input budget they spend allowed ~20 s,
and 20 calls of 9,000 + 3,000 tokens, whose ``tokens`` headers showed the output budget, took
9 minutes where it allowed ~2 (their prompts charged to OTPM). The pacer now keeps the input
budget and the output one apart (gptgate/limits/pacing.py): each call's prompt (less the
share the cache has been serving) is charged to the first, its ``max_tokens`` to the second,
and the answer's usage settles each — its cache reads not counted."""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx2
import pytest

import gptgate as gg
from gptgate.limits import RateLimitPacer
from gptgate.sim import LoopClock, run_virtual
from gptgate.wire.anthropic import parse_anthropic_rate_limits

ITPM, OTPM = 100_000, 20_000
PROMPT = 9_000  # the input tokens the server counts for each call


def _instant(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).isoformat().replace("+00:00", "Z")


class _Budgets:
    """A Messages API with Anthropic's two token buckets (continuously refilled), answering
    each request at once; its ``tokens`` headers show the budget with fewer tokens left."""

    def __init__(self, *, itpm: int = ITPM, otpm: int = OTPM, prompt: int = PROMPT,
                 output: int = 100, cached: int = 0) -> None:
        self.level = {"input": float(itpm), "output": float(otpm)}
        self.limit = {"input": float(itpm), "output": float(otpm)}
        self.at = 0.0
        self.prompt, self.output, self.cached = prompt, output, cached
        self.refused = self.answered = 0

    def _refill(self, now: float) -> None:
        for kind, limit in self.limit.items():
            self.level[kind] = min(limit, self.level[kind] + limit / 60.0 * (now - self.at))
        self.at = now

    def _headers(self) -> dict[str, str]:
        out = {"anthropic-ratelimit-requests-limit": "4000",
               "anthropic-ratelimit-requests-remaining": "3999",
               "anthropic-ratelimit-requests-reset": _instant(0.02)}
        for kind in ("input", "output"):
            left, limit = self.level[kind], self.limit[kind]
            out[f"anthropic-ratelimit-{kind}-tokens-limit"] = str(int(limit))
            out[f"anthropic-ratelimit-{kind}-tokens-remaining"] = str(max(0, int(left)))
            out[f"anthropic-ratelimit-{kind}-tokens-reset"] = _instant(
                (limit - left) / (limit / 60.0))
        tight = min(("input", "output"), key=lambda k: self.level[k])
        for field in ("limit", "remaining", "reset"):
            out[f"anthropic-ratelimit-tokens-{field}"] = out[
                f"anthropic-ratelimit-{tight}-tokens-{field}"]
        return out

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self._refill(anyio.current_time())
        counted = self.prompt - self.cached  # cache reads are not counted against ITPM
        if self.level["input"] < counted or self.level["output"] < body["max_tokens"]:
            self.refused += 1
            wait = max((counted - self.level["input"]) / (self.limit["input"] / 60.0),
                       (body["max_tokens"] - self.level["output"]) / (self.limit["output"] / 60.0))
            return httpx2.Response(
                429, headers={**self._headers(), "retry-after": str(math.ceil(wait))},
                json={"type": "error", "error": {"type": "rate_limit_error",
                                                 "message": "rate limited"}})
        self.level["input"] -= counted
        self.level["output"] -= self.output  # max_tokens on admission, settled at the end
        self.answered += 1
        return httpx2.Response(200, headers=self._headers(), json={
            "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": self.prompt - self.cached,
                      "cache_read_input_tokens": self.cached, "output_tokens": self.output}})


async def _job(server: _Budgets, calls: int, max_tokens: int | None) -> tuple[float, list[Any]]:
    clock = LoopClock()
    claude = gg.Backend(name="claude", provider="anthropic", model="claude-sonnet-4-5",
                        api_key="sk-ant-test", concurrency=8, timeout=3600.0,
                        transport=httpx2.MockTransport(server))
    # ~4 characters a token: gptgate's estimate of the prompt is the server's count
    messages = [{"role": "user", "content": "x" * (4 * server.prompt)}]
    async with gg.Gateway([claude], clock=clock, seed=1) as gate:
        start = clock.now()
        limit = {} if max_tokens is None else {"max_tokens": max_tokens}
        results = await gate.map([{"messages": messages, "stream": False, **limit}
                                  for _ in range(calls)], max_attempts=10, timeout=3600.0)
        return clock.now() - start, results


def test_long_prompts_with_short_answers_are_paced_on_the_input_budget() -> None:
    """A tier-1-like key (40,000 ITPM, 8,000 OTPM): 3,000-token prompts, 100-token answers —
    the input budget binds (36,000 at once at a 90% margin, then 600 a second: the 18 calls
    beyond in ~90 s), without 429s."""
    server = _Budgets(itpm=40_000, otpm=8_000, prompt=3_000)
    took, results = run_virtual(_job, server, 30, 300)
    assert all(isinstance(r, gg.ChatResult) for r in results), results
    assert 60.0 < took < 120.0, took
    assert server.refused <= 3, server.refused


def test_cached_prompts_are_paced_on_what_the_input_budget_counts() -> None:
    """60 calls of a 9,000-token prompt, 8,100 of it read from the cache: the input budget
    counts 900 a call (40,000 a minute: ~40 at once, then 0.67 a second). Charged their
    whole prompt (cache reads included), they took 3,590 s; paced on what the server
    counts, 22 s."""
    server = _Budgets(itpm=40_000, otpm=8_000, cached=8_100)
    took, results = run_virtual(_job, server, 60, 300)
    assert all(isinstance(r, gg.ChatResult) for r in results), results
    assert took < 60.0, took
    assert server.refused <= 3, server.refused


def test_long_prompts_with_long_answers_are_paced_on_each_budget() -> None:
    """20 calls of 9,000 prompt tokens and 3,000 answer tokens: the output budget binds
    (20,000 a minute: 40,000 more after the first ~6 calls, ~2 minutes) — charged 12,000 a
    call against it, they took 9 minutes."""
    server = _Budgets(output=3000)
    took, results = run_virtual(_job, server, 20, 3000)
    assert all(isinstance(r, gg.ChatResult) for r in results), results
    assert server.refused <= 3, server.refused
    assert 60.0 * (20 * 3000 - OTPM) / OTPM < took < 180.0, took


def test_a_call_without_max_tokens_reserves_the_output_anthropic_counts() -> None:
    """Anthropic is sent ``max_tokens=4096`` for a call without one, and counts it against
    OTPM on admission: reserving the 1,024 an OpenAI call reserves, 30 calls of 3,000-token
    answers at 40,000 OTPM met 17 429s."""
    server = _Budgets(itpm=400_000, otpm=40_000, prompt=1_000, output=3_000)
    _, results = run_virtual(_job, server, 30, None)
    assert all(isinstance(r, gg.ChatResult) for r in results), results
    assert server.refused <= 3, server.refused


def _pacer_after(headers: dict[str, str]) -> RateLimitPacer:
    info = parse_anthropic_rate_limits(headers)
    assert info is not None
    pacer = RateLimitPacer(margin=0.9)
    pacer.observe(0.0, limit_requests=info.limit_requests,
                  remaining_requests=info.remaining_requests,
                  limit_tokens=info.limit_tokens, remaining_tokens=info.remaining_tokens,
                  limit_output_tokens=info.limit_output_tokens,
                  remaining_output_tokens=info.remaining_output_tokens)
    return pacer


FULL = {"anthropic-ratelimit-input-tokens-limit": str(ITPM),
        "anthropic-ratelimit-input-tokens-remaining": str(ITPM),
        "anthropic-ratelimit-output-tokens-limit": str(OTPM),
        "anthropic-ratelimit-output-tokens-remaining": str(OTPM),
        "anthropic-ratelimit-tokens-limit": str(OTPM),
        "anthropic-ratelimit-tokens-remaining": str(OTPM)}


def test_the_headers_give_the_pacer_an_input_and_an_output_budget() -> None:
    pacer = _pacer_after(FULL)
    stats = pacer.statistics(0.0)
    assert pacer.split
    assert (stats.tokens_available, stats.output_tokens_available) == (90_000, 18_000)
    # ten 9,000-token prompts with 300-token answers fit the input budget at once
    delays = [pacer.reserve(0.0, PROMPT + 300, 300) for _ in range(10)]
    assert delays == [0.0] * 10
    assert pacer.reserve(0.0, PROMPT + 300, 300) == pytest.approx(PROMPT / 1500.0)
    stats = pacer.statistics(0.0)
    assert stats.output_tokens_available == 18_000 - 11 * 300


def test_cache_reads_are_given_back_to_the_input_budget() -> None:
    pacer = _pacer_after(FULL)
    pacer.reserve(0.0, PROMPT + 300, 300)
    pacer.reconcile(PROMPT + 300, PROMPT + 100, reserved_output=300, actual_output=100,
                    cached=8_000)
    stats = pacer.statistics(0.0)
    assert stats.tokens_available == 90_000 - (PROMPT - 8_000)
    assert stats.output_tokens_available == 18_000 - 100


def test_a_reservation_takes_the_input_the_cache_has_not_been_serving() -> None:
    pacer = _pacer_after(FULL)
    pacer.reserve(0.0, PROMPT + 300, 300)
    pacer.reconcile(PROMPT + 300, PROMPT + 100, reserved_output=300, actual_output=100,
                    cached=8_000)
    before = pacer.statistics(0.0).tokens_available
    pacer.reserve(0.0, PROMPT + 300, 300)
    assert before - pacer.statistics(0.0).tokens_available == pytest.approx(1_000)
    pacer.reconcile(PROMPT + 300, PROMPT + 100, reserved_output=300, actual_output=100,
                    cached=0)  # a miss: its whole prompt counted
    assert before - pacer.statistics(0.0).tokens_available == pytest.approx(PROMPT)


def test_without_an_output_budget_one_budget_counts_prompt_and_answer() -> None:
    """OpenAI's ``x-ratelimit-*``: one TPM for both, cache reads included, as before."""
    pacer = RateLimitPacer(margin=0.9)
    pacer.observe(0.0, limit_tokens=100_000, remaining_tokens=100_000)
    pacer.reserve(0.0, PROMPT + 300, 300)
    pacer.reconcile(PROMPT + 300, PROMPT + 100, reserved_output=300, actual_output=100,
                    cached=8_000)
    assert not pacer.split
    assert pacer.statistics(0.0).tokens_available == 90_000 - (PROMPT + 100)


def test_tokens_headers_alone_are_the_one_budget() -> None:
    info = parse_anthropic_rate_limits({"anthropic-ratelimit-tokens-limit": "40000",
                                        "anthropic-ratelimit-tokens-remaining": "39000"})
    assert info is not None
    assert (info.limit_tokens, info.remaining_tokens, info.limit_output_tokens) == (
        40_000, 39_000, None)
