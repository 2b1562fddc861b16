"""What can never be served is refused at once, and what the server billed is in the ledger.

Defect 4 of issue 11: one request bigger than the backend's whole tokens-per-minute budget is
a typed, non-retryable error that holds up no one. Defect 10: the work a server bills for an
attempt that produced no result (a body cut mid-way or malformed, a call cancelled after it
was sent) is counted as possibly billed. The simulator's own ledger is the ground truth.
"""

from __future__ import annotations

from typing import Any

import pytest

import gptgate as gg
from gptgate.errors import BadRequestError, RateLimitedError, RequestTooLargeError
from gptgate.sim import LoopClock, SimEngine, get_profile, run_virtual
from gptgate.testing import sim_backend
from gptgate.wire import error_for_status

SMALL = [{"role": "user", "content": "hi"}]

# -- defect 4: a request that can never fit ---------------------------------------------------


def _tpm_backend(clock: LoopClock, tpm: int = 10_000) -> tuple[gg.Backend, SimEngine]:
    profile = get_profile("gpu").model_copy(update={"tpm": tpm, "rpm": None})
    return sim_backend(profile, name="sim", clock=clock, seed=1, concurrency=4)


async def _too_large_then_small(warm_first: bool) -> dict[str, Any]:
    clock = LoopClock()
    backend, engine = _tpm_backend(clock)
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        if warm_first:  # the pacer learns the limit from x-ratelimit-limit-tokens
            await gate.chat(SMALL, max_tokens=50)
        sent_before = engine.ledger.snapshot().requests
        start = clock.now()
        with pytest.raises(RequestTooLargeError) as info:
            await gate.chat(SMALL, max_tokens=15_000)
        refused_after = clock.now() - start
        sent_for_big = engine.ledger.snapshot().requests - sent_before
        after = await gate.chat(SMALL, max_tokens=50)
        state = gate.backend_state("sim")
        return {
            "error": info.value,
            "refused_after": refused_after,
            "sent_for_big": sent_for_big,
            "next_queue": after.queue_s,
            "paused_until": state.pacer.paused_until,
            "stats": gate.stats()["sim"],
        }


def _assert_paused_no_one(out: dict[str, Any]) -> None:
    error = out["error"]
    assert isinstance(error, BadRequestError) and not error.retryable
    assert (error.limit, error.requested) == (10_000, pytest.approx(15_005, abs=20))
    assert out["refused_after"] < 1.0  # was 120 s of retries
    assert out["next_queue"] == 0.0  # was 60 s behind the pacer's pause
    assert out["paused_until"] == float("-inf")
    stats = out["stats"]
    assert stats.circuit == "closed" and stats.rate_limited == 0 and stats.retries == 0
    assert stats.limit_events.get("loss", 0) == 0


def test_a_request_over_the_tpm_limit_is_refused_from_the_429_and_pauses_no_one() -> None:
    out = run_virtual(_too_large_then_small, False)
    _assert_paused_no_one(out)
    assert out["sent_for_big"] == 1  # sent once: only the server knew the limit
    assert out["error"].status == 429


def test_a_request_over_a_known_tpm_limit_is_refused_before_sending() -> None:
    out = run_virtual(_too_large_then_small, True)
    _assert_paused_no_one(out)
    assert out["sent_for_big"] == 0
    assert out["error"].status is None


def test_the_simulator_answers_a_request_over_its_tpm_like_openai() -> None:
    from gptgate.sim.ratelimit import RateLimiter

    limiter = RateLimiter(None, 10_000, 0.0, "gpt-x")
    decision = limiter.admit(15_009, 0.0)
    assert decision.kind == "tokens"
    assert decision.message.startswith("Request too large for gpt-x")
    assert "Limit 10000, Requested 15009." in decision.message
    assert limiter.admit(9_000, 0.0).kind is None  # nothing was charged for the refusal
    busy = limiter.admit(2_000, 0.0)
    assert busy.kind == "tokens" and busy.message.startswith("Rate limit reached")


def _body(message: str, code: str = "rate_limit_exceeded") -> bytes:
    import json

    return json.dumps({"error": {"message": message, "type": "tokens", "code": code}}).encode()


@pytest.mark.parametrize(
    ("message", "sizes"),
    [
        (
            "Request too large for gpt-4o in organization org-x on tokens per min (TPM): "
            "Limit 30000, Requested 36282. The input or output tokens must be reduced.",
            (30_000, 36_282),
        ),
        (  # Groq: thousands separators, a colon, lower case
            "Request too large for model `llama3-70b` on tokens per minute (TPM): "
            "limit: 6,000, requested: 7,548, please reduce your message size",
            (6_000, 7_548),
        ),
        (  # an older simulator wording: "Used" between them, still bigger than the limit
            "Rate limit reached for m on tokens per min (TPM): Limit 10000, Used 0, "
            "Requested 15009. Please try again in 1m0s.",
            (10_000, 15_009),
        ),
    ],
)
def test_a_429_saying_requested_exceeds_limit_is_request_too_large(
    message: str, sizes: tuple[int, int]
) -> None:
    headers = {"retry-after": "60", "x-should-retry": "true"}
    error = error_for_status(429, headers, _body(message), backend="b")
    assert isinstance(error, RequestTooLargeError)
    assert (error.limit, error.requested) == sizes
    assert not error.retryable and error.retry_after is None
    assert error.status == 429 and error.backend == "b"


@pytest.mark.parametrize(
    "message",
    [
        "Rate limit reached for m on tokens per min (TPM): Limit 10000, Used 9000, "
        "Requested 2000. Please try again in 6s.",
        "Rate limit reached. Please slow down.",
        "Limit 10000 reached",
    ],
)
def test_an_ordinary_429_stays_a_retryable_rate_limit(message: str) -> None:
    error = error_for_status(429, {"retry-after": "6"}, _body(message), backend="b")
    assert type(error) is RateLimitedError and error.retryable and error.retry_after == 6


def test_an_in_band_too_large_error_event_is_typed() -> None:
    import json

    from gptgate.wire import parse_chat_response as parse

    body = json.dumps(
        {"error": {"message": "Limit 100, Requested 400", "code": "rate_limit_exceeded"}}
    ).encode()
    with pytest.raises(RequestTooLargeError):
        parse(body, backend="b")


def test_request_too_large_is_exported() -> None:
    assert gg.RequestTooLargeError is RequestTooLargeError
    assert issubclass(gg.RequestTooLargeError, gg.BadRequestError)
