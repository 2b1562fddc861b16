"""``Gateway(state=PATH)``: the file read on start and merged into on exit.

Two things make a shared path safe. A file that is not gptgate state (a config, the baseline
``gptgate profile`` wrote, a newer version's state) is never written: one warning naming the
path, the gateway starts cold and leaves it as it is — a typo in ``state=`` must not cost a
file, and must not stop a service from starting either. And the write merges per backend:
just before writing, the file is read again and the entries of backends this gateway does not
have are kept (with their own age), so a one-off script with one backend, or another process
sharing the path, does not wipe the others' warm start. The write itself is atomic
(temporary file + ``os.replace``); two writers racing within that last read-and-replace keep
the later one's entries for the backends both have.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .config import Backend
from .snapshot import (
    GatewaySnapshot,
    LimitState,
    check_state_arg,
    load_state,
    merge_state,
    parse_state,
    save_state,
    warm_limits,
)

__all__ = ["StateFile", "load_warm", "state_source"]

log = logging.getLogger("gptgate")


class StateFile:
    """One ``state=`` path; remembers whether it already warned that the file is not state."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._refused = False

    def _read(self) -> GatewaySnapshot | str | None:
        """The file's snapshot; None when there is no file yet; else why it is not state."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as error:
            return f"cannot read it ({error})"
        try:
            raw: object = json.loads(text)
        except ValueError as error:
            return f"not JSON ({error})"
        return parse_state(raw)

    def load(self, backends: Sequence[Backend], *, max_age_s: float) -> dict[str, LimitState]:
        """The saved limit per backend that may start warm (never raises for the content)."""
        found = self._read()
        if isinstance(found, str):
            self._refused = True
            log.warning(
                "state %s ignored, starting cold: %s; it is not gptgate state, so it is left "
                "as it is and not written on exit (give state= a path of its own)",
                self.path,
                found,
            )
            return {}
        if found is None:
            return {}
        return warm_limits(found, backends, where=f"state {self.path}", max_age_s=max_age_s)

    def save(self, own: Mapping[str, Any], *, max_age_s: float) -> None:
        """Merge ``own`` (``gate.snapshot()``) into the file as it is now; logged, never
        raised: a failed write must not hide how the ``async with`` block ended."""
        found = self._read()
        if isinstance(found, str):
            if not self._refused:  # it became something else while the gateway ran
                self._refused = True
                log.warning(
                    "state %s not written on exit: %s; it is not gptgate state, so it is "
                    "left as it is",
                    self.path,
                    found,
                )
            return
        merged = merge_state(own, found, max_age_s=max_age_s, now=float(own["taken_at"]))
        try:
            save_state(self.path, merged)
        except (OSError, ValueError) as error:
            log.warning("state %s not saved: %s", self.path, error)


def state_source(state: object) -> Mapping[str, Any] | StateFile | None:
    """``state=`` as given: a dict stays a dict (read only), a path becomes a
    :class:`StateFile`; any other type is a ``BadRequestError`` at construction."""
    source = check_state_arg(state)
    if source is None or isinstance(source, Mapping):
        return source
    return StateFile(source)


def load_warm(
    source: Mapping[str, Any] | StateFile | None,
    backends: Sequence[Backend],
    *,
    max_age_s: float,
) -> dict[str, LimitState]:
    """What ``Gateway.start`` warms from: nothing, a dict, or the file."""
    if source is None:
        return {}
    if isinstance(source, StateFile):
        return source.load(backends, max_age_s=max_age_s)
    return load_state(source, backends, max_age_s=max_age_s)
