"""The simulator's ground truth for cost: what the server did and what it would bill.

A client's own accounting can only see what reached it. The server bills the work it did:
a client that gives up after the prompt was prefilled still pays for the prompt, and a
stream cut half-way has paid for the half it generated. Tests compare a gateway's estimate
against this ledger.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..config import Price

__all__ = ["LedgerSnapshot", "Outcome", "RequestBill", "SimLedger", "prompt_label"]

#: how a request ended, from the server's side
Outcome = Literal[
    "ok", "rate_limited", "server_error", "client_error", "abandoned", "interrupted", "malformed"
]


@dataclass(frozen=True, slots=True)
class LedgerSnapshot:
    """Counts at one instant. ``wasted_*`` are the billed tokens of requests that did not end
    ``ok`` (abandoned, interrupted, failed part-way): the cost of retries and timeouts."""

    requests: int = 0
    ok: int = 0
    rate_limited: int = 0
    server_errors: int = 0
    client_errors: int = 0
    abandoned: int = 0
    interrupted: int = 0
    malformed: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    #: the part of ``input_tokens`` written to the cache (Anthropic's cache_control writes)
    cache_write_input_tokens: int = 0
    output_tokens: int = 0
    wasted_input_tokens: int = 0
    wasted_output_tokens: int = 0
    #: the most chat requests the server held at once, running or queued (a fleet's real
    #: concurrency at the backend, whatever its clients believe)
    peak_in_flight: int = 0

    @property
    def billed_tokens(self) -> int:
        """Input plus output tokens billed (cached input included, as providers count it)."""
        return self.input_tokens + self.output_tokens

    def billed_usd(self, price: Price) -> float:
        """What the server billed at ``price``, every input token at the uncached rate (a
        dollar budget's ground truth: the most the work could have cost)."""
        from ..results import Usage

        return price.cost(Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens))

    def bill_usd(self, price: Price) -> float:
        """What the provider bills for this work at ``price``: cache reads and writes at
        their own rates (:meth:`gptgate.Price.cost`, the gateway ledger's own function)."""
        from ..results import Usage

        return price.cost(
            Usage(
                input_tokens=self.input_tokens,
                cached_input_tokens=self.cached_input_tokens,
                cache_write_input_tokens=self.cache_write_input_tokens,
                output_tokens=self.output_tokens,
            )
        )

    @property
    def cache_hit_rate(self) -> float:
        """Share of billed input tokens that were served from the prefix cache."""
        return self.cached_input_tokens / self.input_tokens if self.input_tokens else 0.0


@dataclass(frozen=True, slots=True)
class RequestBill:
    """What the server billed one chat request it admitted (its ``x-request-id``), and the
    last user message's first characters (``prompt``): a client's ledger compared request by
    request, not only in total — a total 5% off says nothing about which request it was."""

    request_id: str
    prompt: str
    outcome: Outcome
    input_tokens: int = 0
    output_tokens: int = 0


#: how much of the last user message a request's bill keeps
_LABEL_CHARS = 64


def prompt_label(messages: list[dict[str, Any]]) -> str:
    """The last user message's first characters (text parts joined): what tells a client's
    requests apart in the server's bills without any header of its own."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        return str(content or "")[:_LABEL_CHARS]
    return ""


#: how many requests' own bills a ledger keeps once asked (the oldest go first)
_BILLS_KEPT = 100_000


class SimLedger:
    """Mutable counters behind :class:`LedgerSnapshot`, and — once :meth:`keep_bills` is
    called — the latest requests' own bills (:class:`RequestBill`); one per engine. Off by
    default: a bill kept per request is memory that grows with the run (a soak counts it)."""

    __slots__ = ("_counts", "bills")

    _FIELDS = {
        "ok": "ok",
        "rate_limited": "rate_limited",
        "server_error": "server_errors",
        "client_error": "client_errors",
        "abandoned": "abandoned",
        "interrupted": "interrupted",
        "malformed": "malformed",
    }

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self.bills: deque[RequestBill] = deque(maxlen=0)
        self.reset()

    def reset(self) -> None:
        """Zero every counter (e.g. between benchmark rows sharing an engine)."""
        self._counts = dict.fromkeys(LedgerSnapshot.__dataclass_fields__, 0)
        self.bills.clear()

    def keep_bills(self, most: int = _BILLS_KEPT) -> None:
        """From now on keep each request's own bill, the latest ``most``."""
        self.bills = deque(self.bills, maxlen=most)

    def record(
        self,
        outcome: Outcome,
        *,
        input_tokens: int = 0,
        cached_input_tokens: int = 0,
        output_tokens: int = 0,
        cache_write_input_tokens: int = 0,
        request: tuple[str, str] | None = None,
    ) -> None:
        """Count one finished request and the tokens it is billed; ``request``: its id and
        prompt label, kept as its own :class:`RequestBill`."""
        if request is not None and self.bills.maxlen:
            self.bills.append(
                RequestBill(*request, outcome, input_tokens=input_tokens,
                            output_tokens=output_tokens)
            )
        c = self._counts
        c["requests"] += 1
        c[self._FIELDS[outcome]] += 1
        c["input_tokens"] += input_tokens
        c["cached_input_tokens"] += cached_input_tokens
        c["cache_write_input_tokens"] += cache_write_input_tokens
        c["output_tokens"] += output_tokens
        if outcome != "ok":
            c["wasted_input_tokens"] += input_tokens
            c["wasted_output_tokens"] += output_tokens

    def note_in_flight(self, held: int) -> None:
        """The server holds ``held`` chat requests now (running or queued)."""
        if held > self._counts["peak_in_flight"]:
            self._counts["peak_in_flight"] = held

    def snapshot(self) -> LedgerSnapshot:
        return LedgerSnapshot(**self._counts)

    def __repr__(self) -> str:
        return f"SimLedger({self.snapshot()!r})"
