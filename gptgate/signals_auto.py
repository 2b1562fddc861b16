"""``Backend(signals=None)``, the default: read a self-hosted server's load where it serves it.

A user who points gptgate at their own llama-server with ``provider="llamacpp"`` expects the
gateway to read the server's own load; with ``signals`` off by default, latency alone ran
``concurrency="auto"`` (a real 2-slot llama-server: 5 in flight, a mean latency of 28 s
against 11 s at a fixed 2). So ``signals=None`` means: on for a preset whose server reports
its load (``Provider.reports_load``: vLLM, SGLang, llama.cpp), off for every other — hosted
APIs, ``"openai"`` (any compatible server, whose load nobody knows how to read).

"On" by default must cost nothing where it cannot work, so until a first good read the
reader is quiet: the ``signals`` extra missing is one INFO line and no reader (explicit
``True`` still raises), and a server that answers our calls but not the reads (SGLang
without ``--enable-metrics``, llama.cpp with ``--no-slots``, a proxy in front) is read
:data:`MISSES` times, then not again, with one INFO line — no WARNING per outage, no wrapper
left on the limit. After one good read it is ``signals=True`` in every respect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from .providers import Provider

__all__ = ["MISSES", "AutoSignals", "SignalsMode", "parser_ready", "signals_mode"]

log = logging.getLogger("gptgate")

#: ``"on"``: ``signals=True``; ``"auto"``: ``None`` on a preset that reports its load;
#: ``"off"``: ``False``, or ``None`` elsewhere
SignalsMode = Literal["on", "auto", "off"]

#: failed reads, while the server answers calls and before any good read, after which an
#: ``auto`` reader stops: the server does not serve its load
MISSES = 3


def signals_mode(preset: Provider, signals: bool | None) -> SignalsMode:
    """``Backend.signals`` resolved against its provider's preset."""
    if signals is None:
        return "auto" if preset.reports_load else "off"
    return "on" if signals else "off"


def parser_ready(mode: SignalsMode, names: list[str]) -> bool:
    """Whether the Prometheus parser (the ``signals`` extra) is importable. Missing: ``on``
    raises ``ImportError`` (the user asked for signals), ``auto`` logs one INFO line naming
    the ``names`` backends and reads nothing (nobody asked)."""
    try:
        import prometheus_client.parser  # noqa: F401
    except ImportError:
        if mode == "on":
            raise ImportError(
                "Backend(signals=True) reads Prometheus text with prometheus-client: "
                "pip install 'gptgate[signals]'"
            ) from None
        log.info(
            "gptgate: backends %s: their servers' own load is not read (signals=None reads "
            "it with the 'signals' extra: pip install 'gptgate[signals]'; signals=False "
            "silences this)", ", ".join(repr(n) for n in names),
        )
        return False
    return True


class AutoSignals:
    """An ``auto`` reader's state until its first good read: counts the failed reads while
    the server answers calls (``answered``), and says when to stop."""

    def __init__(self, name: str, answered: Callable[[], bool]) -> None:
        self.name = name
        self._answered = answered
        self.misses = 0
        self.stopped = False

    def failed(self, error: Exception) -> None:
        """A read failed before any good one: quiet. A server that answers no call yet may
        be starting (or down): its reads are not counted against it."""
        if not self._answered():
            return
        self.misses += 1
        if self.misses >= MISSES:
            self.stopped = True
            log.info(
                "gptgate: backend %r: the server answers calls but not its load reports "
                "(%s: %s); signals off for this backend (signals=None reads them only where "
                "served; signals=False skips the reads)",
                self.name, type(error).__name__, str(error)[:200],
            )
