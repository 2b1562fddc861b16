"""Config drift the fleet cannot share: one backend name pointing at another URL or model in
another process (an old ConfigMap in a rolling deploy, an IP in one pod and a service name in
the next). A backend is keyed by name + base_url + model, so those are two fleets, each with
its own limit, pauses and budgets, put side by side on what may be one server — silently,
before. Each renewal registers this process's ``base_url|model`` under each of its backend
names (a sorted set per name, member → expiry, in the RENEW script: no round trip of its own)
and hears the others'; a difference warns once, naming both."""

from __future__ import annotations

import logging

log = logging.getLogger("gptgate")

__all__ = ["BackendNames"]


class BackendNames:
    """This process's backend names, in the order its admissions were made."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._names: list[tuple[str, str]] = []
        self._warned: set[tuple[str, str]] = set()

    def add(self, name: str, base_url: str, model: str) -> None:
        self._names.append((name, f"{base_url}|{model}"))

    def keys(self) -> list[str]:
        return [f"{self._prefix}:name|{name}" for name, _ in self._names]

    def members(self) -> list[str]:
        return [where for _, where in self._names]

    def heard(self, others: list[list[bytes | str]]) -> None:
        """What the other processes have under each name (the RENEW script's answer)."""
        for (name, where), found in zip(self._names, others, strict=False):
            for member in found:
                other = member.decode() if isinstance(member, bytes) else str(member)
                if (name, other) in self._warned:
                    continue
                self._warned.add((name, other))
                log.warning(
                    "gptgate: backend %r is %s here but %s in another process of the fleet: "
                    "they are two backends to the fleet, sharing no limit, pause or budget "
                    "(keep base_url and model identical across the fleet)",
                    name, _shown(where), _shown(other),
                )


def _shown(where: str) -> str:
    base_url, _, model = where.rpartition("|")
    return f"{base_url} (model {model!r})"
