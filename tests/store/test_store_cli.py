"""``gpupool db upgrade``, ``gpupool audit`` and ``gpupool report cost`` on a seeded store.

The commands run as a user runs them (a subprocess), against SQLite and PostgreSQL; the golden
numbers below are worked out by hand from the seeded allocations.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupool.store.engine import open_store
from gpupool.store.records import Allocation, AuditAction, AuditEvent, UsageSample
from gpupool.store.writer import StoreWriter

T0 = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW = ["--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T04:00:00Z"]


def gpupool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def hours(h: float) -> datetime:
    return T0 + timedelta(hours=h)


def alloc(
    uid: str,
    ns: str,
    queue: str,
    pool: str,
    units: float,
    gib: float,
    start: float,
    end: float | None,
) -> Allocation:
    return Allocation(
        pod_uid=uid, namespace=ns, name=f"pod-{uid}", queue=queue, pool=pool, node="n1",
        kind="whole", units=units, memory_gib=gib, start=hours(start),
        end=None if end is None else hours(end),
    )  # fmt: skip


def audit_event(i: int, action: AuditAction, tenant: str) -> AuditEvent:
    return AuditEvent(
        time=hours(i), action=action, kind="Pod", namespace="ml", name=f"pod-{i}",
        uid=f"uid-{i}", tenant=tenant, pool="a100", reason=f"reason number {i}",
        values={"score": i}, actor="gpupool-0", key=f"{action.value}/uid-{i}",
    )  # fmt: skip


@pytest.fixture
async def seeded(store_url: str) -> str:
    """Three allocations in the window, one before it, usage for one, five audit events."""
    engine = await open_store(store_url)
    try:
        async with StoreWriter(engine, flush_interval=0.01) as writer:
            a1 = alloc("a1", "ml", "team-a", "a100", 1.0, 80.0, 0, None)
            await writer.allocation_started(a1)
            await writer.allocation_ended(a1, hours(2))
            await writer.allocation_started(alloc("a2", "ml", "team-a", "h100", 0.5, 40.0, 1, None))
            b1 = alloc("b1", "web<script>", "team-b", "a100", 1 / 7, 10.0, 0.5, None)
            await writer.allocation_ended(b1, hours(3.5))  # an end alone lands whole
            c1 = alloc("c1", "old", "team-c", "a100", 8, 640, -5, None)
            await writer.allocation_ended(c1, hours(-1))
            await writer.usage(UsageSample("a1", hours(0), sm_percent=50.0, memory_used_gib=40.0))
            for i, (action, tenant) in enumerate(
                [
                    (AuditAction.BIND, "team-a"),
                    (AuditAction.BIND, "team-b"),
                    (AuditAction.PREEMPT, "team-a"),
                    (AuditAction.REJECT, "team-b"),
                    (AuditAction.POLICY_CHANGE, ""),
                ]
            ):
                await writer.audit(audit_event(i, action, tenant))
    finally:
        await engine.dispose()
    return store_url


def test_db_upgrade_creates_the_schema(store_url: str) -> None:
    done = gpupool("db", "upgrade", "--url", store_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "schema at revision 0001"
    again = gpupool("db", "upgrade", "--url", store_url)
    assert again.stdout.strip() == "schema at revision 0001"


def test_cost_report_golden_values(seeded: str, tmp_path: Path) -> None:
    out = tmp_path / "cost.csv"
    done = gpupool("report", "cost", "--db", seeded, *WINDOW, "--by", "queue", "--csv", str(out))
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader(out.read_text().splitlines()))
    assert rows == [
        ["group", "pods", "gpu_hours", "gpu_memory_gib_hours", "sampled_gpu_hours",
         "used_gpu_hours", "gpu_efficiency", "memory_efficiency"],
        # a1: 1 GPU for 2 h, 50% used; a2: half a GPU from 1 h, still running, to 4 h
        ["team-a", "2", "3.500000", "280.000000", "2.000000", "1.000000", "0.500000", "0.500000"],
        # b1: a 1g.10gb MIG slice (1/7) for 3 h
        ["team-b", "1", "0.428571", "30.000000", "0.000000", "0.000000", "", ""],
        ["total", "3", "3.928571", "310.000000", "2.000000", "1.000000", "0.500000", "0.500000"],
    ]  # fmt: skip
    assert "team-a" in done.stdout
    assert "3.50" in done.stdout


def test_cost_report_by_pool_over_part_of_the_window(seeded: str, tmp_path: Path) -> None:
    out = tmp_path / "cost.csv"
    done = gpupool(
        "report", "cost", "--db", seeded, "--from", "2026-11-01T01:30:00", "--to",
        "2026-11-01T03:00:00+00:00", "--by", "pool", "--csv", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = {row[0]: row[2] for row in csv.reader(out.read_text().splitlines())}
    # a100: a1 for 0.5 h (1 unit) + b1 for 1.5 h (1/7); h100: a2 for 1.5 h (0.5 unit)
    assert table == {
        "group": "gpu_hours",
        "a100": f"{0.5 + 1.5 / 7:.6f}",
        "h100": "0.750000",
        "total": f"{0.5 + 1.5 / 7 + 0.75:.6f}",
    }


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)  # same code on both
def test_cost_report_html_is_self_contained_with_a_chart_per_team(
    seeded: str, tmp_path: Path
) -> None:
    out = tmp_path / "cost.html"
    done = gpupool(
        "report", "cost", "--db", seeded, *WINDOW, "--by", "namespace", "--html", str(out)
    )
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert page.count('src="data:image/png;base64,') == 2  # ml and web<script>
    assert "<h2>ml</h2>" in page
    assert "<h2>web&lt;script&gt;</h2>" in page
    assert "<script" not in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing from the network


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)  # same code on both
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "yesterday"], "error: --from: 'yesterday' is not"),
        (["--from", "2026-11-02", "--to", "2026-11-01"], "error: --to:"),
        (["--from", "2026-11-01", "--by", "team"], "error: --by: unknown grouping 'team'"),
    ],
)
def test_cost_report_bad_options_name_the_option(
    seeded: str, args: list[str], message: str
) -> None:
    done = gpupool("report", "cost", "--db", seeded, *args)
    assert done.returncode == 2
    assert done.stderr.strip().startswith(message), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_audit_filters_and_json(seeded: str) -> None:
    def names(*args: str) -> list[str]:
        done = gpupool("audit", "--db", seeded, "--json", *args)
        assert done.returncode == 0, done.stderr
        return [event["name"] for event in json.loads(done.stdout)]

    assert names() == [f"pod-{i}" for i in range(5)]
    assert names("--tenant", "team-b") == ["pod-1", "pod-3"]
    assert names("--action", "preempt,reject") == ["pod-2", "pod-3"]
    assert names("--action", "bind", "--action", "policy-change") == ["pod-0", "pod-1", "pod-4"]
    assert names("--pod", "uid-2") == ["pod-2"]
    assert names("--pod", "ml/pod-3") == ["pod-3"]
    assert names("--since", "2026-11-01T01:00:00Z", "--until", "2026-11-01T03:00:00Z") == [
        "pod-1",
        "pod-2",
    ]
    done = gpupool("audit", "--db", seeded, "--json", "--pod", "pod-2")
    (event,) = json.loads(done.stdout)
    assert event == {
        "time": "2026-11-01T02:00:00Z", "action": "preempt", "kind": "Pod", "namespace": "ml",
        "name": "pod-2", "uid": "uid-2", "tenant": "team-a", "pool": "a100",
        "reason": "reason number 2", "values": {"score": 2}, "actor": "gpupool-0",
        "key": "preempt/uid-2",
    }  # fmt: skip


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)  # same code on both
def test_audit_table_for_people(seeded: str) -> None:
    done = gpupool("audit", "--db", seeded, "--tenant", "team-a")
    assert done.returncode == 0, done.stderr
    assert "2 audit event(s)" in done.stdout
    assert "reason number 2" in done.stdout
    assert "preempt" in done.stdout


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)  # same code on both
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--action", "explode"], "error: --action: unknown action 'explode'"),
        (["--since", "soon"], "error: --since: 'soon' is not"),
        (["--limit", "0"], "error: --limit: must be >= 1"),
    ],
)
def test_audit_bad_options_name_the_option(seeded: str, args: list[str], message: str) -> None:
    done = gpupool("audit", "--db", seeded, *args)
    assert done.returncode == 2
    assert done.stderr.strip().startswith(message), done.stderr


def test_a_missing_store_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    done = gpupool("audit", "--db", f"sqlite:///{missing}")
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: --db: no such SQLite file {missing}"
    assert not missing.exists()
    done = gpupool("report", "cost", "--db", "mysql://x/y", "--from", "2026-11-01")
    assert done.stderr.strip().startswith("error: --db: 'mysql' is not supported")
    done = gpupool("db", "upgrade", "--url", "postgresql+asyncpg://u@127.0.0.1:1/db")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: --url: cannot reach the database"), done.stderr
