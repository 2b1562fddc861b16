"""The dollar budget's refusals of a batch job, said as a job's, not a call's.

A job is held at its dearest outcome (every prompt, every ``max_tokens``, at the batch
price) before its intent is recorded; a retry round (``retry="batch"`` or ``"live"``) asks
again, once the first round's answers are booked. A refusal at submission refuses the whole
job, before anything is recorded, uploaded or held: the advice says how many items would
fit. A refusal of a retry round loses nothing: the answers collected are returned and booked,
and each item not sent again holds a ``BudgetExceededError`` that says what its batch
answered, so it can be sent later (``gate.batch(..., retry="batch")`` again, the same items)."""

from __future__ import annotations

import math
from collections.abc import Iterable, MutableMapping

from .errors import BudgetExceededError, GateError
from .results import ChatResult

__all__ = ["job_refused", "retry_refused"]


def job_refused(error: BudgetExceededError, items: int, estimate: float) -> BudgetExceededError:
    """The budget's refusal of a job of ``items`` that may cost ``estimate`` dollars."""
    fits = math.floor(items * error.budget_usd / estimate) if estimate > 0 else items
    whole = estimate > error.budget_usd
    advice = (
        f"split it into jobs of at most {fits} items, lower max_tokens, or raise the budget"
        if whole
        else "submit it when room frees up (on_exceed='throttle' waits for it), or lower "
        "max_tokens"
    )
    return BudgetExceededError(
        f"batch job of {items} items refused by the dollar budget before anything was "
        f"sent: it may cost ${estimate:.4f} at the batch price ({error.message}); {advice}",
        spent_usd=error.spent_usd, budget_usd=error.budget_usd, retry_after=error.retry_after,
        backend=error.backend,
    )


def retry_refused(
    outcomes: MutableMapping[int, ChatResult | GateError],
    indices: Iterable[int],
    error: BudgetExceededError,
    backend: str,
) -> None:
    """Each of ``indices`` (failed items a retry round would have sent) ends in the
    budget's refusal, naming what its batch answered."""
    for index in indices:
        first = outcomes.get(index)
        was = first.message if isinstance(first, GateError) else "no answer"
        outcomes[index] = BudgetExceededError(
            f"not sent again: the dollar budget refused the retry round ({error.message}); "
            f"the batch answered: {was}",
            spent_usd=error.spent_usd, budget_usd=error.budget_usd,
            retry_after=error.retry_after, backend=backend,
        )
