"""``RateLimitPacer``: pace below a backend's RPM/TPM instead of discovering them with 429s.

OpenAI-compatible backends report their budget on every response:
``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``. The pacer models each budget as a
token bucket and *corrects* it with every report:

* capacity ``margin × limit`` and refill ``margin × limit / 60 s`` (the limits are per minute);
  ``(1 − margin) × limit`` is headroom left untouched for estimation error and other clients;
* on a report the level becomes the server's ``remaining − headroom`` (the server's count is the
  truth; ours is an estimate) less what we reserved but have not sent yet (the server has not
  counted it), and the bucket is known to be full again after ``reset`` — less whatever we
  reserve after the report;
* :meth:`reserve` takes one request and ``prompt + max_tokens`` tokens up front (the server
  counts ``max_tokens`` at admission too) and returns how long to wait before sending; the
  level may go negative, so later callers queue behind (GCRA-style) instead of racing;
* :meth:`reconcile` returns what the call did not use once ``usage`` comes back;
* :meth:`pause_until` holds the *backend* until a 429's retry-after, once for a whole storm,
  instead of every call sleeping and retrying on its own;
* with ``spacing_s`` (a provider that enforces its RPM over windows of seconds, Azure's 1 s or
  10 s, and whose headers do not state a limit), the calls the pause held go one
  retry-after apart instead of all at once — released together, all but one met the next
  429 (a burst that burns every retry in 0.15 s) — and each success narrows the gap again
  (:meth:`relax`). A call that was waiting when a later 429 came takes a new place behind
  it (:meth:`requeue`, told by :attr:`pauses`).

Before any header has been seen nothing is delayed (the pacer knows no budget). A pure object:
plain numbers in, seconds out; the wire layer parses headers, the gateway sleeps.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["MAX_SPACING_S", "PacerStatistics", "RateLimitPacer"]

#: the widest gap between sends after a short-window 429: a retry-after of a minute (a
#: token budget's reset) says when to resume, not how fast — a 10 s window refills a
#: request within about a second at any rate worth pacing
MAX_SPACING_S = 1.0
#: each success narrows the gap by this factor, so the pace creeps back up to the server's
_RELAX = 0.95


class _Bucket:
    """One budget (requests or tokens) as a corrected token bucket."""

    __slots__ = ("capacity", "full_at", "level", "rate", "spent_since_report", "t")

    def __init__(self) -> None:
        self.capacity = math.inf  # unknown until a limit is reported
        self.rate = math.inf
        self.level = math.inf
        self.t = 0.0
        self.full_at: float | None = None
        self.spent_since_report = 0.0

    @property
    def known(self) -> bool:
        return self.capacity < math.inf

    def report(
        self,
        now: float,
        limit: float | None,
        remaining: float | None,
        reset_s: float | None,
        margin: float,
        pending: float,
    ) -> None:
        if limit is not None and limit > 0:
            was_known = self.known
            self.capacity = margin * limit
            self.rate = self.capacity / 60.0
            if not was_known:
                self.level, self.t = self.capacity, now
        if not self.known:
            return
        headroom = self.capacity / margin - self.capacity
        if remaining is not None:
            self.level = min(self.capacity, remaining - headroom - pending)
            self.t = now
            self.spent_since_report = pending
            self.full_at = now + reset_s if reset_s is not None and reset_s > 0 else None
        else:
            self.advance(now)

    def advance(self, now: float) -> None:
        if not self.known or now <= self.t:
            return
        if self.full_at is not None and now >= self.full_at:
            at = max(self.t, self.full_at)
            linear = min(self.capacity, self.level + self.rate * (at - self.t))
            self.level = max(linear, self.capacity - self.spent_since_report)
            self.t = at
            self.full_at = None
        self.level = min(self.capacity, self.level + self.rate * (now - self.t))
        self.t = now

    def delay(self, now: float, need: float) -> float:
        """Seconds until ``need`` is available (after :meth:`advance` to ``now``)."""
        if not self.known or self.level >= need:
            return 0.0
        need = min(need, self.capacity)  # a call bigger than the budget waits for a full one
        wait = (need - self.level) / self.rate
        if self.full_at is not None:
            at_reset = self.level + self.rate * (self.full_at - now)
            if max(at_reset, self.capacity - self.spent_since_report) >= need:
                wait = min(wait, self.full_at - now)
        return max(0.0, wait)

    def take(self, amount: float) -> None:
        if self.known:
            self.level -= amount
            self.spent_since_report += amount


@dataclass(frozen=True, slots=True)
class PacerStatistics:
    requests_available: float  # inf until a limit is reported
    tokens_available: float
    paused_until: float
    reserved: int  # reserve() calls
    delayed: int  # of which had to wait
    total_delay_s: float


class RateLimitPacer:
    """Paces calls to a backend's reported RPM/TPM (see the module docstring)."""

    def __init__(self, margin: float = 0.9) -> None:
        if not 0.0 < margin <= 1.0:
            raise ValueError("margin must be in (0, 1]")
        self.margin = margin
        self._requests = _Bucket()
        self._tokens = _Bucket()
        self._paused_until = -math.inf
        # reservations told to wait, not sent yet: (send time, tokens), in send order
        self._pending: deque[tuple[float, float]] = deque()
        self._pending_tokens = 0.0
        self._reserved = 0
        self._delayed = 0
        self._total_delay = 0.0
        self._mean_tokens = 0.0  # EWMA of the tokens a call reserves
        #: short windows: seconds between sends since the last 429, and the next free slot
        self._spacing = 0.0
        self._next_send = -math.inf
        #: pauses set so far: a call that waited across a new one takes a new place
        self.pauses = 0

    @property
    def paused_until(self) -> float:
        """Clock reading before which nothing is sent (``-inf`` when not paused)."""
        return self._paused_until

    @property
    def known(self) -> bool:
        """Whether any limit has been reported yet."""
        return self._requests.known or self._tokens.known

    @property
    def token_limit(self) -> float | None:
        """The backend's reported tokens-per-minute limit (not our margin of it), or None
        while unknown: a reservation above it can never be admitted."""
        bucket = self._tokens
        return bucket.capacity / self.margin if bucket.known else None

    def observe(
        self,
        now: float,
        *,
        limit_requests: float | None = None,
        remaining_requests: float | None = None,
        reset_requests_s: float | None = None,
        limit_tokens: float | None = None,
        remaining_tokens: float | None = None,
        reset_tokens_s: float | None = None,
    ) -> None:
        """Correct the buckets with a response's ``x-ratelimit-*`` values (any may be None)."""
        pending = self._drain_pending(now)
        self._requests.report(
            now, limit_requests, remaining_requests, reset_requests_s, self.margin, len(pending)
        )
        self._tokens.report(
            now, limit_tokens, remaining_tokens, reset_tokens_s, self.margin, self._pending_tokens
        )

    def sustained_rate(self) -> float | None:
        """Calls per second the budgets sustain: the request bucket's refill, or the token
        bucket's over the mean reservation, whichever is lower. None while no limit is known.
        """
        rate = self._requests.rate
        if self._tokens.known and self._mean_tokens > 0.0:
            rate = min(rate, self._tokens.rate / self._mean_tokens)
        return rate if rate < math.inf else None

    def funded_calls(self, now: float) -> float | None:
        """Calls the budgets fund right now without waiting (the request bucket's level, the
        token bucket's over the mean reservation, whichever is lower); None while no limit is
        known. A bucket starts full: until it is spent the sustained rate does not bind."""
        if not self.known:
            return None
        req, tok = self._requests, self._tokens
        req.advance(now)
        tok.advance(now)
        calls = req.level
        if tok.known and self._mean_tokens > 0.0:
            calls = min(calls, tok.level / self._mean_tokens)
        return max(0.0, calls) if calls < math.inf else None

    def reserve_ahead(self, now: float, tokens: int) -> float:
        """A hedge's duplicate: reserved like any call, but sent at once (unless paused),
        ahead of the calls already waiting — they keep their send times, and the one extra
        request falls in the headroom (``1 − margin`` of the limit; duplicates are at most
        the hedge budget's 5% of the calls). Behind a queue of reservations a duplicate would
        go out after the stall it was sent to cut had ended. → the delay (the pause's)."""
        self._drain_pending(now)
        for bucket in (self._requests, self._tokens):
            bucket.advance(now)
        self._requests.take(1.0)
        self._tokens.take(float(max(0, tokens)))
        return max(0.0, self._paused_until - now)

    def reserve(self, now: float, tokens: int) -> float:
        """Reserve one request and ``tokens`` (prompt + max_tokens); return the delay in seconds.

        The reservation is recorded at once, so concurrent callers queue behind each other.
        0 when within budget, and always 0 before any header was seen (unless paused).
        """
        self._drain_pending(now)
        req, tok = self._requests, self._tokens
        req.advance(now)
        tok.advance(now)
        delay = max(req.delay(now, 1.0), tok.delay(now, float(max(0, tokens))))
        delay = max(delay, self._paused_until - now)
        if self._spacing:
            delay = self._slot(now, delay)
        req.take(1.0)
        tok.take(float(max(0, tokens)))
        self._reserved += 1
        alpha = max(1.0 / self._reserved, 0.01)
        self._mean_tokens += alpha * (max(0, tokens) - self._mean_tokens)
        if delay > 0.0:
            self._delayed += 1
            self._total_delay += delay
            self._pending.append((now + delay, float(max(0, tokens))))
            self._pending_tokens += float(max(0, tokens))
        return max(0.0, delay)

    def _drain_pending(self, now: float) -> deque[tuple[float, float]]:
        pending = self._pending
        while pending and pending[0][0] <= now:
            self._pending_tokens -= pending.popleft()[1]
        if not pending:
            self._pending_tokens = 0.0  # no float dust
        return pending

    def reconcile(self, reserved: int, actual: int) -> None:
        """Adjust a reservation with the tokens the backend reported using (refund or charge)."""
        self._tokens.take(float(actual - reserved))

    def _slot(self, now: float, delay: float) -> float:
        at = max(now + delay, self._next_send)
        self._next_send = at + self._spacing
        return at - now

    def requeue(self, now: float) -> float:
        """A new delay for a call that was already waiting when a pause came (it keeps its
        reservation): behind the pause, and in its own slot with ``spacing_s``."""
        delay = max(0.0, self._paused_until - now)
        return self._slot(now, delay) if self._spacing else delay

    def relax(self) -> None:
        """A success: the gap between sends after a short-window 429 narrows."""
        if self._spacing:
            self._spacing = self._spacing * _RELAX if self._spacing > 1e-3 else 0.0

    def pause_until(self, t: float, spacing_s: float | None = None) -> None:
        """Hold the whole backend until ``t`` (a 429's retry-after); later pauses only extend.
        ``spacing_s``: then send one call per ``spacing_s`` (short windows, see above)."""
        self._paused_until = max(self._paused_until, t)
        self.pauses += 1
        if spacing_s:
            self._spacing = max(self._spacing, min(spacing_s, MAX_SPACING_S))
            self._next_send = max(self._next_send, t)

    def statistics(self, now: float) -> PacerStatistics:
        self._requests.advance(now)
        self._tokens.advance(now)
        return PacerStatistics(
            requests_available=self._requests.level,
            tokens_available=self._tokens.level,
            paused_until=self._paused_until,
            reserved=self._reserved,
            delayed=self._delayed,
            total_delay_s=self._total_delay,
        )

    def __repr__(self) -> str:
        return f"RateLimitPacer(margin={self.margin}, known={self.known})"
