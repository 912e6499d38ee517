"""Fresh: answers reused while fresh, one build for concurrent callers, spacing by build time."""

from __future__ import annotations

import asyncio

from gpupool.api.reuse import Fresh


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_reused_while_fresh_then_rebuilt() -> None:
    clock = Clock()
    fresh: Fresh[int] = Fresh(min_age=1.0, spacing=4.0, clock=clock)
    builds = 0

    async def build() -> int:
        nonlocal builds
        builds += 1
        return builds

    assert await fresh.get("k", build) == 1
    clock.now += 0.5
    assert await fresh.get("k", build) == 1
    assert await fresh.get("other", build) == 2  # keys are separate
    clock.now += 0.6
    assert await fresh.get("k", build) == 3


async def test_a_slow_build_is_reused_longer() -> None:
    clock = Clock()
    fresh: Fresh[str] = Fresh(min_age=1.0, spacing=4.0, clock=clock)

    async def slow() -> str:
        clock.now += 2.0  # took 2 s: reused for 8 s
        return "map"

    await fresh.get("k", slow)
    clock.now += 7.0
    assert await fresh.get("k", slow) == "map"
    before = clock.now
    clock.now += 1.5
    await fresh.get("k", slow)
    assert clock.now == before + 1.5 + 2.0  # rebuilt this time


async def test_concurrent_callers_share_one_build() -> None:
    fresh: Fresh[int] = Fresh(clock=Clock())
    started = 0
    gate = asyncio.Event()

    async def build() -> int:
        nonlocal started
        started += 1
        await gate.wait()
        return 7

    waiting = [asyncio.create_task(fresh.get("k", build)) for _ in range(5)]
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(*waiting) == [7] * 5
    assert started == 1
