"""A gateway handed to another process (``multiprocessing`` with ``spawn``, a
``ProcessPoolExecutor`` argument) or copied: a TypeError that says what to send instead,
rather than pickle's complaint about whichever attribute it met first."""

from __future__ import annotations

import copy
import pickle

import pytest

import gptgate as gg

BACKENDS = [gg.Backend(name="gpu", base_url="http://127.0.0.1:9/v1", model="m")]


@pytest.mark.parametrize("kind", [gg.Gateway, gg.SyncGateway])
def test_pickling_a_gateway_says_to_send_its_configuration(kind: type) -> None:
    """Before: "Can't pickle local object 'Ledger.__init__.<locals>.<lambda>'" (an
    AttributeError) for a Gateway, "cannot pickle '_thread.lock' object" for a
    SyncGateway."""
    gate = kind(BACKENDS)
    try:
        with pytest.raises(TypeError, match=rf"a {kind.__name__} cannot be pickled.*config"):
            pickle.dumps(gate)
        with pytest.raises(TypeError, match="cannot be pickled"):
            copy.copy(gate)
    finally:
        if isinstance(gate, gg.SyncGateway):
            gate.close()


def test_what_it_says_to_send_builds_the_same_gateway_elsewhere() -> None:
    config = pickle.loads(pickle.dumps(gg.Gateway(BACKENDS, max_attempts=2).config))
    rebuilt = gg.Gateway(config=config)
    assert [b.name for b in rebuilt.config.backends] == ["gpu"]
    assert rebuilt.config.max_attempts == 2
