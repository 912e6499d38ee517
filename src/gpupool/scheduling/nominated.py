"""Nominations within a cycle: the nodes preemption freed for a pod, and who must keep off them.

A preempting pod is nominated to the node its victims leave (as kube-scheduler's
``nominatedNodeName``); until it starts there, other pods keep off that node by the rule of
:func:`nomination_checks`. Split from :mod:`.cycle`, which applies both.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import NamedTuple

import numpy as np

from gpupool.core.filtering import NodeCheck


class Nominee(NamedTuple):
    """Who a nominated node is kept for: its nominee's queue, priority and gang ("" if none)."""

    queue: int
    priority: tuple[int, int]
    gang: str = ""


def nomination_checks(
    nominees: Mapping[int, Nominee], own: int | None, pod: Nominee, size: int
) -> tuple[NodeCheck, ...]:
    """Nodes nominated to others that a pod (its queue, priority and gang) must keep off.

    ``nominees``: per nominated node, its nominee; ``own``: the node the pod itself is
    nominated to, if any. A pod of another queue keeps off whatever its priority (else a
    borrower's high-priority pod would take the room reclaimed from it); one of the nominee's
    queue keeps off unless it has a higher priority (it could preempt the nominee anyway). A
    pod of the nominee's gang may go there: the room was freed for the whole gang.
    """
    if not nominees:
        return ()
    mask = np.ones(size, dtype=np.bool_)
    for node, nominee in nominees.items():
        if node == own or (pod.gang and nominee.gang == pod.gang):
            continue
        if nominee.queue != pod.queue or nominee.priority >= pod.priority:
            mask[node] = False
    if mask.all():
        return ()
    return (("node(s) nominated to a preempting pod", mask),)


def drop_nominations_on(nominations: MutableMapping[str, int], node: int) -> None:
    """Forget the nominations to ``node``: a pod allowed past them took the room.

    Kept, the nominee would wait "for preempted pods to terminate" on a node whose freed room
    is gone, every cycle, and search for no other victim: a queue under its guarantee stayed
    there while another borrowed (found by the engine's property test).
    """
    for name in [name for name, held in nominations.items() if held == node]:
        del nominations[name]
