"""The one retry-with-backoff helper: its delays, and the loop that waits by them."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from gpupool.retry import Backoff, retry


@pytest.mark.parametrize(
    ("failures", "wait"), [(0, 0.0), (1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 5.0), (60, 5.0)]
)
def test_waits_double_from_the_first_up_to_the_cap(failures: int, wait: float) -> None:
    assert Backoff(0.5, 5.0).delay(failures) == wait


def test_the_delays_are_those_of_repeated_doubling() -> None:
    backoff, by_hand, expected = Backoff(0.05, 5.0), 0.05, []
    for _ in range(12):
        expected.append(by_hand)
        by_hand = min(by_hand * 2, 5.0)
    assert list(itertools.islice(backoff.delays(), 12)) == expected


@pytest.mark.parametrize("failures", [1_025, 10**6, 10**18])
def test_any_number_of_failures_gives_the_cap(failures: int) -> None:
    """A pod refused for days must not overflow the arithmetic (2.0 ** 1100 raises)."""
    assert Backoff(1.0, 10.0).delay(failures) == 10.0
    assert Backoff(1.0, 10.0, factor=3.0).delay(failures) == 10.0


def test_a_factor_of_one_is_a_constant_wait() -> None:
    assert list(itertools.islice(Backoff(2.0, 2.0, factor=1.0).delays(), 3)) == [2.0, 2.0, 2.0]


@pytest.mark.parametrize(
    ("first", "cap", "factor"), [(0.0, 1.0, 2.0), (2.0, 1.0, 2.0), (-1.0, 1.0, 2.0), (1, 2, 0.5)]
)
def test_bad_settings_are_refused(first: float, cap: float, factor: float) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(first, cap, factor)


def test_retry_returns_the_first_success_after_waiting_by_the_policy() -> None:
    outcomes: list[object] = [OSError("down"), OSError("still down"), "up"]
    failures: list[tuple[str, float]] = []

    async def attempt() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return str(outcome)

    async def main() -> tuple[str, float]:
        started = time.monotonic()
        value = await retry(
            attempt, Backoff(0.02, 0.5), lambda error, delay: failures.append((str(error), delay))
        )
        return value, time.monotonic() - started

    value, waited = asyncio.run(main())
    assert value == "up"
    assert failures == [("down", 0.02), ("still down", 0.04)]
    assert waited >= 0.06  # it slept both waits


def test_retry_lets_other_errors_through_at_once() -> None:
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise KeyError("not worth another try")

    async def main() -> None:
        await retry(attempt, Backoff(0.01, 0.1), lambda *_: None, retry_on=OSError)

    with pytest.raises(KeyError):
        asyncio.run(main())
    assert calls == 1


def test_retry_stops_when_cancelled_while_waiting() -> None:
    failures: list[float] = []

    async def attempt() -> None:
        raise OSError("down")

    async def main() -> None:
        task = asyncio.create_task(
            retry(attempt, Backoff(10.0, 10.0), lambda _, delay: failures.append(delay))
        )
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert failures == [10.0]
