"""Rate-limit and retry headers, as OpenAI and self-hosted servers send them."""

from __future__ import annotations

from email.utils import formatdate

import httpx2
import pytest

from gptgate.wire import (
    RateLimitInfo,
    parse_duration,
    parse_rate_limits,
    parse_retry_after,
    parse_should_retry,
    request_id,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("0.5s", 0.5),
        ("0.5", 0.5),
        ("7", 7.0),
        ("1m30s", 90.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("250us", 0.00025),
        ("0s", 0.0),
        (" 3s ", 3.0),
        (".5s", 0.5),
    ],
)
def test_parse_duration_formats(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "   ", "abc", "1x", "s", "ms", "-1s", "-1", "1s2", "nan", "inf", "1..5s", "1 s"]
)
def test_parse_duration_rejects_malformed(text: str) -> None:
    assert parse_duration(text) is None


def test_retry_after_ms_wins_over_retry_after() -> None:
    headers = {"retry-after-ms": "1500", "retry-after": "30"}
    assert parse_retry_after(headers) == 1.5


def test_malformed_retry_after_ms_falls_back_to_retry_after() -> None:
    assert parse_retry_after({"retry-after-ms": "soon", "retry-after": "4"}) == 4.0


@pytest.mark.parametrize(("value", "seconds"), [("2", 2.0), ("0.25", 0.25), ("0", 0.0)])
def test_retry_after_seconds(value: str, seconds: float) -> None:
    assert parse_retry_after({"retry-after": value}) == seconds


def test_negative_retry_after_is_zero() -> None:
    assert parse_retry_after({"retry-after": "-3"}) == 0.0
    assert parse_retry_after({"retry-after-ms": "-10"}) == 0.0


def test_retry_after_http_date_is_relative_to_now() -> None:
    now = 1_700_000_000.0
    date = formatdate(now + 42, usegmt=True)  # e.g. "Tue, 14 Nov 2023 22:14:02 GMT"
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(42.0)


def test_retry_after_http_date_in_the_past_is_zero() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after({"retry-after": formatdate(now - 60, usegmt=True)}, now=now) == 0.0


@pytest.mark.parametrize("value", ["soon", "", "nan", "inf", "Mon, 99 Foo 2023 99:99:99 GMT"])
def test_malformed_retry_after_is_none(value: str) -> None:
    assert parse_retry_after({"retry-after": value}) is None


def test_absent_retry_after_is_none() -> None:
    assert parse_retry_after({}) is None


def test_retry_after_reads_httpx_headers_case_insensitively() -> None:
    headers = httpx2.Headers({"Retry-After-Ms": "250", "Retry-After": "9"})
    assert parse_retry_after(headers) == 0.25


@pytest.mark.parametrize(
    ("value", "verdict"),
    [("true", True), ("false", False), ("TRUE", True), (" False ", False), ("maybe", None)],
)
def test_should_retry(value: str, verdict: bool | None) -> None:
    assert parse_should_retry({"x-should-retry": value}) is verdict


def test_should_retry_absent() -> None:
    assert parse_should_retry({}) is None


OPENAI_HEADERS = {
    "x-ratelimit-limit-requests": "10000",
    "x-ratelimit-remaining-requests": "9999",
    "x-ratelimit-reset-requests": "6ms",
    "x-ratelimit-limit-tokens": "2000000",
    "x-ratelimit-remaining-tokens": "1999500",
    "x-ratelimit-reset-tokens": "6m0s",
}


def test_rate_limits_from_openai_headers() -> None:
    info = parse_rate_limits(OPENAI_HEADERS)
    assert info == RateLimitInfo(
        limit_requests=10000,
        remaining_requests=9999,
        reset_requests_s=pytest.approx(0.006),  # type: ignore[arg-type]
        limit_tokens=2_000_000,
        remaining_tokens=1_999_500,
        reset_tokens_s=360.0,
    )


def test_rate_limits_from_httpx_headers_with_any_case() -> None:
    headers = httpx2.Headers(
        [("Content-Type", "application/json")]
        + [(key.upper(), value) for key, value in OPENAI_HEADERS.items()]
    )
    assert parse_rate_limits(headers) == parse_rate_limits(OPENAI_HEADERS)


def test_no_rate_limit_headers_is_none() -> None:
    assert parse_rate_limits({"content-type": "application/json"}) is None
    assert parse_rate_limits(httpx2.Headers({"server": "llama.cpp"})) is None


def test_partial_and_malformed_rate_limits_are_none_fields() -> None:
    info = parse_rate_limits(
        {
            "x-ratelimit-remaining-tokens": "lots",
            "x-ratelimit-limit-tokens": "100.0",
            "x-ratelimit-reset-tokens": "later",
            "x-ratelimit-remaining-requests": "-1",
        }
    )
    assert info == RateLimitInfo(limit_tokens=100)


def test_rate_limit_info_is_frozen() -> None:
    info = RateLimitInfo(limit_requests=1)
    with pytest.raises(AttributeError):
        info.limit_requests = 2  # type: ignore[misc]


def test_request_id() -> None:
    assert request_id({"x-request-id": "req_1", "request-id": "req_2"}) == "req_1"
    assert request_id({"request-id": "req_2"}) == "req_2"
    assert request_id(httpx2.Headers({"X-Request-ID": "req_3"})) == "req_3"
    assert request_id({}) is None
    assert request_id({"x-request-id": ""}) is None
