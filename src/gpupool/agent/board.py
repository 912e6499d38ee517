"""The devices currently advertised, shared by the inventory loop and the ListAndWatch streams.

ListAndWatch is a long-lived stream per resource: the kubelet keeps it open and takes every
message as the full device list. A version counter and a condition let each stream wake up when
the inventory changed (a GPU broke, MIG was re-partitioned) and send only then.
"""

from __future__ import annotations

import asyncio

from gpupool.agent.devices import AdvertisedDevice


class DeviceBoard:
    """Advertised devices per resource, with change notification."""

    def __init__(self) -> None:
        self._devices: dict[str, tuple[AdvertisedDevice, ...]] = {}
        self._version = 0
        self._changed = asyncio.Condition()

    @property
    def version(self) -> int:
        """Bumped on every change."""
        return self._version

    def resources(self) -> tuple[str, ...]:
        """Resource names with at least one device."""
        return tuple(sorted(name for name, devices in self._devices.items() if devices))

    def devices(self, resource: str) -> tuple[AdvertisedDevice, ...]:
        """The current devices of one resource."""
        return self._devices.get(resource, ())

    async def update(self, devices: dict[str, tuple[AdvertisedDevice, ...]]) -> bool:
        """Replace the devices; wake the streams if anything changed."""
        if devices == self._devices:
            return False
        async with self._changed:
            self._devices = dict(devices)
            self._version += 1
            self._changed.notify_all()
        return True

    async def wait_change(self, seen: int) -> int:
        """Wait until the version differs from ``seen``; return the new version."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._version != seen)
            return self._version
