"""``RateLimitPacer``: pace below a backend's RPM/TPM instead of discovering them with 429s.

OpenAI-compatible backends report their budget on every response:
``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``. The pacer models each budget as a
token bucket and *corrects* it with every report:

* capacity ``margin × limit`` and refill ``margin × limit / 60 s`` (the limits are per minute);
  ``(1 − margin) × limit`` is headroom left untouched for estimation error and other clients;
* the margin is *learned*: it starts at the configured one and, while no 429 came for a
  minute, each success narrows the headroom (to 1% of the limit at most: ``MAX_MARGIN``); a
  429 puts it back. The headroom is for other clients of the key and for our own estimate's
  error: where neither shows (no 429), a fixed 10% is time lost for nothing — on issue 31's
  rate-limited draws a job paced 1.3× slower than a client that ran at the limit. The
  duplicates a hedge sends ahead of the queue (:meth:`reserve_ahead`) come out of the
  headroom: while any went out in the last minute it keeps room for as many and one more
  (1% of 96 RPM is under one request: a duplicate at the bucket's floor overdrew the server,
  and the 429 paused the backend — issue 31, draw 1060);
* on a report the level becomes the server's ``remaining − headroom`` (the server's count is the
  truth; ours is an estimate) less what the server had not counted yet when it answered: with
  the call's place in our sequence of reservations (``seq``, :meth:`sequence`), everything we
  reserved after it — a report arrives a call time after the server counted, and without that
  correction a report stale by the calls sent meanwhile over-stated the budget (issue 31, draw
  83: 429s at 15.5 s into a job at 281 RPM); without ``seq``, what we reserved but have not sent
  yet. The bucket is known to be full again after ``reset`` — less whatever we reserve after
  the report;
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

Where a provider budgets output apart from input (Anthropic's input and output tokens per
minute, ITPM and OTPM: :class:`~gptgate.wire.ratelimits.RateLimitInfo`'s ``*_output_tokens``),
the token bucket is the *input* budget and a third bucket the output one: a reservation takes
its prompt from the first and its ``output`` (``max_tokens``) from the second, and
:meth:`reconcile` settles each with what the answer used — cache reads not counted against
the input budget (Anthropic's cache-aware ITPM), and a reservation's input is discounted by
the share the cache has been serving. Charged to one figure — ``prompt + max_tokens``, then
the whole usage, against whichever of the two the headers named tighter — a job waited for
tokens that budget never counts: 60 calls of a 90%-cached prompt took 3,590 s of a budget
that allowed 22 s, prompts charged to the output budget 555 s for 129 s
(tests/test_anthropic_rate_budgets.py).

Before any header has been seen nothing is delayed (the pacer knows no budget). A pure object:
plain numbers in, seconds out; the wire layer parses headers, the gateway sleeps.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["MAX_MARGIN", "MAX_SPACING_S", "PacerStatistics", "RateLimitPacer"]

#: the least headroom a learned margin keeps (1% of the limit): the reports' rounding and a
#: call's reservation estimate
MAX_MARGIN = 0.99
#: after a 429 the configured margin holds this long (the limits' window) before narrowing again
HOLD_AFTER_429_S = 60.0
#: reservations whose send time is remembered: a report comes within a call's time, a few
#: concurrency limits' worth of reservations later (an older one is read as of the latest
#: send forgotten); bounded small so that memory does not grow with the calls
#: (tests/test_soak.py)
_SEND_TIMES = 256
#: the limits' window: the headroom keeps room for the duplicates sent ahead over it
_DUPLICATES_WINDOW_S = 60.0
#: the most of a reservation's input taken for a cache read before the answer says so: a
#: prompt that misses costs the input budget its whole length (the next report corrects)
MAX_CACHED_SHARE = 0.95
#: each success narrows the learned headroom by this factor (0.1 → 0.01 in ~75 successes)
_NARROW = 0.97

#: the widest gap between sends after a short-window 429: a retry-after of a minute (a
#: token budget's reset) says when to resume, not how fast — a 10 s window refills a
#: request within about a second at any rate worth pacing
MAX_SPACING_S = 1.0
#: each success narrows the gap by this factor, so the pace creeps back up to the server's
_RELAX = 0.95


class _Bucket:
    """One budget (requests or tokens) as a corrected token bucket."""

    __slots__ = ("capacity", "full_at", "level", "limit", "rate", "spent_since_report", "t")

    def __init__(self) -> None:
        self.limit = math.inf  # the server's, unknown until reported
        self.capacity = math.inf  # margin × limit
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
        counted_at: float | None = None,
    ) -> None:
        """``counted_at``: when the server counted the reported call (its send), if known —
        the report is as of then, refilled since (at our pace); else as of ``now``."""
        if limit is not None and limit > 0:
            was_known = self.known
            self.limit = limit
            self.capacity = margin * limit
            self.rate = self.capacity / 60.0
            if not was_known:
                self.level, self.t = self.capacity, now
        if not self.known:
            return
        headroom = self.limit - self.capacity
        if remaining is not None:
            at = now if counted_at is None else min(now, counted_at)
            self.level = min(self.capacity, remaining - headroom - pending)
            self.t = at
            self.spent_since_report = pending
            self.full_at = at + reset_s if reset_s is not None and reset_s > 0 else None
            self.advance(now)
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
    #: the output budget's level, where reported apart (inf otherwise)
    output_tokens_available: float = math.inf


class RateLimitPacer:
    """Paces calls to a backend's reported RPM/TPM (see the module docstring)."""

    def __init__(self, margin: float = 0.9) -> None:
        if not 0.0 < margin <= 1.0:
            raise ValueError("margin must be in (0, 1]")
        self.margin = margin
        #: the margin in use: the configured one, narrowed by successes (see the docstring)
        self._learned = margin
        #: no narrowing before this (a 429's pause end + ``HOLD_AFTER_429_S``)
        self._hold_until = -math.inf
        #: requests and tokens reserved so far: a call's place in the sequence (``seq``)
        self._taken_requests = 0
        self._taken_tokens = 0
        #: send times of the latest reservations, in order (a report's ``counted_at``)
        self._send_times: deque[float] = deque(maxlen=_SEND_TIMES)
        #: the latest send time of the reservations no longer remembered: an older report's
        #: call was counted no later than this
        self._forgotten_by = -math.inf
        self._requests = _Bucket()
        self._tokens = _Bucket()
        #: the output budget, where the provider reports one apart (then ``_tokens`` is input)
        self._outputs = _Bucket()
        #: output tokens reserved so far, and as of each remembered reservation
        self._taken_outputs = 0
        self._send_outputs: deque[int] = deque(maxlen=_SEND_TIMES)
        self._paused_until = -math.inf
        # reservations told to wait, not sent yet: (send time, tokens, output), in send order
        self._pending: deque[tuple[float, float, float]] = deque()
        self._pending_tokens = 0.0
        self._pending_outputs = 0.0
        #: duplicates sent ahead of the queue over the last minute: (send time, tokens)
        self._ahead: deque[tuple[float, float]] = deque()
        self._reserved = 0
        self._delayed = 0
        self._total_delay = 0.0
        self._mean_tokens = 0.0  # EWMA of the tokens a call reserves
        self._mean_output = 0.0  # … of which output (``max_tokens``)
        #: EWMA of the tokens a call costs once reconciled (its usage): what the budget
        #: sustains, the refund of ``max_tokens`` it did not use given back
        self._mean_cost = 0.0
        #: … of which output, and input the input budget does not count (cache reads)
        self._mean_output_cost = 0.0
        self._mean_uncounted = 0.0
        self._reconciled = 0
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
    def learned_margin(self) -> float:
        """The margin in use now: ``margin`` after a 429, up to ``MAX_MARGIN`` without one."""
        return self._learned

    def sequence(self) -> tuple[int, int]:
        """Requests and tokens reserved so far, the last reservation included: pass it to
        :meth:`observe` with that call's response (``seq``)."""
        return self._taken_requests, self._taken_tokens

    @property
    def known(self) -> bool:
        """Whether any limit has been reported yet."""
        return self._requests.known or self._tokens.known

    @property
    def split(self) -> bool:
        """Whether the provider budgets output tokens apart from input (Anthropic)."""
        return self._outputs.known

    @property
    def token_limit(self) -> float | None:
        """The backend's reported tokens-per-minute limit (not our margin of it), or None
        while unknown: a reservation above it can never be admitted. With an output budget
        apart, the two limits' sum (what ``prompt + max_tokens`` may come to)."""
        bucket = self._tokens
        if not bucket.known:
            return None
        return bucket.limit + self._outputs.limit if self.split else bucket.limit

    def _kinds(self, tokens: float, output: float) -> tuple[float, float]:
        """(input-or-total, output): what a take of ``tokens``, ``output`` of them output,
        puts on the token and the output bucket — the input less the share the prompt cache
        has been serving, which the input budget does not count."""
        output = min(max(0.0, output), max(0.0, tokens))
        if not self.split:
            return max(0.0, tokens), output
        return (tokens - output) * (1.0 - self._cached_share()), output

    def _cached_share(self) -> float:
        """The share of a call's input read from the prompt cache, as answers reported it
        (at most :data:`MAX_CACHED_SHARE`)."""
        inputs = self._mean_cost - self._mean_output_cost
        if inputs <= 0.0:
            return 0.0
        return min(MAX_CACHED_SHARE, max(0.0, self._mean_uncounted / inputs))

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
        seq: tuple[int, int] | None = None,
        limit_output_tokens: float | None = None,
        remaining_output_tokens: float | None = None,
        reset_output_tokens_s: float | None = None,
    ) -> None:
        """Correct the buckets with a response's ``x-ratelimit-*`` values (any may be None);
        ``seq``: :meth:`sequence` when the call was reserved (the server had counted it and
        none of what was reserved after it). ``*_output_tokens``: an output budget reported
        apart (the ``*_tokens`` values are then the input budget's)."""
        pending = self._drain_pending(now)
        counted_at = None
        if seq is None:  # what the server cannot have counted: what is not sent yet
            unseen_requests, unseen_tokens = float(len(pending)), self._pending_tokens
            unseen_outputs = self._pending_outputs
        else:
            unseen_requests = float(max(0, self._taken_requests - seq[0]))
            unseen_tokens = float(max(0, self._taken_tokens - seq[1]))
            unseen_outputs = float(max(0, self._taken_outputs - self._outputs_at(seq[0])))
            counted_at = self._sent_at(seq[0])
        room_requests, room_tokens = self._duplicates_room(now)
        if limit_output_tokens is not None or self.split:
            self._outputs.report(
                now, limit_output_tokens, remaining_output_tokens, reset_output_tokens_s,
                self._learned, unseen_outputs, counted_at,
            )
        unseen_tokens, _ = self._kinds(unseen_tokens, unseen_outputs)
        self._requests.report(
            now, limit_requests, remaining_requests, reset_requests_s,
            self._margin_leaving(room_requests, limit_requests, self._requests),
            unseen_requests, counted_at,
        )
        self._tokens.report(
            now, limit_tokens, remaining_tokens, reset_tokens_s,
            self._margin_leaving(room_tokens, limit_tokens, self._tokens), unseen_tokens,
            counted_at,
        )

    def _duplicates_room(self, now: float) -> tuple[float, float]:
        """The headroom the duplicates sent ahead need: those of the last minute and one more
        (none while no duplicate was sent for a minute)."""
        ahead = self._ahead
        while ahead and ahead[0][0] <= now - _DUPLICATES_WINDOW_S:
            ahead.popleft()
        if not ahead:
            return 0.0, 0.0
        tokens = sum(t for _, t in ahead)
        return len(ahead) + 1.0, tokens + tokens / len(ahead)

    def _margin_leaving(self, room: float, limit: float | None, bucket: _Bucket) -> float:
        """The learned margin, widened to leave ``room`` of the limit as headroom."""
        limit = limit if limit is not None and limit > 0 else bucket.limit
        if not room or limit == math.inf:
            return self._learned
        return max(0.0, min(self._learned, 1.0 - room / limit))

    def _outputs_at(self, number: int) -> int:
        """Output tokens reserved up to reservation ``number`` (1-based); once it is no longer
        remembered, the oldest count remembered."""
        outputs = self._send_outputs
        index = number - 1 - (self._taken_requests - len(outputs))
        if 0 <= index < len(outputs):
            return outputs[index]
        return outputs[0] if index < 0 and outputs else self._taken_outputs

    def _sent_at(self, number: int) -> float | None:
        """When reservation ``number`` (1-based, :meth:`sequence`) was to be sent; once it is
        no longer remembered, no later than the latest send forgotten. Read as of its arrival
        instead, a report of a call sent in a starting burst and answered 11 s later lost the
        11 s of refill since: the level fell by 50 requests and the calls reserved next waited
        22 s (issue 31, draw 1029; tests/test_pacer_forgotten_send.py)."""
        index = number - 1 - (self._taken_requests - len(self._send_times))
        if 0 <= index < len(self._send_times):
            return self._send_times[index]
        return self._forgotten_by if index < 0 and self._forgotten_by > -math.inf else None

    def sustained_rate(self) -> float | None:
        """Calls per second the budgets sustain: the request bucket's refill, or the token
        bucket's over what a call costs (its reconciled usage once calls have answered, its
        reservation before), whichever is lower. None while no limit is known. Over the
        reservation (``prompt + max_tokens``, most of it refunded) it read 3.6 calls/s where
        the budget sustained 7.8, and held the adaptive limit's rate ceiling at 5 (issue 31,
        draw 1050).
        """
        rate = self._requests.rate
        for bucket, per_call in self._per_call(reconciled=bool(self._reconciled)):
            if bucket.known and per_call > 0.0:
                rate = min(rate, bucket.rate / per_call)
        return rate if rate < math.inf else None

    def _per_call(self, *, reconciled: bool) -> tuple[tuple[_Bucket, float], ...]:
        """The token buckets with what a call takes of each: its reconciled usage, else its
        reservation (:meth:`_kinds`: the input part on the token bucket where output is
        budgeted apart)."""
        if reconciled:
            total, output = self._mean_cost, self._mean_output_cost
            counted = total - output - self._mean_uncounted if self.split else total
        else:
            total, output = self._mean_tokens, self._mean_output
            counted, output = self._kinds(total, output)
        return (self._tokens, max(0.0, counted)), (self._outputs, max(0.0, output))

    def funded_calls(self, now: float) -> float | None:
        """Calls the budgets fund right now without waiting (the request bucket's level, the
        token bucket's over the mean reservation, whichever is lower); None while no limit is
        known. A bucket starts full: until it is spent the sustained rate does not bind."""
        if not self.known:
            return None
        req = self._requests
        req.advance(now)
        calls = req.level
        for bucket, per_call in self._per_call(reconciled=False):
            bucket.advance(now)
            if bucket.known and per_call > 0.0:
                calls = min(calls, bucket.level / per_call)
        return max(0.0, calls) if calls < math.inf else None

    def spilled_calls(self, now: float, horizon_s: float) -> float:
        """Calls' worth of refill the budgets would lose over the next ``horizon_s`` if no
        more were sent: a bucket at capacity drops its refill. The least over the known
        buckets (a call needs both; the token bucket's over the mean reservation, what a call
        takes when sent); 0 while no limit is known. A rate ceiling held at the sustained
        rate while the bucket sat full lost ~20 calls of refill in a 400-call job (issue 31,
        draw 1079: 94.2% of fixed 32's goodput)."""
        spills = []
        for bucket, per_call in ((self._requests, 1.0), *self._per_call(reconciled=False)):
            if bucket.known and per_call > 0.0:
                bucket.advance(now)
                over = bucket.level + bucket.rate * max(0.0, horizon_s) - bucket.capacity
                spills.append(over / per_call)
        return max(0.0, min(spills)) if spills else 0.0

    def reserve_ahead(self, now: float, tokens: int, output: int = 0) -> float:
        """A hedge's duplicate: reserved like any call, but sent at once (unless paused),
        ahead of the calls already waiting — they keep their send times, and the one extra
        request falls in the headroom, which keeps room for the last minute's duplicates and
        one more (:meth:`_duplicates_room`; duplicates are at most the hedge budget's 5% of
        the calls, twice that with the replaced ones). Behind a queue of reservations a
        duplicate would go out after the stall it was sent to cut had ended. → the delay
        (the pause's)."""
        self._drain_pending(now)
        for bucket in (self._requests, self._tokens, self._outputs):
            bucket.advance(now)
        delay = max(0.0, self._paused_until - now)
        self._take(tokens, output, now + delay)
        self._ahead.append((now + delay, float(max(0, tokens))))
        return delay

    def reserve(self, now: float, tokens: int, output: int = 0) -> float:
        """Reserve one request and ``tokens`` (prompt + max_tokens, ``output`` of them the
        max_tokens); return the delay in seconds.

        The reservation is recorded at once, so concurrent callers queue behind each other.
        0 when within budget, and always 0 before any header was seen (unless paused).
        """
        self._drain_pending(now)
        req, tok, out = self._requests, self._tokens, self._outputs
        for bucket in (req, tok, out):
            bucket.advance(now)
        counted, outputs = self._kinds(float(tokens), float(output))
        delay = max(req.delay(now, 1.0), tok.delay(now, counted), out.delay(now, outputs))
        delay = max(delay, self._paused_until - now)
        if self._spacing:
            delay = self._slot(now, delay)
        self._take(tokens, output, now + max(0.0, delay))
        self._reserved += 1
        alpha = max(1.0 / self._reserved, 0.01)
        self._mean_tokens += alpha * (max(0, tokens) - self._mean_tokens)
        self._mean_output += alpha * (outputs - self._mean_output)
        if delay > 0.0:
            self._delayed += 1
            self._total_delay += delay
            self._pending.append((now + delay, float(max(0, tokens)), outputs))
            self._pending_tokens += float(max(0, tokens))
            self._pending_outputs += outputs
        return max(0.0, delay)

    def _take(self, tokens: int, output: int, send_at: float) -> None:
        if len(self._send_times) == self._send_times.maxlen:
            self._forgotten_by = max(self._forgotten_by, self._send_times[0])
        self._send_times.append(send_at)
        counted, outputs = self._kinds(float(tokens), float(output))
        self._requests.take(1.0)
        self._tokens.take(counted)
        self._outputs.take(outputs)
        self._taken_requests += 1
        self._taken_tokens += max(0, tokens)
        self._taken_outputs += int(outputs)
        self._send_outputs.append(self._taken_outputs)

    def _drain_pending(self, now: float) -> deque[tuple[float, float, float]]:
        pending = self._pending
        while pending and pending[0][0] <= now:
            _, tokens, outputs = pending.popleft()
            self._pending_tokens -= tokens
            self._pending_outputs -= outputs
        if not pending:
            self._pending_tokens = self._pending_outputs = 0.0  # no float dust
        return pending

    def reconcile(
        self,
        reserved: int,
        actual: int,
        *,
        reserved_output: int = 0,
        actual_output: int = 0,
        cached: int = 0,
    ) -> None:
        """Adjust a reservation with the tokens the backend reported using (refund or charge).
        ``reserved_output`` / ``actual_output``: the output parts of the two, and ``cached``
        the input read from the prompt cache — where output is budgeted apart (Anthropic),
        each bucket is settled with its own part, and cache reads are not counted against
        the input budget."""
        if self.split:
            counted = actual - actual_output - cached
            taken, _ = self._kinds(float(reserved), float(reserved_output))
            self._tokens.take(counted - taken)
            self._outputs.take(float(actual_output - reserved_output))
        else:
            self._tokens.take(float(actual - reserved))
        self._reconciled += 1
        alpha = max(1.0 / self._reconciled, 0.01)
        self._mean_cost += alpha * (max(0, actual) - self._mean_cost)
        self._mean_output_cost += alpha * (max(0, actual_output) - self._mean_output_cost)
        self._mean_uncounted += alpha * (max(0, cached) - self._mean_uncounted)

    def _slot(self, now: float, delay: float) -> float:
        at = max(now + delay, self._next_send)
        self._next_send = at + self._spacing
        return at - now

    def requeue(self, now: float) -> float:
        """A new delay for a call that was already waiting when a pause came (it keeps its
        reservation): behind the pause, and in its own slot with ``spacing_s``."""
        delay = max(0.0, self._paused_until - now)
        return self._slot(now, delay) if self._spacing else delay

    def relax(self, now: float | None = None) -> None:
        """A success: the gap between sends after a short-window 429 narrows, and (given
        ``now``, a minute after the last 429) so does the learned headroom."""
        if self._spacing:
            self._spacing = self._spacing * _RELAX if self._spacing > 1e-3 else 0.0
        if now is not None and now >= self._hold_until and self._learned < MAX_MARGIN:
            self._learned = min(MAX_MARGIN, 1.0 - (1.0 - self._learned) * _NARROW)

    def pause_until(
        self, t: float, spacing_s: float | None = None, *, rate_limited: bool = True
    ) -> None:
        """Hold the whole backend until ``t`` (a 429's retry-after); later pauses only extend.
        ``spacing_s``: then send one call per ``spacing_s`` (short windows, see above).
        ``rate_limited``: a budget's 429 (not a full queue's 503): the learned margin goes
        back to the configured one and holds there a minute."""
        self._paused_until = max(self._paused_until, t)
        self.pauses += 1
        if rate_limited:
            self._learned = min(self._learned, self.margin)
            self._hold_until = max(self._hold_until, t + HOLD_AFTER_429_S)
        if spacing_s:
            self._spacing = max(self._spacing, min(spacing_s, MAX_SPACING_S))
            self._next_send = max(self._next_send, t)

    def statistics(self, now: float) -> PacerStatistics:
        for bucket in (self._requests, self._tokens, self._outputs):
            bucket.advance(now)
        return PacerStatistics(
            requests_available=self._requests.level,
            tokens_available=self._tokens.level,
            paused_until=self._paused_until,
            reserved=self._reserved,
            delayed=self._delayed,
            total_delay_s=self._total_delay,
            output_tokens_available=self._outputs.level,
        )

    def __repr__(self) -> str:
        return f"RateLimitPacer(margin={self.margin}, known={self.known})"
