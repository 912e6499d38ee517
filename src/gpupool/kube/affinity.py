"""Required node affinity, with kube-scheduler's semantics.

A pod's ``requiredDuringSchedulingIgnoredDuringExecution`` lists node selector terms; a node
qualifies if any term holds, and a term holds if all its expressions do. An empty term list, or
a term with no expressions, matches no node (as in Kubernetes). ``matchFields`` supports
``metadata.name``, the only field Kubernetes allows there. Preferred affinity does not filter
and is not read.
"""

from __future__ import annotations

from gpupool.kube.records import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm


def _holds(requirement: NodeSelectorRequirement, value: str | None) -> bool:
    operator, values = requirement.operator, requirement.values
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _term_holds(term: NodeSelectorTerm, labels: dict[str, str], name: str) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    fields = {"metadata.name": name}
    return all(_holds(r, labels.get(r.key)) for r in term.match_expressions) and all(
        _holds(r, fields.get(r.key)) for r in term.match_fields
    )


def node_matches(selector: NodeSelector, labels: dict[str, str], name: str) -> bool:
    """Whether a node with ``labels`` and ``name`` satisfies the required affinity."""
    return any(_term_holds(term, labels, name) for term in selector.node_selector_terms)
