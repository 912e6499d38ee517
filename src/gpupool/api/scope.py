"""What one reader sees of each view: everything, its own namespaces, or a 403 naming why.

The routes of :mod:`gpupool.api.app` call these with the reader's
:class:`~gpupool.api.auth.Access` (left in the request by :class:`~gpupool.api.auth.RequireReader`):

* :func:`require_cluster_wide` for views that show every tenant's pods;
* :func:`shown_namespaces` for per-namespace lists: the namespaces the reader asked for (403 if
  it may not list pods in one of them), or, when it asked for none, every namespace for a
  cluster-wide reader and those of the present ones it may list pods in for the others;
* :func:`redact_holders` for an explanation, whose "what would have to free up" names pods that
  may belong to other tenants.

Pods are named ``namespace/name`` in every view, so the namespace is the part before the slash.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fastapi import HTTPException, Request

from gpupool.api.auth import ACCESS_KEY, EVERYTHING, Access
from gpupool.api.model import Explanation

OTHER_NAMESPACE = "(a pod of another namespace)"


def access_of(request: Request) -> Access:
    """The reader's access; a face without access control (``create_api``) shows everything."""
    access: Access = request.scope.get(ACCESS_KEY, EVERYTHING)
    return access


def namespace_of(pod: str) -> str:
    """The namespace of ``namespace/name`` ("" for a name without one)."""
    namespace, sep, _ = pod.partition("/")
    return namespace if sep else ""


async def require_cluster_wide(access: Access, view: str) -> None:
    """Refuse a reader who may not list pods in every namespace.

    Raises:
        HTTPException: 403 naming the reader, the view and the permission it needs.
    """
    if not await access.cluster_wide():
        raise HTTPException(
            status_code=403,
            detail=f"forbidden: {view} shows every namespace's pods; {access.who} may not list "
            "pods in all namespaces (ask for your namespace's pending pods, audit or cost "
            "with ?namespace=NS)",
        )


async def shown_namespaces(
    access: Access, asked: Sequence[str], present: Iterable[str]
) -> frozenset[str] | None:
    """The namespaces a per-namespace list shows; ``None``: all, cluster-scoped records too.

    Args:
        access: The reader.
        asked: The namespaces the request named (``?namespace=``); empty: none named.
        present: The namespaces the list would mention.

    Raises:
        HTTPException: 403 naming the first asked namespace the reader may not list pods in.
    """
    if asked:
        allowed = await access.namespaces(asked)
        for namespace in asked:
            if namespace not in allowed:
                raise HTTPException(
                    status_code=403,
                    detail=f"forbidden: {access.who} may not list pods in namespace {namespace}",
                )
        return frozenset(asked)
    if await access.cluster_wide():
        return None
    return await access.namespaces(present)


def shows(namespaces: frozenset[str] | None, pod: str) -> bool:
    """Whether a list limited to ``namespaces`` shows ``pod`` (``namespace/name``)."""
    return namespaces is None or namespace_of(pod) in namespaces


async def redact_holders(access: Access, explanation: Explanation) -> Explanation:
    """``explanation`` with the pods of namespaces the reader may not see left unnamed."""
    holders = {holder for row in explanation.closest for holder in row.holders}
    visible = await access.namespaces(namespace_of(h) for h in holders)
    if all(namespace_of(h) in visible for h in holders):
        return explanation
    closest = [
        row.model_copy(
            update={
                "holders": [
                    h if namespace_of(h) in visible else OTHER_NAMESPACE for h in row.holders
                ]
            }
        )
        for row in explanation.closest
    ]
    return explanation.model_copy(update={"closest": closest})
