"""The PodGroups of the cluster, watched where the API server serves them, as gangs to decide.

At start the scheduler asks the API server whether it serves Kubernetes 1.37's PodGroups
(``scheduling.k8s.io/v1beta1``, gate ``GenericWorkload``) and the coscheduling ones
(``scheduling.x-k8s.io/v1alpha1``, a CRD scheduler-plugins installs), and watches those it
serves. A pod of a group not seen yet waits for it, as kube-scheduler's pods do; a group whose
policy is ``basic`` is no gang, and its pods are scheduled one by one. A CRD installed after the
scheduler started is watched from its next start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.client.informer import DELETED, Informer
from gpupool.kube.client.informer_group import InformerGroup
from gpupool.kube.objects.pod_groups import (
    COSCHEDULING_API,
    COSCHEDULING_GROUPS,
    WORKLOAD_API,
    WORKLOAD_API_GROUPS,
    CoschedulingGroupRecord,
    PodGroupRecord,
    group_key,
)
from gpupool.kube.objects.records import PodRecord
from gpupool.scheduling.decisions import GangSpec

Group = PodGroupRecord | CoschedulingGroupRecord
GANG_WATCHES = 2
"""At most: Kubernetes 1.37's PodGroups and coscheduling's, where both are served."""


class GangBook(InformerGroup):
    """What every PodGroup asks (``None``: a basic group), by ``namespace/name``.

    Args:
        api: The API port.
        changed: Called after every change (a pod waiting for its group is tried again).
    """

    def __init__(self, api: KubeAPI, changed: Callable[[], None]) -> None:
        super().__init__(changed)
        self.api = api
        self.coscheduling: dict[str, GangSpec | None] = {}
        self.workload_api: dict[str, GangSpec | None] = {}
        self.watched: tuple[Informer[Any], ...] = ()
        self._all = (
            (COSCHEDULING_API, Informer(api, COSCHEDULING_GROUPS, CoschedulingGroupRecord,
                                        self._wrap(self._keeper(self.coscheduling)))),
            (WORKLOAD_API, Informer(api, WORKLOAD_API_GROUPS, PodGroupRecord,
                                    self._wrap(self._keeper(self.workload_api)))),
        )  # fmt: skip
        assert len(self._all) == GANG_WATCHES

    def informers(self) -> tuple[Informer[Any], ...]:
        """The informers of the PodGroup APIs the server serves (none before :meth:`run`)."""
        return self.watched

    async def run(self) -> None:
        """Find which PodGroup APIs are served, then list and watch them until cancelled."""
        self.watched = tuple([informer for path, informer in self._all if await self._serves(path)])
        await super().run()

    async def _serves(self, path: str) -> bool:
        try:
            found = await self.api.get(path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return any(resource.get("name") == "podgroups" for resource in found.get("resources", []))

    @staticmethod
    def _keeper(table: dict[str, GangSpec | None]) -> Callable[[str, Group], None]:
        def keep(kind: str, group: Group) -> None:
            key = f"{group.metadata.namespace}/{group.metadata.name}"
            if kind == DELETED:
                table.pop(key, None)
            else:
                table[key] = group.gang

        return keep

    def specs(self) -> dict[str, GangSpec]:
        """What each gang asks (a 1.37 group wins over a coscheduling one of its name)."""
        known = self.coscheduling | self.workload_api
        return {key: spec for key, spec in known.items() if spec is not None}

    def gang_of(self, pod: PodRecord) -> str:
        """The gang ``pod`` must start with ("" for none: no group, or a basic one)."""
        key = group_key(pod)
        if not key:
            return ""
        named = pod.spec.scheduling_group is not None and pod.spec.scheduling_group.pod_group_name
        known = self.workload_api if named else self.coscheduling
        return "" if key in known and known[key] is None else key
