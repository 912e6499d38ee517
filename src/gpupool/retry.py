"""Retry with exponential backoff: the one delay policy, and the one retry loop.

Every process retries something that may be away for a while (the API server restarting, the
database down, a refused eviction): waiting a fixed short time hammers a server that is trying
to come back, waiting a fixed long time makes recovery slow. :class:`Backoff` is the policy
(first wait, doubling, capped), pure, so the scheduling queue uses it for its per-pod waits
too; :func:`retry` is the loop for the common shape "await until it succeeds, log each
failure". Each caller keeps its own timings (named where it builds its :class:`Backoff`).

This module imports nothing of gpupool, so every layer may use it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

_MAX_EXPONENT = 1023
"""Beyond this ``2.0 ** n`` overflows a float; any cap is reached long before."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits of ``first * factor ** (n - 1)`` seconds after the n-th failure, at most ``cap``.

    Attributes:
        first: Wait after the first failure, seconds.
        cap: Longest wait, seconds.
        factor: Growth per failure (1: a constant wait).
    """

    first: float
    cap: float
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap:
            raise ValueError(f"backoff: need 0 < first <= cap, got {self.first} and {self.cap}")
        if self.factor < 1:
            raise ValueError(f"backoff: factor must be at least 1, got {self.factor}")

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failures in a row (0 for none).

        Any count is accepted: a pod retried for days must not overflow the arithmetic.
        """
        if failures <= 0:
            return 0.0
        exponent = min(failures - 1, _MAX_EXPONENT)
        try:
            grown = self.first * self.factor**exponent
        except OverflowError:
            return self.cap
        return min(grown, self.cap)

    def delays(self) -> Iterator[float]:
        """The waits after the first, second, ... failure; endless."""
        return (self.delay(failures) for failures in itertools.count(1))


async def retry(
    attempt: Callable[[], Awaitable[T]],
    backoff: Backoff,
    on_failure: Callable[[Exception, float], None],
    retry_on: type[Exception] | tuple[type[Exception], ...] = Exception,
) -> T:
    """Await ``attempt()`` until it returns, waiting by ``backoff`` after each failure.

    Args:
        attempt: One try.
        backoff: The waits.
        on_failure: Called with the error and the coming wait before each wait (say why).
        retry_on: The errors worth another try; any other propagates at once, as does
            cancellation.
    """
    failures = 0
    while True:
        try:
            return await attempt()
        except retry_on as error:
            failures += 1
            on_failure(error, backoff.delay(failures))
        await asyncio.sleep(backoff.delay(failures))
