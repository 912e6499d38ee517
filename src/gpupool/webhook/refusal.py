"""A refused admission: the field at fault and what is allowed there.

Every refusal names a field path as the API shows it (``spec.containers[0].resources.limits
[gpupool.io/gpu-cores]``), so a user reading ``kubectl``'s error knows what to change without
reading gpupool's source.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a pod is refused.

    Attributes:
        field: The path of the offending field (starts with ``spec.`` or ``metadata.``).
        message: What is wrong and what is allowed.
    """

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"
