"""gptgate's errors cross process boundaries: a ``multiprocessing`` pool's worker, a Celery task
(pickle serializer) or a ``ProcessPoolExecutor`` sends what its function raised back to the
caller pickled. Each error must come back as the same class with the same fields."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest

import gptgate as gg
from gptgate.batching import ItemCancelledError
from gptgate.results import Usage

ERRORS: list[gg.GateError] = [
    gg.SharedUnreachableError("redis down", url="redis://:****@127.0.0.1:1/0"),
    gg.RateLimitedError("slow down", backend="gpu", status=429, retry_after=2.5),
    gg.RequestTimeout("deadline", deadline=True, backend="gpu", billed=True),
    gg.RequestTooLargeError("too big", limit=1000, requested=5000),
    gg.BudgetExceededError("spent", spent_usd=1.5, budget_usd=1.0, retry_after=30.0),
    gg.StreamInterruptedError(
        "cut", partial_text="half an answer", output_tokens=7, usage_so_far=Usage(5, 0, 7),
    ),
    gg.BackendError("boom", status=500, request_id="req-1", should_retry=False),
    gg.GatewayClosedError("closed"),
    ItemCancelledError("item 3 cancelled"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_an_error_pickled_comes_back_whole(error: gg.GateError) -> None:
    """``SharedUnreachableError`` (``url`` a required keyword) could not be unpickled:
    pickle rebuilds an exception as ``cls(*args)``, from its message alone."""
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and back.args == error.args
    assert vars(back) == vars(error)
    assert back.retryable == error.retryable


def _unreachable(_: int) -> None:
    raise gg.SharedUnreachableError("redis down", url="redis://127.0.0.1:1/0")


def test_a_pool_worker_raising_shared_unreachable_reaches_its_caller() -> None:
    """A pool's worker (``Shared(required=True)`` and Redis down at its start) raised the
    error: the pool could not unpickle it in its result thread, and ``apply`` waited
    forever. Now the caller gets the typed error, its URL with it."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        pending = pool.apply_async(_unreachable, (1,))
        with pytest.raises(gg.SharedUnreachableError) as raised:
            pending.get(timeout=20)
    assert raised.value.url == "redis://127.0.0.1:1/0"
