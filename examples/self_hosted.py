"""Self-hosted servers: ``provider="vllm"``, ``"llamacpp"``, ``"ollama"`` — what a preset
sets, what it refuses, and two servers of your own behind one gateway.

What it shows
    * ``gg.Backend(provider="vllm", model=...)`` with no ``base_url``: the preset's
      ``http://localhost:8000/v1`` (llama.cpp's ``:8080``, Ollama's ``:11434``, …) and the
      preset's key variable (``VLLM_API_KEY``, ``LLAMA_API_KEY``: never ``OPENAI_API_KEY``,
      which a server of your own has no business receiving); ``gg.PROVIDERS`` lists them;
    * a parameter the server silently ignores is refused before anything is sent — Ollama's
      OpenAI endpoint drops ``num_ctx`` and truncates the prompt to its default context
      without a word — and ``extra_body=`` sends it anyway when you mean it;
    * a vLLM, a llama.cpp (llama-server's own wire: ``timings``, its error shapes) and an
      Ollama server sharing 40 calls, each billed as the server billed it.

How to run
    python examples/self_hosted.py

No GPU, no network: the servers are gptgate's simulator in this process (the llama.cpp one
with its ``llamacpp`` flavor), in virtual time: a sleep of the simulated servers takes no
wall time. Against your own: drop ``transport=`` and ``clock=``, run ``main()`` with
``asyncio.run``, and give ``base_url=`` where your server is not on localhost's default
port.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, SimTransport, run_virtual


async def main() -> None:
    for name in ("vllm", "sglang", "llamacpp", "ollama", "lmstudio"):
        preset = gg.PROVIDERS[name]
        print(f"preset {name:<9} -> {preset.base_url:<28} key from ${preset.api_key_env}")

    clock = LoopClock()  # virtual time (run_virtual): the same run every time
    vllm_engine = SimEngine("gpu", clock=clock, seed=1)
    llama_engine = SimEngine("llamacpp", clock=clock, seed=2)
    vllm = gg.Backend(
        name="vllm", provider="vllm", model=vllm_engine.profile.model, concurrency=16,
        transport=SimTransport(vllm_engine),
    )
    llama = gg.Backend(
        name="llama", provider="llamacpp", model=llama_engine.profile.model, hardware="cpu",
        concurrency=4, transport=SimTransport(llama_engine),
    )
    ollama_engine = SimEngine("cpu", clock=clock, seed=3)
    ollama = gg.Backend(
        name="ollama", provider="ollama", model=ollama_engine.profile.model, hardware="cpu",
        concurrency=4, transport=SimTransport(ollama_engine),
    )
    messages = [{"role": "user", "content": "Why run a model on your own server?"}]
    async with gg.Gateway([vllm, llama, ollama], clock=clock, seed=7) as gate:
        try:
            await gate.chat(messages, backend="ollama", num_ctx=32768)
        except gg.BadRequestError as error:
            print(f"refused -> {error.message[:96]}...")
        sent = await gate.chat(
            messages, backend="ollama", max_tokens=20, extra_body={"num_ctx": 32768}
        )
        print(f"sent    -> with extra_body: {sent.text[:40]!r}...")

        results = await asyncio.gather(*(
            gate.chat([{"role": "user", "content": f"Tip #{i} for a small GPU?"}],
                      max_tokens=30, backend=None if i % 4 else "llama")
            for i in range(40)
        ))
        served = Counter(r.backend for r in results)
        stats = gate.stats()
        engines = {"vllm": vllm_engine, "llama": llama_engine, "ollama": ollama_engine}
        for name, engine in engines.items():
            ours = stats[name].input_tokens + stats[name].output_tokens
            print(f"{name:<7} -> {served[name]} of the 40 calls, ledger {ours} tokens, "
                  f"server billed {engine.ledger.snapshot().billed_tokens}")
        failed = sum(stats[name].failures for name in engines)
        print(f"self-hosted: 40 calls, {failed} failed, on {len(served)} servers")


if __name__ == "__main__":
    run_virtual(main)
