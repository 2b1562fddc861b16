"""``gate.warm(messages)`` and ``keep_warm``'s refresh rounds: each backend at once.

Each backend has its own prompt cache, so a prefix is warmed once per backend (LiteLLM #6784).
They are warmed together: one after another, a backend that never answers held the others'
warm-up for its attempts' timeouts (3 × 60 s on a stalled server) — at startup, when the
healthy ones could have been ready at once — and a keep-warm round held the healthy
backends' refreshes behind its timeout per hot group, past the provider's cache TTL on a long
stall. The results keep the eligible backends' order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import anyio

from .errors import GateError
from .results import ChatResult

__all__ = ["refresh_each", "warm_each"]


async def warm_each(
    targets: Sequence[str],
    warm_one: Callable[[str], Awaitable[ChatResult]],
    warmed: Callable[[str], None],
) -> list[ChatResult | GateError]:
    """``warm_one(name)`` for every target at once; ``warmed(name)`` as each succeeds (the
    cache gate need not warm that prefix again there); a failure is that target's result."""
    results: list[ChatResult | GateError | None] = [None] * len(targets)

    async def one(index: int, name: str) -> None:
        try:
            results[index] = await warm_one(name)
        except GateError as error:
            results[index] = error
            return
        warmed(name)

    async with anyio.create_task_group() as group:
        for index, name in enumerate(targets):
            group.start_soon(one, index, name)
    return [result for result in results if result is not None]


async def refresh_each(
    backends: Sequence[str], refresh_backend: Callable[[str], Coroutine[Any, Any, None]]
) -> None:
    """One keep-warm round: ``refresh_backend(name)`` (its hot groups, one after another)
    for every backend at once."""
    async with anyio.create_task_group() as group:
        for name in backends:
            group.start_soon(refresh_backend, name)
