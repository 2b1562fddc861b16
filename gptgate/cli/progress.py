"""A progress bar on stderr for a sweep that takes a while.

Nothing is drawn for the first ~2 s: a sweep on the simulator often ends sooner, and a bar
that flashes for a moment is noise. After that, a ``rich`` bar shows the calls done in the
current level and the levels done. Without ``rich`` (the ``cli`` extra), a one-line note
saying how to get it, then one plain line per level finished.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from .measure import Level

__all__ = ["SweepProgress"]

#: wall seconds before a bar appears
SHOW_AFTER_S = 2.0


class SweepProgress:
    """The ``on_progress`` hook of :func:`~gptgate.cli.measure.run_sweep`."""

    def __init__(self, levels: int, *, show_after_s: float = SHOW_AFTER_S) -> None:
        self.levels = levels
        self.show_after_s = show_after_s
        self._started = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None
        self._last_level = -1
        self._noted = False
        try:
            import rich.progress  # noqa: F401
        except ImportError:
            self._rich = False
        else:
            self._rich = True

    def __call__(self, done: int, total: int, index: int, level: Level) -> None:
        finished_level = self._last_level if index != self._last_level else None
        self._last_level = index
        if time.perf_counter() - self._started < self.show_after_s:
            return
        if not self._rich:
            if not self._noted:
                self._noted = True
                print("gptgate: no progress bar without rich (pip install 'gptgate[cli]'); "
                      "one line per level", file=sys.stderr)
            if finished_level is not None and finished_level >= 0:
                print(f"  level {finished_level + 1}/{self.levels} done", file=sys.stderr)
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("", total=total)
        self._bar.update(
            self._task,
            completed=done,
            total=total,
            description=f"concurrency {level} (level {index + 1}/{self.levels})",
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
