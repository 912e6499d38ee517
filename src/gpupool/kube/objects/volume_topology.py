"""Where a storage object can be reached, as the core's node selector terms.

Its own module because it is a translation apart from the records and the claim-to-volume
match of :mod:`gpupool.kube.objects.volumes`: a PersistentVolume's required node affinity
(:func:`volume_terms`), a StorageClass's ``allowedTopologies`` (:func:`topology_terms`) and a
bound volume's zone labels as VolumeZone reads them (:func:`zone_terms`) all become
:class:`~gpupool.core.constraints.SelectorTerm` groups the core checks per node, with a term the
core refuses named by its path (:class:`VolumeTermsError`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.core.constraints import Requirement, SelectorTerm
from gpupool.core.model import InvalidSpecError
from gpupool.kube.objects.volumes import PersistentVolume, StorageClass

ZONE_LABELS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)
"""The topology labels VolumeZone reads, GA first; a beta key's GA twin is at ``index - 2``."""
ZONE_SEPARATOR = "__"
"""How a volume's zone label lists several zones (``a__b``), as in Kubernetes."""


class VolumeTermsError(ValueError):
    """A volume's node affinity or a class's topology has a term the core refuses."""


def _requirement(key: str, operator: str, values: Sequence[str], where: str) -> Requirement:
    try:
        return Requirement(key, operator, tuple(values))
    except InvalidSpecError as error:
        raise VolumeTermsError(f"{where}: {error}") from None


def volume_terms(volume: PersistentVolume) -> tuple[SelectorTerm, ...] | None:
    """The volume's required node affinity as terms (None: any node can reach it).

    Raises:
        VolumeTermsError: A requirement the core refuses, named by its path.
    """
    affinity = volume.spec.node_affinity
    if affinity is None or affinity.required is None:
        return None
    terms = []
    for i, term in enumerate(affinity.required.node_selector_terms):
        where = f"persistentvolume {volume.key}: spec.nodeAffinity.required.nodeSelectorTerms[{i}]"
        expressions = tuple(
            _requirement(r.key, r.operator, r.values, where) for r in term.match_expressions
        )
        fields = tuple(_requirement(r.key, r.operator, r.values, where) for r in term.match_fields)
        try:
            terms.append(SelectorTerm(expressions, fields))
        except InvalidSpecError as error:
            raise VolumeTermsError(f"{where}: {error}") from None
    return tuple(terms)


def topology_terms(storage_class: StorageClass) -> tuple[SelectorTerm, ...] | None:
    """Where the class can provision, as terms (None: anywhere)."""
    if not storage_class.allowed_topologies:
        return None
    where = f"storageclass {storage_class.key}: allowedTopologies"
    return tuple(
        SelectorTerm(
            tuple(_requirement(r.key, "In", r.values, where) for r in term.match_label_expressions)
        )
        for term in storage_class.allowed_topologies
    )


def zone_terms(volume: PersistentVolume) -> tuple[tuple[SelectorTerm, ...], ...]:
    """VolumeZone's groups for a bound volume: one per zone label it carries.

    A node without any topology label passes (kube-scheduler lets it), else the node's label
    (or, for a beta key the node lacks, its GA twin) must be one of the volume's values.
    """
    labels = volume.metadata.labels
    unlabelled = SelectorTerm(tuple(Requirement(key, "DoesNotExist") for key in ZONE_LABELS))
    groups = []
    for index, key in enumerate(ZONE_LABELS):
        value = labels.get(key)
        if not value:
            continue
        values = tuple(sorted(set(value.split(ZONE_SEPARATOR))))
        terms = [unlabelled, SelectorTerm((Requirement(key, "In", values),))]
        if index >= 2:
            twin = ZONE_LABELS[index - 2]
            terms.append(
                SelectorTerm((Requirement(key, "DoesNotExist"), Requirement(twin, "In", values)))
            )
        groups.append(tuple(terms))
    return tuple(groups)
