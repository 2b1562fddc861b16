"""Classifying a foreign exception never imports an SDK on the event loop.

``classify_exception`` looked up openai's and anthropic's exception classes by importing
them, on the gateway's loop, the first time any exception was classified — a guarded
function's error, an embeddings request's transport error. ``import anthropic`` takes 1–2 s:
every call of the gateway (every Flask thread of a ``SyncGateway``, an async app's whole loop)
stood still meanwhile. An SDK's exception can only exist once its SDK was imported, so only
the SDKs already imported are looked at — and one imported later is seen then.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import sys
    import httpx2
    from gptgate import BackendError, RequestTimeout
    from gptgate.guard import classify_exception

    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/embeddings")
    view = classify_exception(httpx2.ReadError("reset", request=request), "b")
    assert type(view) is BackendError, view
    assert "anthropic" not in sys.modules and "openai" not in sys.modules, "an SDK was imported"

    import openai  # the app imports its SDK later: its errors are still classified
    sdk_request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    assert type(classify_exception(openai.APIConnectionError(request=sdk_request), "b")) \\
        is BackendError
    assert type(classify_exception(openai.APITimeoutError(request=sdk_request), "b")) \\
        is RequestTimeout
    assert type(classify_exception(ValueError("the app's own"), "b")).__name__ == "GateError"
    print("ok")
    """
)


def test_classifying_imports_no_sdk_and_sees_one_imported_later() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
