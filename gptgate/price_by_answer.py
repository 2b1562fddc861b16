"""A hosted backend priced by the model its answers name, when its configured ``model`` is
unknown to the genai-prices table.

An Azure deployment is configured by its own name (``deployment="gpt-4o-prod"``, and ``model``
defaults to it): no table could know that name, so every call cost $0 — in the ledger,
``r.cost_usd``, the spans and the budget — while each answer says what it is
(``"model": "gpt-4o-2024-08-06"``). The first answer naming a model the table knows, for the
backend's provider, prices the backend from then on (a deployment serves one model). Only for
a hosted provider with a table entry (``prices._table_id``): a self-hosted server's answers
name whatever model it loaded, at no list price.
"""

from __future__ import annotations

import logging

from .prices import CatalogPrice, catalog_price

__all__ = ["PricedByAnswer"]

log = logging.getLogger("gptgate.prices")

#: distinct unknown answer models tried per backend (each one table look-up)
_MAX_TRIED = 16


class PricedByAnswer:
    """Not priced yet: waits for an answer naming a model the table knows."""

    __slots__ = ("_tried", "backend", "base_url", "provider")

    def __init__(self, backend: str, provider: str, base_url: str | None) -> None:
        self.backend = backend
        self.provider = provider
        self.base_url = base_url
        self._tried: set[str] = set()

    def learn(self, model: str | None) -> CatalogPrice | None:
        """The table's entry for ``model``, the model an answer named, or None."""
        if not model or model in self._tried or len(self._tried) >= _MAX_TRIED:
            return None
        self._tried.add(model)
        found = catalog_price(self.provider, model, self.base_url)
        if found is not None:
            log.info("backend %r: priced as %r, the model its answers name", self.backend,
                     found.model_id)
        return found

    def __repr__(self) -> str:
        return f"PricedByAnswer({self.backend!r}, {self.provider!r})"
