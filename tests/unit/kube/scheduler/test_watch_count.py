"""The connections ``gpupool control-plane`` sizes its client for cover every watch a replica
holds: counted from a scheduler's own informers, with and without DRA claims."""

from __future__ import annotations

import httpx2
import pytest

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.scheduler.config import LiveConfig
from gpupool.kube.scheduler.live import LiveScheduler
from gpupool.kube.scheduler.watch_count import scheduler_watches


@pytest.mark.parametrize("claims", [False, True])
def test_every_informer_of_a_replica_is_counted(claims: bool) -> None:
    api = KubeAPI(httpx2.AsyncClient(base_url="https://127.0.0.1:9"))
    scheduler = LiveScheduler(api, LiveConfig(identity="count", claims=claims))
    informers = [
        scheduler.pods,
        scheduler.nodes,
        scheduler.policies.pools,
        scheduler.policies.queues,
        scheduler.budgets.informer,
        *scheduler.volume_informers.informers(),
        *scheduler.intake.spread.informers(),
        *(informer for _, informer in scheduler.intake.gangs._all),  # both, where served
        *(scheduler.dra.informers() if scheduler.dra is not None else ()),
    ]
    assert len({id(informer) for informer in informers}) == scheduler_watches(claims)
