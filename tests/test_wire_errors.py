"""HTTP statuses and transport exceptions mapped to typed errors, with secrets scrubbed."""

from __future__ import annotations

import json

import anyio
import httpx2
import pytest

from gptgate.errors import (
    BackendError,
    BadRequestError,
    GateError,
    OverloadedError,
    RateLimitedError,
    RequestTimeout,
)
from gptgate.wire import error_for_exception, error_for_status, scrub_secrets

KEY = "sk-proj-AbCdEf0123456789_secretKEYmaterial-XYZ"


def openai_error(
    message: str, kind: str = "invalid_request_error", code: str | None = None
) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


@pytest.mark.parametrize(
    ("status", "cls", "retryable"),
    [
        (400, BadRequestError, False),
        (401, BadRequestError, False),
        (403, BadRequestError, False),
        (404, BadRequestError, False),
        (408, RequestTimeout, True),
        (409, BackendError, True),
        (413, BadRequestError, False),
        (422, BadRequestError, False),
        (429, RateLimitedError, True),
        (500, BackendError, True),
        (502, BackendError, True),
        (503, BackendError, True),
        (504, BackendError, True),
        (529, BackendError, True),
    ],
)
def test_status_mapping(status: int, cls: type[GateError], retryable: bool) -> None:
    error = error_for_status(status, {}, openai_error("nope"), backend="b")
    assert type(error) is cls
    assert error.retryable is retryable
    assert error.status == status
    assert error.backend == "b"
    assert "nope" in error.message


def test_retry_after_request_id_and_should_retry_propagate() -> None:
    headers = httpx2.Headers(
        {"x-request-id": "req_42", "retry-after-ms": "750", "x-should-retry": "false"}
    )
    error = error_for_status(429, headers, openai_error("Rate limit reached"), backend="b")
    assert isinstance(error, RateLimitedError)
    assert error.request_id == "req_42"
    assert error.retry_after == 0.75
    assert error.should_retry is False
    assert error.retryable is False  # the server's verdict beats the class default
    assert "req_42" in str(error)


def test_should_retry_true_makes_a_bad_request_retryable() -> None:
    error = error_for_status(400, {"x-should-retry": "true"}, b"", backend="b")
    assert isinstance(error, BadRequestError)
    assert error.retryable is True


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (openai_error("Invalid 'messages'"), "Invalid 'messages'"),
        (b'{"error": "model not loaded"}', "model not loaded"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b'{"detail": [{"loc": ["body", "model"], "msg": "field required"}]}', "field required"),
        (b'{"message": "upstream timeout", "code": 504}', "upstream timeout"),
        (b'{"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}', "bad"),
        (b"<html><body>502 Bad Gateway</body></html>", "502 Bad Gateway"),
        (b"Service Unavailable", "Service Unavailable"),
    ],
)
def test_message_extraction(body: bytes, message: str) -> None:
    assert message in error_for_status(500, {}, body, backend="b").message


def test_non_json_body_uses_its_first_200_bytes() -> None:
    error = error_for_status(502, {}, b"x" * 150 + b"y" * 1000, backend="b")
    assert error.message.count("x") == 150
    assert error.message.count("y") == 50


def test_long_json_message_is_truncated_to_500_chars() -> None:
    error = error_for_status(400, {}, openai_error("z" * 5000), backend="b")
    assert len(error.message) <= 500
    assert error.message.endswith("...")


def test_empty_body_still_says_what_happened() -> None:
    error = error_for_status(503, {}, b"", backend="b")
    assert error.message == "backend error"
    assert str(error) == "backend error (backend=b, status=503)"


def test_error_code_is_kept_as_a_tag() -> None:
    error = error_for_status(
        429,
        {},
        openai_error("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
        backend="b",
    )
    assert error.message == "rate limited: [rate_limit_exceeded] Rate limit reached for requests"


def test_llama_cpp_context_overflow_is_a_bad_request() -> None:
    body = json.dumps(
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size (4096 tokens)",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 5000,
                "n_ctx": 4096,
            }
        }
    ).encode()
    error = error_for_status(400, {}, body, backend="llama")
    assert isinstance(error, BadRequestError)
    assert "exceed_context_size_error" in error.message
    assert error.retryable is False


def test_llama_cpp_loading_model_is_a_retryable_backend_error() -> None:
    body = b'{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}'
    error = error_for_status(503, {}, body, backend="llama")
    assert isinstance(error, BackendError)
    assert error.retryable is True
    assert "Loading model" in error.message


@pytest.mark.parametrize(("status", "lead"), [(401, "authentication failed"), (403, "permission")])
def test_auth_failures_say_so_and_never_echo_the_key(status: int, lead: str) -> None:
    body = openai_error(f"Incorrect API key provided: {KEY}.", code="invalid_api_key")
    headers = {"authorization": f"Bearer {KEY}", "x-request-id": "req_1"}
    error = error_for_status(status, headers, body, backend="b")
    assert error.message.startswith(lead)
    for text in (str(error), repr(error), error.message):
        assert KEY not in text
        assert "secretKEY" not in text


@pytest.mark.parametrize(
    "body",
    [
        openai_error(f"Invalid key {KEY} for model"),
        f'{{"detail": "Authorization: Bearer {KEY}"}}'.encode(),
        f"upstream said api_key={KEY}&x=1".encode(),
        f'{{"error": "bad config {{\\"api_key\\": \\"{KEY}\\"}}"}}'.encode(),
    ],
)
def test_secrets_in_server_error_bodies_are_scrubbed(body: bytes) -> None:
    error = error_for_status(500, {}, body, backend="b")
    assert KEY not in str(error)
    assert KEY not in repr(error)
    assert "secretKEY" not in repr(error)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"key {KEY} rejected", KEY),
        ("Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl"),
        ("bearer eyJhbGciOi", "eyJhbGciOi"),
        ("api_key=hunter2hunter2", "hunter2hunter2"),
        ("x-api-key: 123456789abc", "123456789abc"),
        ('{"api_key": "s3cr3t-value"}', "s3cr3t-value"),
        ("password=pa55word", "pa55word"),
        ("access_token=ya29.a0AfH6SMB", "ya29.a0AfH6SMB"),
        ("use AIzaSyA1234567890abcdefghijklmnop", "AIzaSyA1234567890abcdefghijklmnop"),
        ("token hf_abcdefghijklmnopqrstuvwxyz123", "hf_abcdefghijklmnopqrstuvwxyz123"),
        ("sk-ant-api03-abcdefABCDEF123456", "abcdefABCDEF123456"),
        ("masked sk-proj-****abcd", "****abcd"),
    ],
)
def test_scrub_secrets(text: str, secret: str) -> None:
    assert secret not in scrub_secrets(text)


def test_scrub_secrets_keeps_ordinary_text() -> None:
    text = "Invalid value for 'temperature': must be <= 2. Ask a skilled task-runner."
    assert scrub_secrets(text) == text


@pytest.mark.parametrize(
    ("exc", "cls", "reason", "billed"),
    [
        (httpx2.ConnectTimeout("timed out"), RequestTimeout, "connect timeout", False),
        (httpx2.PoolTimeout("pool"), RequestTimeout, "pooled connection", False),
        (httpx2.ReadTimeout("read"), RequestTimeout, "read timeout", True),
        (httpx2.WriteTimeout("write"), RequestTimeout, "write timeout", False),
        (httpx2.ConnectError("refused"), BackendError, "connection failed", False),
        (httpx2.RemoteProtocolError("bad"), BackendError, "protocol error", False),
        (httpx2.LocalProtocolError("bad"), BackendError, "protocol error", False),
        (httpx2.ReadError("reset"), BackendError, "reading", False),
        (httpx2.WriteError("broken pipe"), BackendError, "writing", False),
        (httpx2.NetworkError("net"), BackendError, "transport error", False),
        (httpx2.ProxyError("proxy"), BackendError, "transport error", False),
        (anyio.EndOfStream(), BackendError, "connection closed", False),
        (anyio.BrokenResourceError(), BackendError, "connection closed", False),
        (TimeoutError(), RequestTimeout, "timeout", False),
        (OSError("weird"), BackendError, "request failed", False),
    ],
)
def test_exception_mapping(
    exc: BaseException, cls: type[GateError], reason: str, billed: bool
) -> None:
    error = error_for_exception(exc, backend="b")
    assert type(error) is cls
    assert reason in error.message
    assert type(exc).__name__ in error.message
    assert error.retryable is True
    assert error.billed is billed
    assert error.backend == "b"


def test_exception_message_never_carries_the_url_or_headers() -> None:
    request = httpx2.Request(
        "POST",
        "https://api.example.com/v1/chat/completions?api_key=QUERYSECRET",
        headers={"Authorization": f"Bearer {KEY}"},
    )
    exc = httpx2.ConnectError(
        "failed for https://api.example.com/v1/chat/completions?api_key=QUERYSECRET",
        request=request,
    )
    error = error_for_exception(exc, backend="b")
    for text in (str(error), repr(error)):
        assert "QUERYSECRET" not in text
        assert KEY not in text
        assert "/v1/chat/completions" not in text and "https://" not in text
    # the server by host and port only, as spans export it (gptgate/wire/connect_hint.py)
    assert "api.example.com:443" in error.message


def test_gate_errors_pass_through() -> None:
    original = OverloadedError("queue full")
    assert error_for_exception(original, backend="b") is original
    assert original.backend == "b"
    mine = RateLimitedError("x", backend="a")
    assert error_for_exception(mine, backend="b").backend == "a"
