"""Today's features used together as a user would: an SDK's fallback client
(``http_client("a", fallback=["b"])``) built in a parent that forks — gunicorn ``--preload``
building its ``SyncGateway`` and clients at import — used in the forked child, whose gateway
is rebuilt fresh (gptgate/fork_rebuild.py). Real fork in a fresh interpreter, real ``openai``
package, the simulator's loopback server as ``b``; ``a`` refuses connections (a closed
loopback port).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import gptgate as gg
from gptgate.sim import SimEngine, SimServer, get_profile
from tests.test_gateway_fork import SCALE, _prompts, _run


@pytest.fixture
def server() -> Iterator[tuple[str, SimEngine]]:
    profile = get_profile("gpu").model_copy(update={"output_tokens_mean": 5})
    engine = SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=7)
    engine.ledger.keep_bills()
    with SimServer(engine, time_scale=SCALE) as base_url:
        yield base_url, engine


SYNC_FALLBACK = """
import os, sys
import openai
import gptgate as gg

gate = gg.SyncGateway(
    [gg.Backend(name="a", base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-a-primary"),
     gg.Backend(name="b", base_url=sys.argv[1], model="m", api_key="sk-b-second")],
    breaker_threshold=2, max_breaker_wait_s=0.0,
)
client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-a-primary",
                       max_retries=0, http_client=gate.http_client("a", fallback=["b"]))
ask = lambda text: client.chat.completions.create(
    model="m", messages=[{"role": "user", "content": text}], max_tokens=5)

def report(who):
    stats = gate.stats()
    print(who, gate.ledger.entries["b"].calls_ok, stats["a"].failures, stats["a"].circuit,
          flush=True)

ask("parent one")
ask("parent two")
report("parent")
pid = os.fork()
if pid == 0:
    try:
        ask("child one")
        ask("child two")
        ask("child three")
        report("child")
    except BaseException as error:
        print("child failed", type(error).__name__, error, flush=True)
    finally:
        sys.stdout.flush()
        os._exit(0)
_, status = os.waitpid(pid, 0)
print("exit", os.waitstatus_to_exitcode(status), flush=True)
ask("parent three")
report("parent")
gate.close()
"""


def test_a_sync_fallback_client_built_before_a_fork_fails_over_in_the_child(
    server: tuple[str, SimEngine], tmp_path: Path
) -> None:
    """The parent's client fails over to ``b`` (``a`` refuses connections: two failures
    open its circuit); the child, on the same client object, is served by its own rebuilt
    gateway: ``b`` answers, booked in the child's ledger, and ``a``'s circuit is the child's
    own (learned anew: two refused connections open it there too)."""
    base_url, engine = server
    lines = _run(SYNC_FALLBACK, base_url, tmp_path=tmp_path)
    assert [line.split()[0] for line in lines] == ["parent", "child", "exit", "parent"], lines
    parent, child, _, parent_again = (line.split()[1:] for line in lines)
    assert lines[2] == "exit 0"
    assert child == ["3", "2", "open"], lines  # the child's own ledger and circuit
    assert parent == ["2", "2", "open"], lines
    assert parent_again == ["3", "2", "open"], lines
    assert _prompts(engine) == sorted(
        ["parent one", "parent two", "child one", "child two", "child three", "parent three"])
