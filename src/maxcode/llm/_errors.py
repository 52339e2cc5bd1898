"""Errors of the LLM layer.

Every error a user can cause (a bad key, an unknown model, a server that is not there) is a
``MaxcodeError``: the command line prints its one-line message and exits 2. ``BudgetExhausted``
is deliberately not one: it is the normal end of a search that spent what it was given, and
the search loop catches it to stop cleanly.
"""

from __future__ import annotations

from typing import Literal

from maxcode.errors import MaxcodeError

CallErrorKind = Literal[
    "auth",
    "not_found",
    "unreachable",
    "bad_request",
    "rate_limit",
    "server_error",
    "timeout",
    "connection",
    "malformed_response",
    "config",
    "cancelled",
    "other",
]


def one_line(text: str, limit: int = 300) -> str:
    """Fold a message onto one line and bound its length (server bodies can be long)."""
    folded = " ".join(text.split())
    return folded if len(folded) <= limit else folded[: limit - 3] + "..."


class LLMError(MaxcodeError):
    """A call to a language model failed; ``kind`` says how."""

    def __init__(self, message: str, kind: CallErrorKind = "other") -> None:
        super().__init__(one_line(message, 500))
        self.kind: CallErrorKind = kind


class LLMConfigError(LLMError):
    """The configuration is wrong: bad key, unknown model or provider, unreachable server."""

    def __init__(self, message: str, kind: CallErrorKind = "config") -> None:
        super().__init__(message, kind)


class ProviderNotInstalled(LLMConfigError):
    """The SDK a provider needs is not installed (``pip install 'maxcode[anthropic]'``)."""


class LLMRequestError(LLMError):
    """The server rejected this request (HTTP 400/422, e.g. a prompt longer than the context)."""

    def __init__(self, message: str, kind: CallErrorKind = "bad_request") -> None:
        super().__init__(message, kind)


class LLMUnavailableError(LLMError):
    """The server kept failing (429, 5xx, timeouts, malformed replies) through every retry."""


class BudgetExhausted(Exception):
    """A call was refused because it could take the run past its budget; nothing was sent."""

    def __init__(self, message: str, limit: Literal["usd", "tokens", "calls"]) -> None:
        super().__init__(message)
        self.limit: Literal["usd", "tokens", "calls"] = limit
        """Which limit would have been crossed."""


class TransientError(Exception):
    """Internal: one attempt failed in a way worth retrying (never leaves the provider)."""

    def __init__(
        self, kind: CallErrorKind, message: str, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.kind: CallErrorKind = kind
        self.message = one_line(message)
        self.retry_after_s = retry_after_s


class UnreachableError(TransientError):
    """Internal: the connection itself could not be made (refused, no route, DNS)."""

    def __init__(self, message: str) -> None:
        super().__init__("unreachable", message)
