"""What a call returns (``ChatResult``) and what it feeds back to the controllers (``Outcome``).

Results are frozen, slotted dataclasses rather than pydantic models: ``gate.map`` over 100,000
prompts holds 100,000 of them, and a slotted result is ~5× smaller (jobs that size must fit
in a few hundred MB). ``to_dict()`` gives a JSON-ready view for logs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["ChatResult", "Outcome", "OutcomeKind", "Usage"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one attempt or one call, the same on every provider.

    ``input_tokens`` is always *all* the prompt's tokens; ``cached_input_tokens`` the part read
    from the provider's prompt cache and ``cache_write_input_tokens`` the part written to it
    (both inside ``input_tokens``: providers that report them on top of the input, as
    Anthropic does, are added up when read, so nothing is counted twice).
    ``reasoning_tokens`` is the part of ``output_tokens`` spent thinking (billed as output).
    ``cache_write_1h_input_tokens`` is the part of the writes made to Anthropic's one-hour
    cache (billed at its own price: ``Price.cache_write_1h_per_mtok``).
    ``web_search_requests`` counts the searches a server-side web search tool made (Anthropic's
    ``usage.server_tool_use``), billed per 1,000 (``Price.web_search_per_k``).
    ``estimated`` marks counts we had to guess (a stream cut before its usage chunk, a server
    that never reports usage)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    cache_write_input_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_1h_input_tokens: int = 0
    web_search_requests: int = 0

    @property
    def uncached_input_tokens(self) -> int:
        """Prompt tokens not read from the cache (the server prefilled them)."""
        return max(0, self.input_tokens - self.cached_input_tokens)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            estimated=self.estimated or other.estimated,
            cache_write_input_tokens=self.cache_write_input_tokens
            + other.cache_write_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_write_1h_input_tokens=self.cache_write_1h_input_tokens
            + other.cache_write_1h_input_tokens,
            web_search_requests=self.web_search_requests + other.web_search_requests,
        )


@dataclass(frozen=True, slots=True, repr=False)
class ChatResult:
    """The whole answer of one ``gate.chat`` / ``gate.stream`` call, with its cost and timings.

    ``usage`` is the final attempt's usage; ``billed_usage`` adds every attempt that may have
    been billed (retries after a timeout, an interrupted stream) — the real cost of the call.
    """

    text: str
    finish_reason: str | None
    backend: str
    hardware: str
    model: str
    streamed: bool
    attempts: int
    usage: Usage
    billed_usage: Usage
    ttft_s: float | None
    latency_s: float
    queue_s: float
    cost_usd: float
    scenario: str
    stream_decision: str
    response_id: str | None = None
    raw: dict[str, Any] | None = None
    #: tiered serving (docs/tiers.md): the tier of the backend that answered ("small" or
    #: "large": "large" for a call decided small that the large tier served while the small
    #: one was down; None when nothing was decided: one tier only, or an explicit backend),
    #: the rule that chose the call's tier ("explicit" for tier="small"/"large"), and
    #: whether a failed-looking small answer was asked again of the large tier (then
    #: ``tier`` is "large")
    tier: str | None = None
    tier_reason: str | None = None
    escalated: bool = False
    #: served by the response cache (``Gateway(response_cache=...)``): nothing was sent or
    #: billed for it (``cost_usd`` 0; ``backend`` is the one that first answered)
    from_cache: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __repr__(self) -> str:
        text = self.text if len(self.text) <= 40 else self.text[:37] + "..."
        return (
            f"ChatResult(backend={self.backend!r}, text={text!r}, "
            f"finish_reason={self.finish_reason!r}, attempts={self.attempts}, "
            f"latency_s={self.latency_s:.3f}, cost_usd={self.cost_usd:.6f})"
        )


OutcomeKind = Literal["ok", "dropped", "ignored"]


@dataclass(slots=True)
class Outcome:
    """One finished attempt, handed to every observer (limit, cache gate, router, ledger,
    telemetry). ``kind`` follows Netflix concurrency-limits: ``ok`` is a latency sample,
    ``dropped`` a congestion signal (429, 503, timeout), ``ignored`` neither (e.g. a 400 or a
    cancellation)."""

    backend: str
    kind: OutcomeKind
    start: float
    latency_s: float
    ttft_s: float | None
    inflight: int
    usage: Usage
    streamed: bool
    error: BaseException | None = None
    status: int | None = None
    prefix_key: str | None = None
    cacheable_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
