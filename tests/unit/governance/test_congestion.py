"""The congestion-by-class rules and ledger: who is charged for a wait, and that it adds up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.governance.congestion import (
    PREEMPTION,
    Party,
    Share,
    eviction_shares,
    proportional,
    wait_shares,
)
from gpupool.governance.congestion_ledger import CongestionError, CongestionLedger
from gpupool.scheduling.wait_cause import WaitCause, WaitKind, waiting_behind

TRAIN = Party("training", "research")
SERVE = Party("serving", "prod")
DEV = Party("dev", "research")
PARTIES = {"big": TRAIN, "api": SERVE, "nb": DEV}
HOLDING = {TRAIN: 3000.0, SERVE: 1000.0}


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        pytest.param(
            WaitCause(WaitKind.RESERVATION, pods=("big",), node="n1"),
            (Share(TRAIN, 1.0),),
            id="reservation-charges-the-holder",
        ),
        pytest.param(
            waiting_behind(("big", "a100"), ("api", "h100")),
            (Share(TRAIN, 0.5), Share(SERVE, 0.5)),
            id="behind-splits-equally-between-heads",
        ),
        pytest.param(
            WaitCause(WaitKind.RESOURCES, "0/4 nodes are available: 4 Insufficient gpu."),
            (Share(SERVE, 0.25), Share(TRAIN, 0.75)),
            id="resources-in-proportion-to-gpus-held",
        ),
        pytest.param(
            WaitCause(WaitKind.QUOTA, "queue research at its ceiling"),
            (Share(DEV, 1.0),),
            id="quota-is-self-imposed",
        ),
        pytest.param(
            WaitCause(WaitKind.PREEMPTING, node="n1"),
            (Share(DEV, 1.0),),
            id="preempting-is-self-imposed",
        ),
        pytest.param(
            WaitCause(WaitKind.OTHER, "preempted for big"),
            (Share(None, 1.0),),
            id="other-is-unattributed",
        ),
        pytest.param(
            WaitCause(WaitKind.RESERVATION, pods=("gone",), node="n1"),
            (Share(None, 1.0),),
            id="unknown-holder-is-unattributed",
        ),
    ],
)
def test_wait_shares_names_the_culprit_of_each_kind(
    cause: WaitCause, expected: tuple[Share, ...]
) -> None:
    assert wait_shares(DEV, cause, PARTIES, proportional(HOLDING)) == expected


def test_resources_with_nothing_held_is_unattributed() -> None:
    assert proportional({}) == (Share(None, 1.0),)


def test_share_of_own_party_is_not_imposed() -> None:
    assert not Share(DEV, 1.0).imposed_on(DEV)
    assert Share(TRAIN, 1.0).imposed_on(DEV)
    assert not Share(None, 1.0).imposed_on(DEV)


def test_negative_lost_time_names_the_field() -> None:
    with pytest.raises(ValueError, match="lost_seconds"):
        eviction_shares(TRAIN, [(DEV, -1.0)])


def _reservation_wait(name: str = "nb") -> tuple[str, Party, WaitCause]:
    return name, DEV, WaitCause(WaitKind.RESERVATION, pods=("big",), node="n1")


def test_a_reservation_wait_is_charged_to_the_holder_over_the_next_interval() -> None:
    ledger = CongestionLedger(bucket_seconds=60)
    ledger.cycle(30.0, [_reservation_wait()], PARTIES, HOLDING)
    ledger.cycle(100.0, [], PARTIES, HOLDING)
    assert ledger.totals.imposed == {(TRAIN, "reservation"): 70.0}
    assert ledger.totals.pending_seconds == 70.0
    assert [b.imposed for _, b in sorted(ledger.buckets.items())] == [
        {(TRAIN, "reservation"): 30.0},
        {(TRAIN, "reservation"): 40.0},
    ]


def test_settle_charges_the_open_interval_once() -> None:
    ledger = CongestionLedger()
    ledger.cycle(0.0, [_reservation_wait()], PARTIES, HOLDING)
    ledger.settle(10.0)
    ledger.settle(10.0)
    ledger.settle(5.0)  # a clock that went back charges nothing
    ledger.settle(12.0)
    assert ledger.totals.imposed == {(TRAIN, "reservation"): 17.0}


def test_own_class_wait_is_kept_apart_as_self_imposed() -> None:
    ledger = CongestionLedger()
    behind_own = waiting_behind(("big", "a100"))
    ledger.cycle(0.0, [("big2", TRAIN, behind_own)], PARTIES, HOLDING)
    ledger.settle(10.0)
    assert ledger.totals.imposed == {}
    assert ledger.totals.self_imposed == {(TRAIN, "waiting_behind"): 10.0}


def test_pods_left_out_of_a_cycle_keep_their_cause_while_still_pending() -> None:
    ledger = CongestionLedger()
    ledger.cycle(0.0, [_reservation_wait("a"), _reservation_wait("b")], PARTIES, HOLDING)
    ledger.cycle(10.0, [], PARTIES, HOLDING, still_pending={"a"})
    ledger.settle(15.0)
    assert ledger.totals.imposed == {(TRAIN, "reservation"): 25.0}


def test_eviction_charges_lost_run_time_to_the_preemptor() -> None:
    ledger = CongestionLedger()
    ledger.evicted(5.0, SERVE, [(DEV, 300.0), (SERVE, 10.0)])
    assert ledger.totals.imposed == {(SERVE, PREEMPTION): 300.0}
    assert ledger.totals.self_imposed == {(SERVE, PREEMPTION): 10.0}


def test_only_the_latest_buckets_are_kept_but_totals_keep_everything() -> None:
    ledger = CongestionLedger(bucket_seconds=10, keep=2)
    ledger.cycle(0.0, [_reservation_wait()], PARTIES, HOLDING)
    ledger.settle(50.0)
    assert sorted(ledger.buckets) == [3, 4]
    assert ledger.totals.imposed[(TRAIN, "reservation")] == 50.0


def test_as_json_ranks_classes_by_imposed_time_and_plots_by_class() -> None:
    ledger = CongestionLedger(bucket_seconds=60)
    ledger.cycle(
        0.0,
        [_reservation_wait(), ("t", TRAIN, WaitCause(WaitKind.RESERVATION, pods=("api",)))],
        PARTIES,
        HOLDING,
    )
    ledger.settle(30.0)
    ledger.idle(DEV, 2.0, 0.0, 1800.0)
    report = ledger.as_json()
    rows = report["classes"]
    assert isinstance(rows, list)
    assert [(r["workload_class"], r["imposed_seconds"]) for r in rows] == [
        ("serving", 30.0),
        ("training", 30.0),
        ("dev", 0.0),
    ]
    dev = next(r for r in rows if r["workload_class"] == "dev")
    assert dev["idle_gpu_hours"] == pytest.approx(1.0)
    assert dev["contention_share"] is None
    series = report["series"]
    assert isinstance(series, list)
    assert series[0]["imposed_seconds"] == {"serving": 30.0, "training": 30.0}


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [("bucket_seconds", {"bucket_seconds": 0.0}), ("keep", {"keep": 0})],
)
def test_bad_settings_name_the_field(field: str, kwargs: dict[str, float]) -> None:
    with pytest.raises(CongestionError, match=field):
        CongestionLedger(**kwargs)  # type: ignore[arg-type]


_KINDS = st.sampled_from(list(WaitKind))
_NAMES = st.sampled_from(["big", "api", "nb", "gone"])
_WAITS = st.lists(
    st.tuples(st.sampled_from([TRAIN, SERVE, DEV]), _KINDS, st.lists(_NAMES, max_size=3)),
    max_size=6,
)


@given(
    cycles=st.lists(st.tuples(st.floats(0, 500, allow_nan=False), _WAITS), min_size=1, max_size=6),
    bucket=st.floats(5, 120),
)
def test_charges_add_up_to_the_pending_seconds_and_never_exceed_them(
    cycles: list[tuple[float, list[tuple[Party, WaitKind, list[str]]]]], bucket: float
) -> None:
    ledger = CongestionLedger(bucket_seconds=bucket)
    now, expected = 0.0, 0.0
    held = 0
    for step, waits in cycles:
        now += step
        expected += step * held
        causes = [
            (f"w{i}", party, WaitCause(kind, pods=tuple(pods), pools=tuple("p" for _ in pods)))
            for i, (party, kind, pods) in enumerate(waits)
        ]
        ledger.cycle(now, causes, PARTIES, HOLDING)
        held = len(causes)
    totals = ledger.totals
    charged = (
        sum(totals.imposed.values())
        + sum(totals.self_imposed.values())
        + sum(totals.unattributed.values())
    )
    assert totals.pending_seconds == pytest.approx(expected)
    assert charged == pytest.approx(expected)
    in_buckets = sum(b.pending_seconds for b in ledger.buckets.values())
    assert in_buckets == pytest.approx(expected)
