"""``gate.warm(messages)``: one minimal request per eligible backend, all at once.

Each backend has its own prompt cache, so a prefix is warmed once per backend (LiteLLM #6784).
They are warmed together: one after another, a backend that never answers held the others'
warm-up for its attempts' timeouts (3 × 60 s on a stalled server) — at startup, when the
healthy ones could have been ready at once. The results keep the eligible backends' order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio

from .errors import GateError
from .results import ChatResult

__all__ = ["warm_each"]


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
