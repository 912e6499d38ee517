"""The one error of reading an API object: which field of which object, and why.

Shared by the translations of :mod:`gpupool.kube.objects` (resources and node constraints in
``translate``, pod affinity and spread in ``translate_affinity``), so every refusal names its
field the same way: ``pod ns/name: spec.tolerations[1].operator: ...``.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.core.constraints import Requirement
from gpupool.core.model import InvalidSpecError
from gpupool.kube.objects.constraint_records import NodeSelectorRequirement


class InvalidObjectError(ValueError):
    """An API object has a field gpupool cannot schedule; ``field`` is its path."""

    def __init__(self, owner: str, field: str, message: str) -> None:
        super().__init__(f"{owner}: {field}: {message}")
        self.owner = owner
        self.field = field
        self.message = message


def at(owner: str, path: str, error: InvalidSpecError) -> InvalidObjectError:
    """The core's refusal of a value, reported at the value's path in the object."""
    return InvalidObjectError(owner, f"{path}.{error.field_name}", str(error))


def requirements(
    owner: str, path: str, items: Sequence[NodeSelectorRequirement]
) -> tuple[Requirement, ...]:
    """Selector requirements as core values; a refused one is named ``path[i].field``."""
    found = []
    for i, item in enumerate(items):
        try:
            found.append(Requirement(item.key, item.operator, tuple(item.values)))
        except InvalidSpecError as error:
            raise at(owner, f"{path}[{i}]", error) from None
    return tuple(found)
