"""What one call contributes to drift's figures — measured the same way by ``gptgate
profile`` and by the live watch, so that drift compares like with like.

A live workload is rarely the profile's: shorter prompts, other ``max_tokens``, calls that do
not stream. Three figures would move with the workload alone, and are measured so that they
do not:

* **Cache hit rate** only over calls that could hit: a prompt prefix (every message but the
  last, or a ``cache_key``) of at least 1,024 tokens — the least a provider caches (OpenAI's
  rule, gptgate/cache.py) — that this backend already served before the call began, within
  the last ``PREFIX_MEMORY_S``. A short prompt, or the first call of a prefix, is a miss by
  construction, not a sign of a colder cache. The rate is cached over cacheable tokens.
* **Decode speed** (output tokens/s) per output token after the first: ``(output - 1) /
  (latency - TTFT)``, so an answer's length (``max_tokens``) and its prefill do not move it.
  A call that did not stream has no TTFT: the profile's median TTFT stands in. Calls with
  fewer than ``MIN_DECODE_TOKENS`` output tokens say too little and are left out.
* **TTFT and latency** only over calls whose prompt needs about as much prefill as the
  profile's did (uncached input tokens at most ``2 ×`` the profile's mean ``+
  PROMPT_SLACK_TOKENS``): a long one-off document takes longer to its first token on any
  backend. Latency is taken as if the answer had the profile's mean length ``K``:
  ``latency + (K - output) / decode speed`` (the profile's), so a long answer is not "slow".
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .baseline import BandFigures
from .cache import PrefixGroup, cacheable_tokens

__all__ = [
    "MIN_DECODE_TOKENS",
    "PREFIX_MEMORY_S",
    "CacheableCalls",
    "Decode",
    "comparable_prompt",
    "decode_part",
    "latency_at_profile_length",
]

#: output tokens a call needs before its decode speed counts
MIN_DECODE_TOKENS = 16
#: uncached prompt tokens a live call may have beyond twice the profile's mean and still be
#: compared on TTFT and latency
PROMPT_SLACK_TOKENS = 256
#: how long a served prefix counts as cached at its backend (providers keep one 5-10 min idle)
PREFIX_MEMORY_S = 600.0
#: prefixes remembered per backend, at most (the least recently served go first)
MAX_PREFIXES = 4096


@dataclass(frozen=True, slots=True)
class Decode:
    """Output tokens after the first, and the seconds they took."""

    tokens: int
    seconds: float


def decode_part(latency_s: float, ttft_s: float | None, output_tokens: int) -> Decode | None:
    """A call's decode, or None when it says too little (no TTFT, a short answer)."""
    if ttft_s is None or output_tokens < MIN_DECODE_TOKENS:
        return None
    seconds = latency_s - ttft_s
    return Decode(output_tokens - 1, seconds) if seconds > 0 else None


def comparable_prompt(figures: BandFigures, input_tokens: int | None, cached_tokens: int) -> bool:
    """Whether a call's prompt needs about as much prefill as the profile's (True when
    either side does not know: an SDK reply read by the tap, an older baseline)."""
    mean = figures.uncached_input_tokens_mean
    if mean is None or input_tokens is None:
        return True
    return input_tokens - cached_tokens <= 2 * mean + PROMPT_SLACK_TOKENS


def latency_at_profile_length(figures: BandFigures, latency_s: float, output_tokens: int) -> float:
    """``latency_s`` moved to the profile's mean answer length at its decode speed (unchanged
    for a baseline that lacks them: one made before they were recorded)."""
    mean, speed = figures.output_tokens_mean, figures.decode_tokens_per_s
    if mean is None or not speed:
        return latency_s
    return max(0.0, latency_s + (mean - output_tokens) / speed)


class CacheableCalls:
    """Per backend: which calls could have hit the prompt cache (see the module docstring)."""

    __slots__ = ("_served", "memory_s")

    def __init__(self, memory_s: float = PREFIX_MEMORY_S) -> None:
        self.memory_s = memory_s
        #: prefix key → [first, last] end of its calls here, without a gap over memory_s
        self._served: OrderedDict[str, list[float]] = OrderedDict()

    def cacheable(
        self, prefix: PrefixGroup | None, input_tokens: int, *, started: float, ended: float
    ) -> int:
        """The tokens of this call the cache could have served (0: it could not hit)."""
        if prefix is None:
            return 0
        part = cacheable_tokens(prefix.prefix_tokens, input_tokens)
        if part <= 0:
            return 0
        served = self._served
        run = served.get(prefix.key)
        # one of the run's calls ended before this one began, and recently enough
        could_hit = run is not None and run[0] <= started and started - run[1] <= self.memory_s
        if run is None or ended - run[1] > self.memory_s:
            served[prefix.key] = [ended, ended]
        else:
            run[1] = max(run[1], ended)
        served.move_to_end(prefix.key)
        if len(served) > MAX_PREFIXES:
            served.popitem(last=False)
        return part if could_hit else 0
