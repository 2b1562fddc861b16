"""Requests- and tokens-per-minute buckets, with OpenAI's ``x-ratelimit-*`` headers.

OpenAI refills both budgets continuously (a full bucket holds one minute's limit) and
reserves ``prompt + max_tokens`` tokens when a request is admitted; the headers report the
remaining budget and the time until the bucket is full again, formatted like Go durations
(``"6m0s"``, ``"1.5s"``, ``"20ms"``). A gateway paces itself from these headers, so they are
sent on every response, errors included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RateDecision", "RateLimiter", "TokenBucket", "format_duration"]


def format_duration(seconds: float) -> str:
    """Format like OpenAI's reset headers: ``"20ms"``, ``"1s"``, ``"1.5s"``, ``"6m0s"``."""
    ms = max(0, math.ceil(seconds * 1000 - 1e-6))
    if ms < 1000:
        return f"{ms}ms" if ms else "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs


class TokenBucket:
    """A bucket of ``limit`` units refilled at ``limit`` per minute, starting full."""

    __slots__ = ("limit", "rate", "tokens", "updated")

    def __init__(self, limit: int, now: float, window_s: float = 60.0) -> None:
        self.rate = limit / 60.0
        #: a short window holds only its share of the minute's budget (Azure)
        self.limit = max(1.0, self.rate * window_s) if window_s < 60.0 else float(limit)
        self.tokens = self.limit
        self.updated = now

    def refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.limit, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def wait_s(self, amount: float) -> float:
        """Seconds until ``amount`` units are available (after :meth:`refill`)."""
        missing = amount - self.tokens
        if missing <= 0:
            return 0.0
        if amount > self.limit:  # can never fit: tell the client to come back in a minute
            return 60.0
        return missing / self.rate

    def reset_s(self) -> float:
        return (self.limit - self.tokens) / self.rate


@dataclass(frozen=True, slots=True)
class RateDecision:
    """Admission verdict: ``kind`` is None when admitted, else "requests" or "tokens"."""

    kind: str | None
    retry_after_s: float
    message: str


_ADMITTED = RateDecision(None, 0.0, "")


class RateLimiter:
    """RPM and TPM buckets for one engine (either may be None = unlimited)."""

    __slots__ = ("azure", "model", "requests", "tokens")

    def __init__(
        self, rpm: int | None, tpm: int | None, now: float, model: str,
        *, window_s: float = 60.0, azure: bool = False,
    ) -> None:
        self.requests = TokenBucket(rpm, now, window_s) if rpm else None
        self.tokens = TokenBucket(tpm, now) if tpm else None
        self.model = model
        #: Azure's header family (``remaining`` only, -1 when unlimited)
        self.azure = azure

    @property
    def enabled(self) -> bool:
        return self.requests is not None or self.tokens is not None

    def admit(self, cost_tokens: int, now: float) -> RateDecision:
        """Charge one request and ``cost_tokens`` tokens, or say which budget is short."""
        rq, tk = self.requests, self.tokens
        if rq is not None:
            rq.refill(now)
            wait = rq.wait_s(1)
            if wait > 0:
                return self._reject("requests", "RPM", rq, 1, wait)
        if tk is not None:
            tk.refill(now)
            wait = tk.wait_s(cost_tokens)
            if wait > 0:
                return self._reject("tokens", "TPM", tk, cost_tokens, wait)
        if rq is not None:
            rq.tokens -= 1
        if tk is not None:
            tk.tokens -= cost_tokens
        return _ADMITTED

    def _reject(
        self, kind: str, unit: str, bucket: TokenBucket, amount: int, wait: float
    ) -> RateDecision:
        used = int(bucket.limit - bucket.tokens)
        if amount > bucket.limit:  # OpenAI's wording for a request that can never fit
            message = (
                f"Request too large for {self.model} in organization org-sim on {kind} per "
                f"min ({unit}): Limit {int(bucket.limit)}, Requested {amount}. The input or "
                f"output tokens must be reduced in order to run successfully."
            )
            return RateDecision(kind, wait, message)
        message = (
            f"Rate limit reached for {self.model} in organization org-sim on {kind} per min "
            f"({unit}): Limit {int(bucket.limit)}, Used {used}, Requested {amount}. "
            f"Please try again in {format_duration(wait)}."
        )
        return RateDecision(kind, wait, message)

    def headers(self, now: float) -> list[tuple[str, str]]:
        """The six ``x-ratelimit-*`` headers describing both budgets now (Azure: the two
        ``remaining`` ones)."""
        if self.azure:
            return self._azure_headers(now)
        out: list[tuple[str, str]] = []
        for name, bucket in (("requests", self.requests), ("tokens", self.tokens)):
            if bucket is None:
                continue
            bucket.refill(now)
            out.append((f"x-ratelimit-limit-{name}", str(int(bucket.limit))))
            out.append((f"x-ratelimit-remaining-{name}", str(max(0, int(bucket.tokens)))))
            out.append((f"x-ratelimit-reset-{name}", format_duration(bucket.reset_s())))
        return out

    def _azure_headers(self, now: float) -> list[tuple[str, str]]:
        """Azure's two: what is left, per minute — so a short window's requests figure claims
        capacity (a minute's worth) while the window itself is empty; -1 for no limit."""
        out: list[tuple[str, str]] = []
        for name, bucket in (("requests", self.requests), ("tokens", self.tokens)):
            if bucket is None:
                out.append((f"x-ratelimit-remaining-{name}", "-1"))
                continue
            bucket.refill(now)
            per_minute = bucket.tokens * (bucket.rate * 60.0 / bucket.limit)
            out.append((f"x-ratelimit-remaining-{name}", str(max(0, int(per_minute)))))
        return out
