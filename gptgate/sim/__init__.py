"""gptgate.sim — a simulated OpenAI-compatible serving stack, so nothing needs an API key.

Seeded and deterministic in content and token counts; time runs on a
:class:`~gptgate.clock.Clock` (a ``ScaledClock(100)`` runs 2-second calls 100× faster).

* :class:`SimEngine` — the model: slots and queues, prefill/decode timing with a USL knee,
  prefix cache with replicas, rate limits, faults, and a billing :class:`SimLedger`;
* :class:`SimTransport` — the engine behind an ``httpx2.AsyncClient``, in-process, streaming;
* :func:`create_app`, :class:`SimServer`, :func:`serve` — the engine over real HTTP (uvicorn);
  :class:`SimProcess` — the same in a child process that a test can SIGKILL and restart;
* :data:`PROFILES` / :func:`get_profile` — ``hosted``, ``tpu``, ``gpu``, ``cpu``, ``llamacpp``;
  :data:`ANTHROPIC_PROFILE` — the Messages API (gptgate/sim/anthropic.py);
  :data:`DEEPSEEK_PROFILE` — DeepSeek's usage and cache (gptgate/sim/deepseek.py);
  :data:`AZURE_PROFILE` — Azure OpenAI's paths, auth and 10 s windows (gptgate/sim/azure.py);
  ``get_profile("anthropic" | "azure" | "deepseek")`` names these three;
* :func:`family` / :func:`family_draw` — a seeded family of server shapes drawn from realistic
  ranges (docs/guide/simulator.md, "The server family");
* :class:`SimBatches` — OpenAI's Files + Batches API (``/v1/files``, ``/v1/batches``) in
  virtual time, with failures, expiry and cancellation (docs/batch.md); on the azure flavor
  at Azure's paths; :class:`SimMessageBatches` — Anthropic's Message Batches.
"""

from gptgate.sim.anthropic import ANTHROPIC_PROFILE
from gptgate.sim.anthropic_batches import SimMessageBatches
from gptgate.sim.app import create_app
from gptgate.sim.azure import AZURE_PROFILE
from gptgate.sim.deepseek import DEEPSEEK_PRICE, DEEPSEEK_PROFILE
from gptgate.sim.engine import EngineSnapshot, SimEngine, SimReset, SimResponse, SimStream
from gptgate.sim.family import FamilyDraw, call_latency_s, family, family_draw
from gptgate.sim.faults import FaultPlan
from gptgate.sim.ledger import LedgerSnapshot, RequestBill, SimLedger
from gptgate.sim.openai_batches import SimBatches, SimBatchPlan
from gptgate.sim.process import SimProcess
from gptgate.sim.profiles import PROFILES, SimProfile, get_profile
from gptgate.sim.server import SimServer, serve
from gptgate.sim.transport import SimTransport
from gptgate.sim.virtual import LoopClock, run_virtual

__all__ = [
    "ANTHROPIC_PROFILE",
    "AZURE_PROFILE",
    "DEEPSEEK_PRICE",
    "DEEPSEEK_PROFILE",
    "PROFILES",
    "EngineSnapshot",
    "FamilyDraw",
    "FaultPlan",
    "LedgerSnapshot",
    "LoopClock",
    "RequestBill",
    "SimBatchPlan",
    "SimBatches",
    "SimEngine",
    "SimLedger",
    "SimMessageBatches",
    "SimProcess",
    "SimProfile",
    "SimReset",
    "SimResponse",
    "SimServer",
    "SimStream",
    "SimTransport",
    "call_latency_s",
    "create_app",
    "family",
    "family_draw",
    "get_profile",
    "run_virtual",
    "serve",
]
