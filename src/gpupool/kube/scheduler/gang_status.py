"""A PodGroup's status: its gang's ``PodGroupInitiallyScheduled``, as Kubernetes 1.37 defines it.

After each cycle, for every gang of a 1.37 PodGroup (its pods name it in
``spec.schedulingGroup``) decided in it: ``True`` with reason ``Scheduled`` once its pods were
admitted, which is terminal (the condition never goes back to ``False``, even when pods are
evicted later); until then ``False`` with reason ``Unschedulable`` and the message its pods read
(how many of its pods fit, the quota that holds it, the PodGroup it waits for). Written only when
it changes, through the replica's report queue, as pod conditions are. Coscheduling PodGroups
keep their own status, which their controller writes.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.reason_text import readable
from gpupool.kube.scheduler.writes import PodReporter
from gpupool.scheduling.decisions import Admit, CycleResult, Wait

CONDITION = "PodGroupInitiallyScheduled"


class GangStatus:
    """The condition last written per PodGroup (``namespace/name``).

    Args:
        reports: Where the writes are queued.
    """

    def __init__(self, reports: PodReporter) -> None:
        self.reports = reports
        self.written: dict[str, tuple[str, str]] = {}

    def after(self, result: CycleResult, pods: Mapping[str, PodRecord]) -> None:
        """Write the condition of each 1.37 PodGroup whose gang this cycle decided, if new."""
        seen: dict[str, tuple[str, str]] = {}
        for decision in result.decisions:
            gang = decision.workload.gang
            pod = pods.get(decision.workload.name)
            if not gang or pod is None or pod.spec.scheduling_group is None:
                continue
            if isinstance(decision, Admit):
                seen[gang] = ("True", "the gang's pods were admitted together")
            elif isinstance(decision, Wait) and gang not in seen:
                seen[gang] = ("False", readable(decision.cause, pods))
        for gang, (status, message) in seen.items():
            last = self.written.get(gang)
            if last == (status, message) or (last is not None and last[0] == "True"):
                continue
            self.written[gang] = (status, message)
            reason = "Scheduled" if status == "True" else "Unschedulable"
            self.reports.pod_group_condition(gang, CONDITION, status, reason, message)
