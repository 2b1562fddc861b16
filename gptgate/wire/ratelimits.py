"""What a response's headers say about pacing: retry-after, rate-limit budgets, request ids.

Every function takes ``headers`` as an ``httpx2.Headers`` (case-insensitive) or any
``Mapping[str, str]`` whose keys are already lowercase (a plain dict from a test or another
HTTP stack). Values that cannot be parsed become ``None`` rather than raising: a server's odd
header must never turn a good answer into an error.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

import httpx2

__all__ = [
    "RateLimitInfo",
    "parse_duration",
    "parse_rate_limits",
    "parse_retry_after",
    "parse_should_retry",
    "request_id",
    "retry_after_from_resets",
]

# Go-style durations as OpenAI prints them ("6m0s", "20ms", "1h2m3.5s"); "ms" must be tried
# before "m" and "s", "us"/"µs"/"ns" cover servers that print sub-millisecond resets.
_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:h|ms|us|µs|ns|m|s))+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|ns|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _seconds(text: str) -> float | None:
    """A finite float from ``text`` or None (rejects "nan", "inf" and garbage)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_duration(text: str) -> float | None:
    """Seconds in an OpenAI reset value (``"1s"``, ``"6m0s"``, ``"20ms"``, ``"0.5"``), or None."""
    text = text.strip()
    if not text:
        return None
    if text[-1].isdigit() or text[-1] == ".":
        value = _seconds(text)
        return value if value is not None and value >= 0 else None
    if _DURATION.fullmatch(text) is None:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait before retrying, or None when the server did not say (or said nonsense).

    ``retry-after-ms`` (OpenAI's finer header) wins over ``retry-after``, which is either
    seconds or an HTTP date, read relative to ``now`` (epoch seconds, default ``time.time()``).
    A date or value in the past means "now": 0.0.
    """
    value = headers.get("retry-after-ms")
    if value is not None:
        ms = _seconds(value.strip())
        if ms is not None:
            return max(0.0, ms / 1000.0)
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    seconds = _seconds(value)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" or no zone: RFC 9110 dates are GMT anyway
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


#: where a 429 without ``retry-after`` says when the budget refills (Azure sends the token one
#: as ``x-ratelimit-reset-tokens`` or ``x-rate-limit-reset-tokens``, in seconds)
_RESET_HEADERS = (
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "x-rate-limit-reset-tokens",
)


def retry_after_from_resets(headers: Mapping[str, str]) -> float | None:
    """A 429's wait read from its reset headers when it has no ``retry-after`` (Azure sends
    only ``x-rate-limit-reset-tokens: 55`` on some): the longest one stated, or None."""
    waits = [
        seconds
        for name in _RESET_HEADERS
        if (value := headers.get(name)) is not None
        and (seconds := parse_duration(value)) is not None
    ]
    return max(waits) if waits else None


def parse_should_retry(headers: Mapping[str, str]) -> bool | None:
    """The server's ``x-should-retry`` verdict (OpenAI, Stainless SDKs), or None if absent."""
    value = headers.get("x-should-retry")
    if value is None:
        return None
    value = value.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    return None


@dataclass(frozen=True, slots=True)
class RateLimitInfo:
    """One response's view of the request and token budgets (``x-ratelimit-*``).

    Resets are seconds from the response, not absolute times: the caller adds its own clock.
    Where a provider budgets output tokens apart (Anthropic's OTPM), the ``*_output_tokens``
    fields carry that budget, and the ``*_tokens`` ones are the input budget (ITPM).
    """

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None
    limit_output_tokens: int | None = None
    remaining_output_tokens: int | None = None
    reset_output_tokens_s: float | None = None


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip()
    try:
        count = int(value)
    except ValueError:
        number = _seconds(value)  # some proxies print "100.0"
        if number is None or not number.is_integer():
            return None
        count = int(number)
    return count if count >= 0 else None


def _duration(value: str | None) -> float | None:
    return None if value is None else parse_duration(value)


def _ratelimit_headers(headers: httpx2.Headers, prefix: bytes = b"x-ratelimit-") -> dict[str, str]:
    """The ``x-ratelimit-*`` headers (or another ``prefix``'s) in one pass:
    ``httpx2.Headers.get`` scans every header per lookup, and six misses on a server that
    sends none would cost more than this."""
    found: dict[str, str] = {}
    size = len(prefix)
    for key, value in headers.raw:
        if key[:size].lower() == prefix:
            found[key.lower().decode("latin-1")] = value.decode("latin-1")
    return found


def parse_rate_limits(headers: Mapping[str, str]) -> RateLimitInfo | None:
    """The ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` budget, or None if the
    server sends none of them (most self-hosted servers). A malformed value is a None field."""
    get = _ratelimit_headers(headers).get if isinstance(headers, httpx2.Headers) else headers.get
    raw = (
        get("x-ratelimit-limit-requests"),
        get("x-ratelimit-remaining-requests"),
        get("x-ratelimit-reset-requests"),
        get("x-ratelimit-limit-tokens"),
        get("x-ratelimit-remaining-tokens"),
        get("x-ratelimit-reset-tokens"),
    )
    if raw == (None, None, None, None, None, None):
        return None
    return RateLimitInfo(
        limit_requests=_count(raw[0]),
        remaining_requests=_count(raw[1]),
        reset_requests_s=_duration(raw[2]),
        limit_tokens=_count(raw[3]),
        remaining_tokens=_count(raw[4]),
        reset_tokens_s=_duration(raw[5]),
    )


def request_id(headers: Mapping[str, str]) -> str | None:
    """The server's id for this request (``x-request-id``, else ``request-id``): quote it to
    the provider's support, so every error carries it."""
    value = headers.get("x-request-id")
    if value is None:
        value = headers.get("request-id")
    return value or None
