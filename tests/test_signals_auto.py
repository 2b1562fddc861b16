"""``Backend(signals=None)``, the default: a self-hosted preset reads its server's load where
the server serves it, and costs nothing where it does not (gptgate/signals_auto.py).

Before, ``signals`` defaulted to False: ``gptgate demo --base-url … --provider llamacpp`` on a
real 2-slot llama-server ran latency-only ``auto`` to 5 in flight and a mean latency of 28 s,
against 11 s at a fixed 2 — the slots were there to read."""

from __future__ import annotations

import logging
import sys
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

import gptgate as gg
from gptgate.signals import SignalLimit
from gptgate.signals_auto import MISSES, AutoSignals
from gptgate.testing import LoopClock, run_virtual
from tests.fake_llama_slots import FakeLlamaSlots

URL = "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    ("provider", "signals", "mode"),
    [
        ("llamacpp", None, "auto"), ("vllm", None, "auto"), ("sglang", None, "auto"),
        ("ollama", None, "off"), ("lmstudio", None, "off"), ("openai", None, "off"),
        ("llamacpp", False, "off"), ("llamacpp", True, "on"), ("openai", True, "on"),
    ],
)
def test_the_default_is_on_for_presets_that_report_their_load(
    provider: str, signals: bool | None, mode: str
) -> None:
    options = {} if signals is None else {"signals": signals}
    backend = gg.Backend(name="b", provider=provider, base_url=URL, model="m", **options)
    assert backend.signals_mode == mode


@pytest.mark.parametrize("provider", ["openai", "anthropic", "deepseek", "groq", "mistral"])
def test_hosted_presets_read_nothing_by_default_and_still_refuse_true(provider: str) -> None:
    assert gg.Backend(name="b", provider=provider, model="m").signals_mode == "off"
    with pytest.raises(ValidationError, match="signals=True"):
        gg.Backend(name="b", provider=provider, model="m", signals=True)


def _ask(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"question {i}: " + "tell me more " * 12}]


def _trace(
    server: FakeLlamaSlots, clock: LoopClock, calls: int = 60, **options: Any
) -> tuple[list[int], list[float], gg.BackendStats, bool]:
    """Run ``calls`` calls at once through one ``concurrency="auto"`` backend on ``server``:
    the limit every 0.1 s, the time of each answer, the stats after a further idle
    minute, and whether the backend still had a reader then."""

    async def main() -> tuple[list[int], list[float], gg.BackendStats, bool]:
        backend = gg.Backend(name="llama", base_url=URL, model="m", signals_interval_s=0.5,
                             transport=server.transport(), **options)
        limits: list[int] = []
        answered: list[float] = []
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            start = clock.now()

            async def one(i: int) -> None:
                await gate.chat(_ask(i))
                answered.append(clock.now() - start)

            async with anyio.create_task_group() as tg:
                for i in range(calls):
                    tg.start_soon(one, i)
                while len(answered) < calls:
                    limits.append(gate.stats()["llama"].limit)
                    await anyio.sleep(0.1)
            took = list(answered)
            await anyio.sleep(60)
            reading = gate.backend_state("llama").signals is not None
            return limits, took, gate.stats()["llama"], reading

    return run_virtual(main)


def test_a_llamacpp_backend_reads_the_slots_by_default_exactly_as_signals_true() -> None:
    """A fake 4-slot llama-server serving ``/slots`` (as llama-server does by default): with
    no ``signals=`` the limit sits at the 4 slots from the quick read after the first calls,
    exactly as with ``signals=True`` — the same limit at every tenth of a second, the same
    finish. Failed before: no reader, ``stats().server`` empty."""
    runs = {}
    for signals in (None, True):
        clock = LoopClock()
        server = FakeLlamaSlots(clock, slots=4, serves_slots=True)
        options = {} if signals is None else {"signals": signals}
        runs[signals] = _trace(server, clock, provider="llamacpp", **options)
    limits, took, stats, reading = runs[None]
    assert (limits, took) == runs[True][:2]
    assert reading and stats.server.slots_total == 4
    assert stats.failures == 0
    assert limits[-1] == 4 and max(limits[10:]) == 4  # the slots, from the first second


def test_the_reads_send_the_key_from_the_environment_as_the_calls_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """llama-server's ``--api-key`` guards ``/slots`` too; the preset's key is read from
    ``LLAMA_API_KEY``. Failed before: the reader sent only ``api_key=``, so its reads were
    401s and the signals (on by default now) turned off."""
    monkeypatch.setenv("LLAMA_API_KEY", "local-token")
    clock = LoopClock()
    server = FakeLlamaSlots(clock, slots=4, serves_slots=True, api_key="local-token")
    _, _, stats, reading = _trace(server, clock, calls=8, provider="llamacpp")
    assert reading and stats.server.slots_total == 4


@pytest.mark.parametrize("provider", ["llamacpp", "vllm", "sglang"])
def test_a_server_that_serves_no_load_turns_signals_off_quietly(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server answers the calls but 404s ``/metrics``, ``/slots``, ``/props`` (SGLang
    without ``--enable-metrics``, llama.cpp with ``--no-slots``, a proxy): a few reads, one
    INFO line, no WARNING, then no more reads — and the calls exactly as with
    ``signals=False``: the same limit at every tenth of a second, the same finish."""
    runs = {}
    reads = {}
    for signals in (None, False):
        clock = LoopClock()
        server = FakeLlamaSlots(clock, slots=4)
        options = {} if signals is None else {"signals": signals}
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="gptgate"):
            runs[signals] = _trace(server, clock, provider=provider, **options)
        reads[signals] = server.reads
        if signals is None:
            records = [r for r in caplog.records if r.name == "gptgate"]
            assert not [r for r in records if r.levelno >= logging.WARNING]
            said = [r for r in records if "not its load reports" in r.getMessage()]
            assert len(said) == 1 and said[0].levelno == logging.INFO
    limits, took, stats, reading = runs[None]
    assert (limits, took) == runs[False][:2]
    assert stats.failures == 0 and stats.server == gg.ServerSignals()
    assert not reading and reads[False] == 0
    per_read = 3 if provider == "llamacpp" else 1  # /metrics, /slots, /props
    # the read at the open (no call answered yet) and MISSES after: none in the idle minute
    assert reads[None] <= (MISSES + 2) * per_read


def test_the_stopped_reader_leaves_the_limit_unwrapped() -> None:
    async def main() -> tuple[object, object]:
        clock = LoopClock()
        server = FakeLlamaSlots(clock, slots=4)
        backend = gg.Backend(name="llama", provider="vllm", base_url=URL, model="m",
                             signals_interval_s=0.5, transport=server.transport())
        async with gg.Gateway([backend], clock=clock) as gate:
            state = gate.backend_state("llama")
            wrapped = state.limiter.limit
            await gate.chat(_ask(0))
            await anyio.sleep(10)
            return wrapped, state.limiter.limit

    wrapped, after = run_virtual(main)
    assert isinstance(wrapped, SignalLimit)
    assert after is wrapped.inner


def test_reads_are_not_counted_against_a_server_that_answers_no_call_yet() -> None:
    """A server still starting (or down) fails the reads and the calls alike: the reads go
    on, quietly, and the first good one turns the signals on."""
    answered = [False]
    auto = AutoSignals("b", lambda: answered[0])
    for _ in range(10 * MISSES):
        auto.failed(ConnectionRefusedError("refused"))
    assert not auto.stopped and auto.misses == 0
    answered[0] = True
    for _ in range(MISSES - 1):
        auto.failed(ConnectionRefusedError("refused"))
    assert not auto.stopped
    auto.failed(ConnectionRefusedError("refused"))
    assert auto.stopped


def test_a_hosted_or_openai_backend_never_reads(caplog: pytest.LogCaptureFixture) -> None:
    """``provider="openai"`` at a self-hosted URL (any compatible server) and Ollama: no
    read, even of a server that would answer one."""
    for provider in ("openai", "ollama"):
        clock = LoopClock()
        server = FakeLlamaSlots(clock, slots=4, serves_slots=True)
        _, _, stats, reading = _trace(server, clock, calls=8, provider=provider)
        assert server.reads == 0 and not reading and stats.server == gg.ServerSignals()


def test_without_the_extra_auto_is_one_info_line_and_true_still_raises(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client.parser", None)  # not installed
    clock = LoopClock()
    server = FakeLlamaSlots(clock, slots=4, serves_slots=True)
    with caplog.at_level(logging.INFO, logger="gptgate"):
        _, _, stats, reading = _trace(server, clock, calls=8, provider="llamacpp")
    assert stats.failures == 0 and not reading and server.reads == 0
    said = [r for r in caplog.records if "gptgate[signals]" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO

    async def explicit() -> None:
        backend = gg.Backend(name="llama", provider="llamacpp", base_url=URL, model="m",
                             signals=True, transport=server.transport())
        async with gg.Gateway([backend], clock=LoopClock()):
            pass

    with pytest.raises(ImportError, match="gptgate\\[signals\\]"):
        run_virtual(explicit)
