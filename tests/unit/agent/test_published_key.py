"""The agent's copy of the scheduler's public key: read rarely, read afresh on a failed check,
and never "no key, so trust"."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.agent.grants import HandoffRefusedError
from gpupool.agent.keys import PublishedKey
from gpupool.kube.client.api import ApiError
from gpupool.kube.objects.signing import PUBLIC_KEY_FIELD, RecordSigner


class ConfigMaps:
    """GET of the key's ConfigMap, as the API server answers it."""

    def __init__(self, signer: RecordSigner | None) -> None:
        self.signer = signer
        self.paths: list[str] = []

    async def get(self, path: str) -> dict[str, Any]:
        self.paths.append(path)
        if self.signer is None:
            raise ApiError(404, "NotFound", 'configmaps "gpupool-allocation-key" not found')
        return {"data": {PUBLIC_KEY_FIELD: self.signer.public_pem().decode()}}


async def test_the_key_is_read_once_per_period_and_afresh_when_asked() -> None:
    first, second = RecordSigner.generate(), RecordSigner.generate()
    api, now = ConfigMaps(first), [0.0]
    key = PublishedKey(api, "gpupool-system", period=300, clock=lambda: now[0])  # type: ignore[arg-type]
    assert (await key.verifier()).public_pem() == first.public_pem()
    await key.verifier()
    assert api.paths == ["/api/v1/namespaces/gpupool-system/configmaps/gpupool-allocation-key"]
    api.signer = second  # rotated
    assert (await key.verifier()).public_pem() == first.public_pem()
    assert (await key.verifier(fresh=True)).public_pem() == second.public_pem()
    now[0] = 301.0
    api.signer = None  # the ConfigMap is gone: the key read before stays in use
    assert (await key.verifier()).public_pem() == second.public_pem()


async def test_without_a_key_nothing_is_verified() -> None:
    key = PublishedKey(ConfigMaps(None), "gpupool-system")  # type: ignore[arg-type]
    with pytest.raises(
        HandoffRefusedError, match="configmap gpupool-system/gpupool-allocation-key"
    ):
        await key.verifier()
