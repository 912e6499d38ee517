"""The records the store keeps, validated before they are queued.

A record is checked when it is made (aware UTC time, known action, sizes that fit the
columns, JSON-serialisable values), because the writer retries a failed batch until it lands:
a record the database would refuse for good must never reach the queue, or it would hold up
every record behind it.

Each record has an idempotency key, made on the client and unique in its table. Allocations
and usage samples have deterministic keys (``alloc/<pod uid>``, ``usage/<pod uid>/<time>``);
an audit event takes the key its producer gives (a deterministic one such as
``bind/<pod uid>`` makes a decision recorded twice by two code paths one row) or else a random
UUID made once, when the event is made, so that every retry of it carries the same key.
"""

from __future__ import annotations

import enum
import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpupool.governance.errors import FieldValueError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAME_LENGTH = 253
"""Longest Kubernetes name, namespace, tenant, pool or actor the store keeps."""
KEY_LENGTH = 512


class RecordError(FieldValueError):
    """A record cannot be stored; the message names the field."""


class AuditAction(enum.StrEnum):
    """What an audit event records."""

    BIND = "bind"
    PREEMPT = "preempt"
    RECLAIM = "reclaim"
    CLEANUP = "cleanup"
    REJECT = "reject"
    TIME_LIMIT = "time-limit"
    POLICY_CHANGE = "policy-change"
    CONSOLIDATE = "consolidate"


def to_micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch, the way the store keeps times.

    Integers compare and sum exactly and read the same on SQLite and PostgreSQL, where a
    timestamp column would lose its time zone on SQLite.
    """
    return (moment - _EPOCH) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    """The aware UTC time of a stored microsecond count."""
    return _EPOCH + timedelta(microseconds=micros)


def _check_time(field_name: str, moment: datetime) -> None:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise RecordError(field_name, f"needs a time zone, got {moment.isoformat()}")


def _check_names(record: object, names: tuple[str, ...], *, required: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(record, name)
        if len(value) > NAME_LENGTH:
            raise RecordError(name, f"longer than {NAME_LENGTH} characters")
        if name in required and not value:
            raise RecordError(name, "must not be empty")


def _check_amount(record: object, name: str) -> None:
    value = getattr(record, name)
    if not (math.isfinite(value) and value >= 0):
        raise RecordError(name, f"must be a finite number >= 0, got {value}")


def _random_key() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One decision or change, with why it was made.

    Attributes:
        time: When it happened (aware).
        action: What happened.
        kind: Kind of the object it happened to (``Pod``, ``GPUQueue``, ...).
        namespace: The object's namespace (empty for cluster-scoped objects).
        name: The object's name.
        reason: Why, in words.
        values: The deciding values (scores, quotas, idle minutes, ...), JSON.
        uid: The object's uid, when it has one.
        tenant: The queue (tenant) the object belongs to.
        pool: The GPU pool concerned.
        actor: Who decided (scheduler replica identity, controller name).
        key: Idempotency key; a random UUID made once when omitted.
    """

    time: datetime
    action: AuditAction
    kind: str
    namespace: str
    name: str
    reason: str = ""
    values: Mapping[str, Any] = field(default_factory=dict)
    uid: str = ""
    tenant: str = ""
    pool: str = ""
    actor: str = ""
    key: str = field(default_factory=_random_key)

    def __post_init__(self) -> None:
        _check_time("time", self.time)
        if not isinstance(self.action, AuditAction):
            try:
                object.__setattr__(self, "action", AuditAction(self.action))
            except ValueError:
                choices = ", ".join(a.value for a in AuditAction)
                raise RecordError("action", f"{self.action!r} is not one of {choices}") from None
        _check_names(
            self,
            ("kind", "namespace", "name", "uid", "tenant", "pool", "actor"),
            required=("kind", "name"),
        )
        if not self.key or len(self.key) > KEY_LENGTH:
            raise RecordError("key", f"must have 1 to {KEY_LENGTH} characters")
        try:
            json.dumps(dict(self.values), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise RecordError("values", f"must be JSON: {exc}") from None


@dataclass(frozen=True, slots=True)
class Allocation:
    """One pod's allocation, from bind to release.

    Attributes:
        pod_uid: The pod's uid.
        namespace: The pod's namespace.
        name: The pod's name.
        queue: The queue (tenant) it was admitted through.
        pool: The GPU pool it runs in.
        node: The node it is bound to.
        kind: ``whole``, ``share``, ``mig`` or ``none``.
        units: GPU units held (:func:`gpupool.policy.units.allocation_size`).
        memory_gib: GPU memory held, in GiB.
        start: When the GPUs were given (aware).
        end: When they were released (aware), ``None`` while held.
    """

    pod_uid: str
    namespace: str
    name: str
    queue: str
    pool: str
    node: str
    kind: str
    units: float
    memory_gib: float
    start: datetime
    end: datetime | None = None

    def __post_init__(self) -> None:
        _check_names(
            self,
            ("pod_uid", "namespace", "name", "queue", "pool", "node", "kind"),
            required=("pod_uid", "name", "kind"),
        )
        _check_amount(self, "units")
        _check_amount(self, "memory_gib")
        _check_time("start", self.start)
        if self.end is not None:
            _check_time("end", self.end)
            if self.end < self.start:
                raise RecordError("end", f"{self.end.isoformat()} is before the start")

    @property
    def key(self) -> str:
        """``alloc/<pod uid>``: a pod is allocated once."""
        return f"alloc/{self.pod_uid}"


@dataclass(frozen=True, slots=True)
class UsageSample:
    """What one pod used at one moment, summed over its GPUs.

    Attributes:
        pod_uid: The pod's uid.
        time: When it was measured (aware).
        sm_percent: SM utilisation in percent of one GPU, summed over its GPUs.
        memory_used_gib: GPU memory used, in GiB.
    """

    pod_uid: str
    time: datetime
    sm_percent: float
    memory_used_gib: float

    def __post_init__(self) -> None:
        _check_names(self, ("pod_uid",), required=("pod_uid",))
        _check_time("time", self.time)
        _check_amount(self, "sm_percent")
        _check_amount(self, "memory_used_gib")

    @property
    def key(self) -> str:
        """``usage/<pod uid>/<microseconds>``: one sample per pod and instant."""
        return f"usage/{self.pod_uid}/{to_micros(self.time)}"


Record = AuditEvent | Allocation | UsageSample
"""Anything the writer queues."""
