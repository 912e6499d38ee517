"""The node agent's word that it refuses a kind of hand-off, as the scheduler reads it.

When the agent refuses to start a pod for a reason of the node's own (a GPU it counts as full
while the scheduler counted room, the MPS daemon missing), the next pod of that kind would be
placed on the same node and refused again, and the pods behind it with it. So the agent writes
the refused kinds on its Node (:data:`ANNOTATION_HANDOFF_REFUSED`), and the scheduler keeps new
pods of those kinds off the node (:attr:`gpupool.core.model.NodeSpec.refused_kinds`) until the
entry goes. Both sides use this module's one encoding. A refusal that is the pod's fault (a
forged record, a share other than the one asked for) is not written: a tenant must not be able
to close nodes by sending bad pods.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from gpupool.core.model import RequestKind
from gpupool.kube.objects.object_error import InvalidObjectError
from gpupool.kube.objects.vocabulary import ANNOTATION_HANDOFF_REFUSED

REFUSABLE = (RequestKind.WHOLE, RequestKind.SHARE)
"""The kinds a node refuses for reasons of its own (MIG slices are checked by the kubelet)."""
FIELD = f"metadata.annotations[{ANNOTATION_HANDOFF_REFUSED}]"


def encode(refused: Mapping[RequestKind, str]) -> str | None:
    """The annotation's value for ``refused`` (kind to why); ``None`` removes it."""
    if not refused:
        return None
    return json.dumps({kind.value: why for kind, why in sorted(refused.items(), key=str)})


def decode(owner: str, text: str | None) -> tuple[RequestKind, ...]:
    """The refused kinds the annotation names (kinds this version does not know are skipped).

    Raises:
        InvalidObjectError: The value is not a JSON object, named by its field.
    """
    if not text:
        return ()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise InvalidObjectError(owner, FIELD, "must be a JSON object of request kind to reason")
    return tuple(kind for kind in REFUSABLE if kind.value in value)
