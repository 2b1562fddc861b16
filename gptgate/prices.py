"""Prices nobody typed: ``Backend(price=None)`` takes the provider's list price from pydantic's
``genai-prices`` table (``pip install 'gptgate[prices]'``) when it knows the (provider, model).

Every user typed ``gg.Price`` by hand before, and a typo or a stale price is a silently wrong
bill. The table is read from the copy bundled with the installed package — never fetched —
and only for a hosted provider: ``provider="openai"`` means *any* OpenAI-compatible server,
so it is priced from the table only when its ``base_url`` is OpenAI's own; a self-hosted
server (vLLM, llama.cpp, …) has no list price. An explicit ``price=`` always wins.

A table entry is priced at the moment of each attempt and for its prompt's size: DeepSeek's
prices change with the time of day (off-peak hours) and Anthropic's and Google's with the
prompt's length (past 200K tokens every token costs the higher rate). When the table does not
know the model, or the package is not installed, one log line says so and the backend's
calls cost nothing in the ledger and the budget.
"""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeAlias

import httpx2

from .config import Backend, Price

if TYPE_CHECKING:
    from .price_by_answer import PricedByAnswer

__all__ = ["CatalogPrice", "PriceSource", "catalog_price", "price_source"]

logger = logging.getLogger("gptgate.prices")

#: gptgate's provider names → the table's; the rest (vLLM, llama.cpp, …) are self-hosted
_TABLE_PROVIDER = {
    "openai": "openai",
    "azure": "azure",
    "anthropic": "anthropic",
    "deepseek": "deepseek",
    "gemini": "google",
    "groq": "groq",
    "openrouter": "openrouter",
    "together": "together",
    "mistral": "mistral",
}
_OPENAI_HOST = "api.openai.com"
#: the table's price fields that map onto ``gg.Price`` (input, cache read, cache write,
#: output, one-hour cache write)
_TABLE_FIELDS = (
    "input_mtok", "cache_read_mtok", "cache_write_mtok", "output_mtok", "cache_write_1h_mtok",
)
#: the table's price of a server-side web search tool, per 1,000 searches
_SEARCHES = "web_searches_kcount"
#: the table's price-variant key for the Batch APIs' prices
_BATCH = "batch"


def _rate(value: Any, input_tokens: int) -> float | None:
    """A table price in $/MTok; a tiered one at the tier the prompt's size reaches (the
    table's "cliff" rule: past a threshold every token pays that tier's rate)."""
    if value is None:
        return None
    if isinstance(value, Decimal | int | float):
        return float(value)
    rate = value.base
    for tier in reversed(value.tiers):
        if input_tokens > tier.start:
            rate = tier.price
            break
    return float(rate)


class CatalogPrice:
    """One model's entry in the table: a :class:`~gptgate.Price` at a moment, for a prompt."""

    __slots__ = ("_cache", "_model", "model_id", "provider_id")

    def __init__(self, provider_id: str, model: Any) -> None:
        self.provider_id = provider_id
        self.model_id: str = model.id
        self._model = model
        #: a few distinct prices at most (peak/off-peak, tiers): converted once each
        self._cache: dict[tuple[int, int, bool], Price] = {}

    def has_batch(self, when: datetime) -> bool:
        """The table states this model's Batch API price at ``when`` (a ``processing:
        batch`` variant in force): :meth:`at` with ``batch=True`` is that price, discounted
        as the provider discounts it — cache reads and writes included."""
        return any(
            variant.when.get("processing") == _BATCH
            and (variant.constraint is None or variant.constraint.active(when))
            for variant in self._model.price_variants or ()
        )

    def at(self, when: datetime, input_tokens: int = 0, *, batch: bool = False) -> Price:
        # the time-of-day variant in force; with ``batch``, the batch variant over it
        batch = batch and self.has_batch(when)
        table = self._model.get_prices(when, {"processing": _BATCH} if batch else None)
        values = [getattr(table, name, None) for name in _TABLE_FIELDS]
        # thresholds crossed, over every tiered field: the same count, the same rates
        crossed = sum(
            1 for v in values for tier in getattr(v, "tiers", ()) if input_tokens > tier.start
        )
        key = (id(self._model.get_prices(when)), crossed, batch)
        price = self._cache.get(key)
        if price is None:
            plain, read, write, output, hour = (_rate(v, input_tokens) for v in values)
            searches = _rate(getattr(table, _SEARCHES, None), input_tokens)
            price = self._cache[key] = Price(
                input_per_mtok=plain or 0.0,
                cached_input_per_mtok=read,
                cache_write_per_mtok=write,
                output_per_mtok=output or 0.0,
                cache_write_1h_per_mtok=hour,
                web_search_per_k=searches or 0.0,
            )
        return price

    def __repr__(self) -> str:
        return f"CatalogPrice({self.provider_id!r}, {self.model_id!r})"


#: what the ledger prices a backend with: a typed price, a table entry, a hosted backend
#: waiting for an answer to name its model (gptgate/price_by_answer.py), or nothing
PriceSource: TypeAlias = "Price | CatalogPrice | PricedByAnswer | None"


def catalog_price(provider: str, model: str, base_url: str | None = None) -> CatalogPrice | None:
    """The table's entry for a hosted ``provider``'s ``model``, or None (unknown model, a
    self-hosted provider, or ``genai-prices`` not installed)."""
    table_id = _table_id(provider, base_url)
    if table_id is None:
        return None
    try:
        from genai_prices import data_snapshot
    except ImportError:
        return None
    try:
        _, model_info = data_snapshot.get_snapshot().find_provider_model(
            model, None, table_id, None
        )
    except LookupError:
        return None
    return CatalogPrice(table_id, model_info)


def _table_id(provider: str, base_url: str | None) -> str | None:
    if provider == "openai" and (base_url is None or httpx2.URL(base_url).host != _OPENAI_HOST):
        return None  # "openai" is any OpenAI-compatible server: only OpenAI's own has a price
    return _TABLE_PROVIDER.get(provider)


def price_source(backend: Backend) -> PriceSource:
    """How the ledger prices ``backend``: its own ``price=``, else the table's; one log line
    when neither is known."""
    if backend.price is not None:
        return backend.price
    found = catalog_price(backend.provider, backend.model, backend.base_url)
    if found is not None:
        return found
    listed = _table_id(backend.provider, backend.base_url) is not None
    if listed and _has_table():  # an Azure deployment's own name: its answers name the model
        from .price_by_answer import PricedByAnswer

        logger.info(
            "backend %r: the price table has no model %r for provider %r: priced by the "
            "model its answers name (or give price=gg.Price(...))",
            backend.name, backend.model, backend.provider,
        )
        return PricedByAnswer(backend.name, backend.provider, backend.base_url)
    logger.info(
        "backend %r: no price for provider %r, model %r (give price=gg.Price(...)%s); "
        "its calls cost $0 in the ledger and the budget",
        backend.name, backend.provider, backend.model,
        " or install gptgate[prices]" if listed else "",
    )
    return None


def _has_table() -> bool:
    try:
        import genai_prices  # noqa: F401
    except ImportError:
        return False
    return True
