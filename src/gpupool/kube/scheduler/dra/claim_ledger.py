"""What DRA claims cost and free for the pods that use them: quota charges, governance, evictions.

A claim holds its GPUs under its own snapshot name (:mod:`gpupool.kube.scheduler.dra.claims`),
and the pods that reserve it hold only their CPU and memory. Each question about "a pod's GPUs"
therefore needs the claim side said once, here:

* **payers and charges**: which one pod's queue pays for a claim's GPUs (a shared claim counts
  once), for the quota and for the face;
* **GPUs by pod**: what every consumer runs on, for governance's idle and duration rules;
* **companions**: the claims a pod alone reserves, which its eviction or end frees (gpupool
  releases a claim no live pod reserves; kube-controller-manager deletes a template's claim
  with its pod), so a victim search and a backfill reservation count those GPUs as freed;
* **changes**: the pods whose charge or companions moved since the last cycle
  (:func:`changed_costs`), which the live loop's policy book re-reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.core.model import PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.dra.claims import ClaimBind, ClaimBook, claim_key


def claim_payers(
    book: ClaimBook,
    snapshot: ClusterSnapshot,
    pods: Mapping[str, PodRecord],
    binds: Mapping[str, ClaimBind],
) -> dict[str, str]:
    """Snapshot name of each held claim to the uid of the one pod that pays for its GPUs.

    The pod that allocates it (while its write is in flight), or else the first pod of
    ``reservedFor`` still alive; a claim no live pod reserves has no payer. One rule for the
    quota (:func:`claim_charges`) and for the face, which shows a claim's GPUs as that pod's.
    """
    payers: dict[str, str] = {}
    for uid, bind in binds.items():
        key = claim_key(bind.plan.claim.metadata.uid)
        if bind.allocation is not None and key in snapshot.allocations:
            payers[key] = uid
    for claim_uid, claim in book.by_uid.items():
        key = claim_key(claim_uid)
        if key in payers or key not in snapshot.allocations:
            continue
        owner = next((c.uid for c in claim.status.reserved_for if c.uid in pods), None)
        if owner is not None:
            payers[key] = owner
    return payers


def claim_charges(
    book: ClaimBook,
    snapshot: ClusterSnapshot,
    pods: Mapping[str, PodRecord],
    binds: Mapping[str, ClaimBind],
) -> dict[str, PodSpec]:
    """Pod uid to the GPUs of the claim its queue is charged for (:func:`claim_payers`).

    Quotas see claim pods in the same GPU units as any other pod, and a claim shared by several
    pods is not charged several times.
    """
    charges: dict[str, PodSpec] = {}
    for key, uid in claim_payers(book, snapshot, pods, binds).items():
        charges.setdefault(uid, snapshot.allocations[key].pod)
    return charges


def claim_gpus_by_pod(
    book: ClaimBook, snapshot: ClusterSnapshot, pods: Mapping[str, PodRecord]
) -> dict[str, PodSpec]:
    """Pod uid to the GPUs of the claim it runs on, for every pod in a claim's ``reservedFor``.

    Governance judges a claim pod by what its claim was given (a share's compute scales the
    idle threshold), not by its own request, which has no GPUs: read from the pod, a claim
    share running flat out at its cap would be held to the whole GPU's threshold and reclaimed
    as idle. Unlike :func:`claim_charges`, every consumer of a shared claim is named.
    """
    gpus: dict[str, PodSpec] = {}
    for claim_uid, claim in book.by_uid.items():
        held = snapshot.allocations.get(claim_key(claim_uid))
        if held is None:
            continue
        for consumer in claim.status.reserved_for:
            if consumer.uid in pods:
                gpus.setdefault(consumer.uid, held.pod)
    return gpus


def sole_claims(
    book: ClaimBook,
    snapshot: ClusterSnapshot,
    pods: Mapping[str, PodRecord],
    binds: Mapping[str, ClaimBind],
) -> dict[str, tuple[str, ...]]:
    """Pod uid to the snapshot names of the held claims that it, and no other live pod, uses.

    A consumer is a live pod in the claim's ``reservedFor`` or the pod whose allocation of it
    is in flight. A claim two pods share is no pod's companion: evicting one of them frees
    nothing, so a victim search must not count it (it may find no victims where evicting both
    would do; it never promises room that does not come).
    """
    consumers: dict[str, set[str]] = {}
    for uid, bind in binds.items():
        consumers.setdefault(claim_key(bind.plan.claim.metadata.uid), set()).add(uid)
    for claim_uid, claim in book.by_uid.items():
        users = consumers.setdefault(claim_key(claim_uid), set())
        users.update(c.uid for c in claim.status.reserved_for if c.uid in pods)
    companions: dict[str, list[str]] = {}
    for key, users in consumers.items():
        if len(users) == 1 and key in snapshot.allocations:
            companions.setdefault(next(iter(users)), []).append(key)
    return {uid: tuple(sorted(keys)) for uid, keys in companions.items()}


ClaimCosts = tuple[dict[str, PodSpec], dict[str, tuple[str, ...]]]
"""Per pod uid, its claim charge (:func:`claim_charges`) and companions (:func:`sole_claims`)."""


def claim_costs(
    book: ClaimBook,
    snapshot: ClusterSnapshot,
    pods: Mapping[str, PodRecord],
    binds: Mapping[str, ClaimBind],
) -> ClaimCosts:
    """Every pod's claim charge and companions, as one scheduling cycle sees them."""
    return claim_charges(book, snapshot, pods, binds), sole_claims(book, snapshot, pods, binds)


def changed_costs(now: ClaimCosts, before: ClaimCosts) -> set[str]:
    """The pods whose claim charge or companions changed, came or went since ``before``.

    The policy book re-reads those pods (their quota charge and what evicting them frees).
    """
    return _differ(now[0], before[0]) | _differ(now[1], before[1])


def _differ(now: Mapping[str, object], before: Mapping[str, object]) -> set[str]:
    """The keys whose value changed, came or went."""
    return {key for key in now.keys() | before.keys() if now.get(key) != before.get(key)}
