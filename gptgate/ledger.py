"""The token and cost ledger: what every attempt billed, including the ones that failed.

Cost is a first-class signal: a retry after a timeout, an interrupted stream, a cache
miss — each is counted here in tokens and dollars, so ``stats()`` shows the real bill and
``plan()`` sizes a budget with the price actually paid at the current concurrency (planning
with the low-concurrency price overruns the budget: $0.0215 a call at 10, $0.0225 at 50).

Token counts are the normalised :class:`~gptgate.results.Usage` (every prompt token in
``input_tokens``, cache reads and writes as parts of it, whatever shape the provider reported
them in), and every dollar comes from :meth:`gptgate.Price.cost` — a backend's own ``price=``,
or the genai-prices table's for its provider and model (:mod:`gptgate.prices`), priced at the
moment of the attempt (DeepSeek's off-peak hours) and for its prompt's size (long-context tiers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from .config import Price
from .price_by_answer import PricedByAnswer
from .prices import CatalogPrice, PriceSource
from .results import Usage

__all__ = ["BudgetPlan", "Ledger", "LedgerEntry"]


@dataclass(slots=True)
class LedgerEntry:
    """Running totals for one backend."""

    calls_ok: int = 0
    calls_failed: int = 0
    attempts: int = 0
    streamed_attempts: int = 0
    plain_attempts: int = 0
    interrupted_streams: int = 0
    #: all prompt tokens; of them, those read from and written to the provider's cache
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    #: all answer tokens; of them, those spent reasoning
    output_tokens: int = 0
    reasoning_tokens: int = 0
    #: searches a server-side web search tool made (Anthropic's), billed per 1,000
    web_search_requests: int = 0
    #: tokens of attempts that produced no result (timeouts after send, cut streams)
    wasted_tokens: int = 0
    #: of those, the estimated tokens of attempts that answered nothing before the client left
    #: (a timeout or a cancellation with no byte of answer): queued, generating or hung, the
    #: server may have billed them or not — the bill is between ``total - uncertain`` and
    #: ``total``
    uncertain_tokens: int = 0
    estimated_attempts: int = 0
    cost_usd: float = 0.0
    wasted_cost_usd: float = 0.0
    #: answers of this (small-tier) backend asked again of the large tier (docs/tiers.md):
    #: their tokens are in ``wasted_tokens``, and they are not in ``calls_ok``
    escalated: int = 0
    #: Batch API requests (``gate.batch``) and their tokens and cost, billed at ``price ×
    #: batch_discount``: also in the totals above, and here on their own
    batch_requests: int = 0
    batch_tokens: int = 0
    batch_cost_usd: float = 0.0
    #: answers of this backend served again by the response cache, at $0 (docs/response-cache.md)
    response_cache_hits: int = 0

    @property
    def hit_rate(self) -> float | None:
        return self.cached_input_tokens / self.input_tokens if self.input_tokens else None

    @property
    def cost_per_success(self) -> float | None:
        return self.cost_usd / self.calls_ok if self.calls_ok else None


@dataclass(frozen=True, slots=True)
class BudgetPlan:
    budget_per_hour_usd: float
    cost_per_call_usd: float
    calls_per_hour: int


class Ledger:
    def __init__(
        self,
        prices: Mapping[str, PriceSource],
        *,
        utc_now: Callable[[], datetime] | None = None,
    ) -> None:
        self._prices = dict(prices)
        #: the wall clock a table price is looked up at (a test pins it)
        self._utc_now = utc_now or (lambda: datetime.now(UTC))
        self.entries: dict[str, LedgerEntry] = {name: LedgerEntry() for name in prices}
        #: told every attempt's cost as it is counted (the dollar budget's spend)
        self.on_cost: Callable[[float], None] | None = None

    def price(self, backend: str, input_tokens: int = 0) -> Price | None:
        """``backend``'s price now, for a prompt of ``input_tokens``; None: it costs nothing."""
        source = self._prices.get(backend)
        if isinstance(source, CatalogPrice):
            return source.at(self._utc_now(), input_tokens)
        return source if isinstance(source, Price) else None

    def cost(self, backend: str, usage: Usage) -> float:
        price = self.price(backend, usage.input_tokens)
        return 0.0 if price is None else price.cost(usage)

    def learn_model(self, backend: str, model: str | None) -> None:
        """An answer of ``backend`` named ``model``: a hosted backend the table did not know
        by its configured model (an Azure deployment's name) is priced by it from now on."""
        source = self._prices.get(backend)
        if isinstance(source, PricedByAnswer):
            found = source.learn(model)
            if found is not None:
                self._prices[backend] = found

    def record_attempt(
        self,
        backend: str,
        usage: Usage,
        *,
        streamed: bool,
        wasted: bool,
        interrupted: bool = False,
        uncertain: bool = False,
        unread_tokens: int = 0,
    ) -> float:
        """Count one attempt's billed usage; returns its cost in dollars. ``uncertain``: all
        of it may not have been billed; ``unread_tokens``: that many of its output tokens
        may not have been (a stream gptgate drained after its caller left it unread)."""
        entry = self.entries[backend]
        cost = self.cost(backend, usage)
        entry.attempts += 1
        if streamed:
            entry.streamed_attempts += 1
        else:
            entry.plain_attempts += 1
        if interrupted:
            entry.interrupted_streams += 1
        if usage.estimated:
            entry.estimated_attempts += 1
        _count(entry, usage, 1)
        entry.cost_usd += cost
        if wasted:
            entry.wasted_tokens += usage.total_tokens
            entry.wasted_cost_usd += cost
        if uncertain:
            entry.uncertain_tokens += usage.total_tokens
        else:
            entry.uncertain_tokens += unread_tokens
        if self.on_cost is not None and cost > 0:
            self.on_cost(cost)
        return cost

    def correct(self, backend: str, booked: Usage, actual: Usage, *, uncertain: bool) -> float:
        """An attempt's waste was booked as ``booked`` (an estimate) and is now known to be
        ``actual`` (an abandoned answer read to its end, gptgate/late_answer.py): book the
        difference. Returns the cost difference (a rise also reaches ``on_cost``)."""
        entry = self.entries[backend]
        delta = self.cost(backend, actual) - self.cost(backend, booked)
        if booked.estimated and not actual.estimated:
            entry.estimated_attempts -= 1
        _count(entry, booked, -1)
        _count(entry, actual, 1)
        entry.cost_usd += delta
        entry.wasted_tokens += actual.total_tokens - booked.total_tokens
        entry.wasted_cost_usd += delta
        if uncertain:  # no longer "possibly not billed": the answer came
            entry.uncertain_tokens -= booked.total_tokens
        if self.on_cost is not None and delta > 0:
            self.on_cost(delta)
        return delta

    def batch_cost(self, backend: str, usage: Usage, discount: float) -> float:
        """One Batch API answer's cost: genai-prices' batch price when the table states one
        for the model (the provider's own discount, cache reads and writes included), else
        ``discount`` of the live price — of the tokens: a server tool's searches are not
        discounted (the table's batch price keeps them)."""
        source = self._prices.get(backend)
        if isinstance(source, CatalogPrice):
            now = self._utc_now()
            if source.has_batch(now):
                return source.at(now, usage.input_tokens, batch=True).cost(usage)
        if not usage.web_search_requests:
            return self.cost(backend, usage) * discount
        tokens = self.cost(backend, replace(usage, web_search_requests=0))
        return tokens * discount + self.cost(backend, usage) - tokens

    def batch_most_cost(
        self, backend: str, input_tokens: int, output_tokens: int, discount: float
    ) -> float:
        """The dearest outcome of one Batch API item (what a budget holds for it), at the
        price :meth:`batch_cost` will book it at: the table's batch price when it states one,
        else ``discount`` of the live price; 0 for a backend that costs nothing."""
        source = self._prices.get(backend)
        if isinstance(source, CatalogPrice):
            now = self._utc_now()
            if source.has_batch(now):
                return source.at(now, input_tokens, batch=True).most_cost(
                    input_tokens, output_tokens
                )
        price = self.price(backend, input_tokens)
        return 0.0 if price is None else price.most_cost(input_tokens, output_tokens) * discount

    def record_batch(self, backend: str, usage: Usage, discount: float) -> float:
        """Count one Batch API answer, billed at the batch price (:meth:`batch_cost`);
        returns its cost in dollars (which also reaches ``on_cost``: the dollar budget
        settles from it)."""
        entry = self.entries[backend]
        cost = self.batch_cost(backend, usage, discount)
        entry.batch_requests += 1
        entry.batch_tokens += usage.total_tokens
        entry.batch_cost_usd += cost
        entry.input_tokens += usage.input_tokens
        entry.cached_input_tokens += usage.cached_input_tokens
        entry.output_tokens += usage.output_tokens
        entry.web_search_requests += usage.web_search_requests
        entry.cost_usd += cost
        if self.on_cost is not None and cost > 0:
            self.on_cost(cost)
        return cost

    def record_escalated(self, backend: str, usage: Usage) -> None:
        """A successful answer turned out unusable and was asked again of the large tier:
        its tokens (billed: the server answered) become waste, and the call's success is
        the large tier's, not this backend's."""
        entry = self.entries[backend]
        cost = self.cost(backend, usage)
        entry.escalated += 1
        entry.calls_ok -= 1
        entry.wasted_tokens += usage.total_tokens
        entry.wasted_cost_usd += cost

    def record_call(self, backend: str, ok: bool) -> None:
        entry = self.entries[backend]
        if ok:
            entry.calls_ok += 1
        else:
            entry.calls_failed += 1

    def total(self) -> LedgerEntry:
        total = LedgerEntry()
        for entry in self.entries.values():
            for name in LedgerEntry.__dataclass_fields__:
                setattr(total, name, getattr(total, name) + getattr(entry, name))
        return total

    def plan(self, budget_per_hour_usd: float, backend: str | None = None) -> BudgetPlan:
        """Calls per hour a budget buys at the cost per successful call observed so far.

        A budget that is not a finite number >= 0, or an unknown ``backend``, is a
        ``ValueError`` naming it."""
        if not (isinstance(budget_per_hour_usd, int | float)
                and math.isfinite(budget_per_hour_usd) and budget_per_hour_usd >= 0):
            raise ValueError(
                f"budget_per_hour_usd must be a finite number >= 0, got {budget_per_hour_usd!r}"
            )
        if backend is not None and backend not in self.entries:
            raise ValueError(
                f"unknown backend {backend!r}; known: {', '.join(sorted(self.entries))}"
            )
        entry = self.entries[backend] if backend is not None else self.total()
        per_call = entry.cost_per_success
        if not per_call:
            raise ValueError("no successful priced calls observed yet")
        # rounded first: $10 at $0.00001 a call is 1,000,000 calls, not 999,999.99999999991
        calls = math.floor(round(budget_per_hour_usd / per_call, 6))
        return BudgetPlan(budget_per_hour_usd, per_call, calls)


def _count(entry: LedgerEntry, usage: Usage, sign: int) -> None:
    """Add (``sign=1``) or take back (``-1``) an attempt's tokens."""
    entry.input_tokens += sign * usage.input_tokens
    entry.cached_input_tokens += sign * usage.cached_input_tokens
    entry.cache_write_input_tokens += sign * usage.cache_write_input_tokens
    entry.output_tokens += sign * usage.output_tokens
    entry.reasoning_tokens += sign * usage.reasoning_tokens
    entry.web_search_requests += sign * usage.web_search_requests
