"""A ``metav1.LabelSelector`` as the core's value, for every object that carries one.

Pod affinity terms and spread constraints, PodDisruptionBudgets and PersistentVolumeClaims each
carry a label selector. They are read by this one function into
:class:`gpupool.core.pod_terms.LabelSelector`, so a selector selects the same pods (or volumes)
whichever object it came in, with the operators the API server allows there.
"""

from __future__ import annotations

from gpupool.core.model import InvalidSpecError
from gpupool.core.pod_terms import LabelSelector
from gpupool.kube.objects.constraint_records import LabelSelectorRecord
from gpupool.kube.objects.object_error import InvalidObjectError, at, requirements


def label_selector(
    owner: str, path: str, record: LabelSelectorRecord | None
) -> LabelSelector | None:
    """The selector at ``path`` of ``owner`` (None where the object has none).

    Raises:
        InvalidObjectError: An expression the API server would refuse, named by its path.
    """
    if record is None:
        return None
    expressions = requirements(owner, f"{path}.matchExpressions", record.match_expressions)
    try:
        return LabelSelector(tuple(sorted(record.match_labels.items())), expressions)
    except InvalidSpecError as error:
        raise at(owner, path, error) from None


def usable_selector(record: LabelSelectorRecord) -> LabelSelector | None:
    """The selector, or None where the API server could not use it (it then selects nothing).

    For objects the scheduler reads but does not refuse (a budget, a claim): a selector the API
    server would have refused matches nothing rather than everything.
    """
    try:
        return label_selector("", "", record)
    except InvalidObjectError:
        return None
