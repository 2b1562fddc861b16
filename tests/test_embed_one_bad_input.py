"""One caller's input that the provider refuses must not fail the callers merged with it.

OpenAI answers an embeddings request holding one input over the model's 8,192 tokens with a
400 for the whole request. ``gate.embed`` merges concurrent callers into one request, so one
user's oversized document failed every other caller of the same 5 ms window with that 400:
their texts were fine. A merged request refused with a 400 is now sent again per caller;
only the caller whose input it was gets the ``BadRequestError``.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, get_profile, run_virtual
from gptgate.sim.embeddings import vector_for

from .test_embed import DIMS, Recording

LONG = "word " * 9000  # about 11,000 tokens: over the simulated model's 8,192


def _gate(clock: LoopClock, **profile: Any) -> tuple[gg.Gateway, Recording, SimEngine]:
    engine = SimEngine(get_profile("gpu").model_copy(update=profile), clock=clock, seed=1)
    recording = Recording(engine)
    backend = gg.Backend(
        name="emb", base_url="http://127.0.0.1:8000/v1", model="chat-model",
        embedding_model="text-embedding-3-small", transport=recording,
    )
    return gg.Gateway([backend], clock=clock), recording, engine


def test_an_input_over_the_models_limit_fails_only_its_own_caller() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, recording, engine = _gate(clock)
        results: dict[str, Any] = {}

        async def one(name: str, texts: list[str]) -> None:
            try:
                results[name] = await gate.embed(texts)
            except gg.GateError as error:
                results[name] = error

        async with gate, anyio.create_task_group() as tg:
            for name, texts in (("a", ["alpha"]), ("long", ["fine", LONG]), ("c", ["c1", "c2"])):
                tg.start_soon(one, name, texts)
                await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()
        assert results["a"] == [vector_for("alpha", DIMS)]
        assert results["c"] == [vector_for("c1", DIMS), vector_for("c2", DIMS)]
        refused = results["long"]
        assert isinstance(refused, gg.BadRequestError) and refused.status == 400, refused
        assert "8192" in refused.message
        # one merged request, refused; then each caller's texts alone
        assert recording.sent[0] == ["alpha", "fine", LONG, "c1", "c2"]
        assert sorted(map(tuple, recording.sent[1:])) == [("alpha",), ("c1", "c2"), ("fine", LONG)]
        assert engine.ledger.snapshot().ok == 2

    run_virtual(main)


def test_a_lone_callers_refused_input_is_sent_once() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, recording, _ = _gate(clock)
        async with gate:
            try:
                await gate.embed([LONG, "short"])
            except gg.BadRequestError as error:
                assert error.status == 400
            else:
                raise AssertionError("the provider's 400 was not raised")
        assert len(recording.sent) == 1

    run_virtual(main)


def test_the_simulator_refuses_an_input_over_its_token_limit_and_none_switches_it_off() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, _, _ = _gate(clock, embedding_max_input_tokens=None)
        async with gate:
            assert len(await gate.embed([LONG])) == 1

    run_virtual(main)
