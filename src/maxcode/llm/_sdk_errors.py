"""Turns the errors of the vendor SDKs (openai, anthropic) into ours.

Both SDKs raise the same family of exceptions (``APIStatusError`` with a status code and the
response, ``APIConnectionError``, ``APITimeoutError``), so one mapping serves both. Their own
retries are switched off (``max_retries=0``): the provider base class does the retrying. While
a streamed reply is read, the HTTP library's own errors come through unwrapped (a read timeout:
the server fell silent; a transport error: the connection dropped), and a stream can carry an
error event (a bare ``APIError``).
"""

from __future__ import annotations

import email.utils
import socket
import time
from collections.abc import Mapping
from types import ModuleType

from maxcode.llm._errors import (
    CallErrorKind,
    LLMConfigError,
    LLMRequestError,
    TransientError,
    UnreachableError,
    one_line,
)

_RETRYABLE_STATUS = {408, 409, 425, 429}


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """Seconds a server asked us to wait (``retry-after-ms`` or ``retry-after``), if any."""
    if not headers:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(float(milliseconds) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def server_message(exc: BaseException) -> str:
    """The server's own explanation from an error body, else the exception's text."""
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return one_line(inner["message"], 200)
        if isinstance(inner, str):
            return one_line(inner, 200)
        if isinstance(body.get("message"), str):
            return one_line(body["message"], 200)
    return one_line(str(getattr(exc, "message", "") or exc), 200)


def connection_never_made(exc: BaseException) -> bool:
    """Whether an error's causes show that no connection could be opened at all."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError | socket.gaierror):
            return True
        if type(cause).__name__ in {"ConnectError", "ConnectTimeout"}:
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _refusal_reason(exc: BaseException) -> str:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return "unknown host"
        if type(cause).__name__ == "ConnectTimeout":
            return "connection timed out"
        cause = cause.__cause__ or cause.__context__
    return "could not connect"


def translate(
    exc: Exception, sdk: ModuleType, *, spec: str, endpoint: str, key_hint: str
) -> Exception | None:
    """The error to raise for an SDK exception; None when ``exc`` is not an SDK error.

    ``key_hint`` names where the key comes from, for the authentication message.
    """
    if isinstance(exc, sdk.APIStatusError):
        status = int(exc.status_code)
        detail = server_message(exc)
        headers = getattr(exc.response, "headers", None)
        if status in (401, 403):
            return LLMConfigError(
                f"{spec}: the server at {endpoint} refused the key (HTTP {status}: {detail}); "
                f"check {key_hint}",
                kind="auth",
            )
        if status == 404:
            return LLMConfigError(
                f"{spec}: not found at {endpoint} (HTTP 404: {detail}); "
                "check the model name and the base URL",
                kind="not_found",
            )
        if status in _RETRYABLE_STATUS or status >= 500:
            kind: CallErrorKind = "rate_limit" if status == 429 else "server_error"
            return TransientError(kind, f"HTTP {status}: {detail}", retry_after_s(headers))
        return LLMRequestError(f"{spec}: the server rejected the request (HTTP {status}: {detail})")
    if isinstance(exc, sdk.APIConnectionError):  # APITimeoutError is one too
        if connection_never_made(exc):
            return UnreachableError(_refusal_reason(exc))
        if isinstance(exc, sdk.APITimeoutError):
            return TransientError("timeout", "the request timed out")
        return TransientError("connection", f"connection error: {server_message(exc)}")
    if isinstance(exc, sdk.APIResponseValidationError):
        return TransientError("malformed_response", f"unexpected reply: {server_message(exc)}")
    if isinstance(exc, sdk.APIError):  # an error event in a stream
        return TransientError("server_error", f"the stream broke off: {server_message(exc)}")
    transport = {cls.__name__ for cls in type(exc).__mro__}
    if "TimeoutException" in transport:
        return TransientError("timeout", "the reply stopped coming (read timeout)")
    if "TransportError" in transport:
        return TransientError("connection", f"the connection broke off: {type(exc).__name__}")
    if isinstance(exc, ValueError):
        # A body that is not JSON surfaces from the SDKs as a bare JSONDecodeError.
        return TransientError("malformed_response", f"the reply is not valid JSON ({exc})")
    return None
