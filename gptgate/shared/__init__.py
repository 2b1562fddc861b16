"""Shared (fleet-wide) state through Redis: ``Gateway(shared=...)``.

Only :class:`Shared` is imported eagerly; the Redis-backed parts (``gptgate.shared.fleet``)
are imported when a gateway with ``shared=`` starts, so Redis stays an optional extra.
"""

from .config import Shared

__all__ = ["Shared"]
