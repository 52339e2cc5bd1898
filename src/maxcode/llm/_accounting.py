"""Where calls are accounted: the call log every call goes to, and the run's budget."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from maxcode.llm._errors import BudgetExhausted
from maxcode.llm._records import LLMCall


@runtime_checkable
class CallLog(Protocol):
    """Receives every call, successful, failed or cached (the run store implements it)."""

    def record(self, call: LLMCall) -> None:
        """Keep one call; must not raise for an ordinary call."""


class InMemoryCallLog:
    """A call log that keeps the calls in a list (tests, the offline demo, ``llm check``)."""

    def __init__(self) -> None:
        self.calls: list[LLMCall] = []
        self._lock = threading.Lock()

    def record(self, call: LLMCall) -> None:
        """Append one call."""
        with self._lock:
            self.calls.append(call)

    @property
    def prompt_tokens(self) -> int:
        """Input tokens over every call (unreported usage counts as 0)."""
        return sum(call.prompt_tokens or 0 for call in self.calls)

    @property
    def completion_tokens(self) -> int:
        """Output tokens over every call (unreported usage counts as 0)."""
        return sum(call.completion_tokens or 0 for call in self.calls)

    @property
    def cost_usd(self) -> float | None:
        """Total price; None when any call's price was unknown."""
        costs = [call.cost_usd for call in self.calls]
        return None if any(cost is None for cost in costs) else sum(c or 0.0 for c in costs)


@dataclass(frozen=True)
class Reservation:
    """What one call in flight holds of the budget until it settles."""

    reservation_id: int
    """Identifies the reservation within its budget."""
    tokens: int
    """Tokens held: an upper estimate of the call's usage."""
    usd: float
    """USD held: the price of ``tokens`` (0 when the budget has no USD limit)."""


class Budget:
    """Limits on a run's spending, enforced before each call is sent.

    A call first reserves an upper estimate of its usage; the reservation counts as spent
    while the call is in flight, so concurrent calls cannot together overshoot. When the call
    ends it settles: the reservation is replaced by what the call really used. A call that
    would cross a limit is refused with ``BudgetExhausted`` before anything is sent.
    """

    def __init__(
        self,
        max_usd: float | None = None,
        max_tokens: int | None = None,
        max_calls: int | None = None,
    ) -> None:
        self.max_usd = max_usd
        self.max_tokens = max_tokens
        self.max_calls = max_calls
        self.spent_usd = 0.0
        """USD spent by settled calls."""
        self.spent_tokens = 0
        """Tokens used by settled calls."""
        self.calls = 0
        """Calls started (in flight or settled)."""
        self._held: dict[int, Reservation] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def in_flight(self) -> int:
        """Calls that reserved and have not settled."""
        return len(self._held)

    @property
    def reserved_tokens(self) -> int:
        """Tokens held by calls in flight."""
        return sum(held.tokens for held in self._held.values())

    @property
    def reserved_usd(self) -> float:
        """USD held by calls in flight."""
        return sum(held.usd for held in self._held.values())

    def reserve(self, tokens: int, usd: float) -> Reservation:
        """Hold room for one call, or raise ``BudgetExhausted`` if it might not fit."""
        with self._lock:
            if self.max_calls is not None and self.calls + 1 > self.max_calls:
                raise BudgetExhausted(
                    f"call budget exhausted: {self.calls} of {self.max_calls} calls used",
                    "calls",
                )
            if self.max_tokens is not None:
                committed = self.spent_tokens + self.reserved_tokens
                if committed + tokens > self.max_tokens:
                    raise BudgetExhausted(
                        f"token budget exhausted: {self.spent_tokens} used and "
                        f"{self.reserved_tokens} held by calls in flight of {self.max_tokens}; "
                        f"the next call may need {tokens}",
                        "tokens",
                    )
            if self.max_usd is not None:
                committed_usd = self.spent_usd + self.reserved_usd
                if committed_usd + usd > self.max_usd:
                    raise BudgetExhausted(
                        f"USD budget exhausted: ${self.spent_usd:.4f} spent and "
                        f"${self.reserved_usd:.4f} held by calls in flight of "
                        f"${self.max_usd:.4f}; the next call may cost ${usd:.4f}",
                        "usd",
                    )
            reservation = Reservation(next(self._ids), tokens, usd)
            self._held[reservation.reservation_id] = reservation
            self.calls += 1
            return reservation

    def settle(self, reservation: Reservation, tokens: int, usd: float) -> None:
        """Replace a reservation by what the call used (idempotent per reservation)."""
        with self._lock:
            if self._held.pop(reservation.reservation_id, None) is None:
                return
            self.spent_tokens += tokens
            self.spent_usd += usd
