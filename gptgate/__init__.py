"""gptgate — a client-side gateway for OpenAI-compatible chat APIs.

Adaptive concurrency per backend, pooled HTTP clients, prompt-cache warm-up and ramp windows,
micro-batching, scenario presets with the stream rule, routing across heterogeneous backends,
retries under a budget, a cost ledger and OpenTelemetry traces.
"""

from .baseline import Baseline, BaselineError
from .batch import BatchCounts, BatchJob
from .batch_api import BatchLimits
from .budget import Budget, BudgetStatus
from .clock import Clock, ScaledClock, SystemClock
from .config import Backend, GatewayConfig, Price
from .config_file import ConfigFileError, load_config
from .drift import DriftPolicy, DriftStatus
from .errors import (
    BackendError,
    BadRequestError,
    BatchCancelledError,
    BatchItemsError,
    BudgetExceededError,
    CircuitOpenError,
    GateError,
    GatewayClosedError,
    InvalidConfigError,
    MisaddressedRequestError,
    NoBackendError,
    OutOfFundsError,
    OverloadedError,
    RateLimitedError,
    RequestTimeout,
    RequestTooLargeError,
    SharedUnreachableError,
    StreamInterruptedError,
)
from .gateway import BackendStats, ChatStream, Gateway
from .hedge import HedgePolicy
from .planning import Band, Plan, plan
from .profiling import ProfileError, profile
from .providers import PROVIDERS, Provider
from .response_cache import ResponseCache, ResponseCacheStatistics
from .results import ChatResult, Outcome, Usage
from .scenarios import PRESETS, BatchPolicy, RampPolicy, Scenario
from .shared import Shared
from .sync import SyncChatStream, SyncGateway
from .sync_batch import SyncBatchJob
from .tiers import TierHeuristic, TierStats

__version__ = "0.1.0"

from .signals import ServerSignals

__all__ = [
    "PRESETS",
    "PROVIDERS",
    "Backend",
    "BackendError",
    "BackendStats",
    "BadRequestError",
    "Band",
    "Baseline",
    "BaselineError",
    "BatchCancelledError",
    "BatchCounts",
    "BatchItemsError",
    "BatchJob",
    "BatchLimits",
    "BatchPolicy",
    "Budget",
    "BudgetExceededError",
    "BudgetStatus",
    "ChatResult",
    "ChatStream",
    "CircuitOpenError",
    "Clock",
    "ConfigFileError",
    "DriftPolicy",
    "DriftStatus",
    "GateError",
    "Gateway",
    "GatewayClosedError",
    "GatewayConfig",
    "HedgePolicy",
    "InvalidConfigError",
    "MisaddressedRequestError",
    "NoBackendError",
    "OutOfFundsError",
    "Outcome",
    "OverloadedError",
    "Plan",
    "Price",
    "ProfileError",
    "Provider",
    "RampPolicy",
    "RateLimitedError",
    "RequestTimeout",
    "RequestTooLargeError",
    "ResponseCache",
    "ResponseCacheStatistics",
    "ScaledClock",
    "Scenario",
    "ServerSignals",
    "Shared",
    "SharedUnreachableError",
    "StreamInterruptedError",
    "SyncBatchJob",
    "SyncChatStream",
    "SyncGateway",
    "SystemClock",
    "TierHeuristic",
    "TierStats",
    "Usage",
    "__version__",
    "load_config",
    "plan",
    "profile",
]
