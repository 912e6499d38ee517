"""The ledger's reconciliation never holds governance up: a store that cannot answer is retried."""

from __future__ import annotations

from pathlib import Path

import httpx2

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.governance.ledger import QueueLedger
from gpupool.store.engine import create_engine, open_store
from gpupool.store.writer import StoreWriter

NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers


async def test_a_store_without_its_schema_yet_is_reconciled_on_a_later_pass(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"
    api = KubeAPI(httpx2.AsyncClient(base_url=NOWHERE))  # no open allocation to look up
    bare = create_engine(url)  # the control plane migrates while it already schedules
    ledger = QueueLedger(StoreWriter(bare))
    try:
        await ledger.reconcile(api, {})  # no tables: logged, not raised
        assert not ledger.reconciled
        migrated = await open_store(url)
        ledger.writer = StoreWriter(migrated)
        await ledger.reconcile(api, {})
        assert ledger.reconciled
        await migrated.dispose()
    finally:
        await bare.dispose()
        await api.close()


async def test_without_a_store_there_is_nothing_to_reconcile() -> None:
    ledger = QueueLedger(None)
    api = KubeAPI(httpx2.AsyncClient(base_url=NOWHERE))
    try:
        await ledger.reconcile(api, {})
    finally:
        await api.close()
    assert ledger.reconciled
