"""``@gate.guard`` written without its parentheses: a clear error at decoration.

``guard`` takes only keyword options and returns the decorator, so ``@gate.guard`` on a
function used to fail with Python's own "guard() takes 1 positional argument but 2 were
given" — naming neither the fix nor the function. The guide's prose spells it ``@gate.guard``,
which is how a new user writes it first (tests/test_guard_contract.py)."""

from __future__ import annotations

__all__ = ["refuse_bare"]


def refuse_bare(given: object, face: str) -> None:
    """Raise ``TypeError`` when ``given`` (the guard's positional argument: a function
    decorated with ``@gate.guard`` bare) is not None; ``face``: how the guard is spelled."""
    if given is None:
        return
    name = getattr(given, "__qualname__", None) or repr(given)
    raise TypeError(
        f"@{face} needs its parentheses: write @{face}() (or @{face}(scenario=...)) above "
        f"{name!r}; the options are keywords and the call returns the decorator"
    )
