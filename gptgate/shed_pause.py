"""How long a full queue's refusal holds the whole backend (issue 31, family draw 73).

A 503/529 with retry-after (gptgate/shed.py) pauses the backend so that the calls waiting
to be sent are not pushed into a queue that just said it is full. But a bounded queue has a
place again as soon as one of the calls it holds ends, and with calls of ours in flight
that comes long before a retry-after of a second: held for the whole retry-after, the
server's slots empty one by one and stay idle. Family draw 73 (4 replicas × 2 slots, a
queue of 1 each, calls of ~1.6 s, 12 in flight): the gate drew about one 503 a second and
paused on each, the slots ran 80% busy against the hand warm-up's 89–98% (it resends every
refusal after its retry-after), and the job took 1.08–1.11× the hand's time on six engine
seeds of six.

So the pause lasts until the next of the backend's other calls in flight is expected to
end — the mean call latency over their number — and never longer than the retry-after. The
refused call itself still waits its retry-after (gptgate/shed.py): only the others go on.
With nothing else in flight, or no latency measured yet, the pause is the whole
retry-after, as before. A 429 is not shortened: a rate limit's budget refills with time,
not with completions (gptgate/limits/pacing.py).
"""

from __future__ import annotations

__all__ = ["full_queue_pause_s"]


def full_queue_pause_s(retry_after_s: float, latency_s: float | None, in_flight: int) -> float:
    """The pause after a full queue's refusal: until one of ``in_flight`` other calls of
    mean latency ``latency_s`` is expected to end, at most ``retry_after_s``."""
    if latency_s is None or latency_s <= 0.0 or in_flight < 1:
        return retry_after_s
    return min(retry_after_s, latency_s / in_flight)
