"""The scheduler's public key for the agent, and the Event saying why a record was refused.

The hand-off (:mod:`gpupool.agent.handoff`) verifies every record's Ed25519 signature before it
writes a CDI spec (:func:`gpupool.kube.objects.record_check.signature_problem`); these are its
:class:`~gpupool.agent.handoff.KeySource` and its report, backed by the API server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import httpx2

from gpupool.agent.grants import HandoffRefusedError
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.client.signing_key import load_verifier
from gpupool.kube.objects.events import pod_event
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.signing import PUBLIC_KEY_CONFIGMAP, KeyFormatError, RecordVerifier

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "gpupool.io/agent"


class PublishedKey:
    """The scheduler's public key from its ConfigMap (a :class:`~gpupool.agent.handoff.KeySource`).

    Read once and kept for ``period`` seconds: a PreStart must not cost an API request, and the
    key changes only when an operator rotates it (then :meth:`verifier` with ``fresh`` reads it
    at once). If it cannot be read, the last key read is used; with none, PreStart refuses:
    a record that cannot be verified is not believed.

    Args:
        api: The API server.
        namespace: The scheduler's namespace.
        period: Seconds between reads.
        clock: Monotonic seconds.
    """

    def __init__(
        self,
        api: KubeAPI,
        namespace: str,
        period: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._period = period
        self._clock = clock
        self._key: RecordVerifier | None = None
        self._read_at = 0.0

    async def verifier(self, *, fresh: bool = False) -> RecordVerifier:
        """The key, read again when stale or ``fresh``.

        Raises:
            HandoffRefusedError: It was never read and cannot be read now.
        """
        if self._key is not None and not fresh and self._clock() - self._read_at < self._period:
            return self._key
        try:
            self._key = await load_verifier(self._api, self._namespace)
            self._read_at = self._clock()
        except (ApiError, KeyFormatError, OSError, httpx2.HTTPError) as error:
            if self._key is None:
                raise HandoffRefusedError(
                    f"the scheduler's public key (configmap {self._namespace}/"
                    f"{PUBLIC_KEY_CONFIGMAP}) cannot be read: {error}; no allocation record can "
                    "be verified"
                ) from None
            log.warning("public key not read again (%s); using the one read before", error)
        return self._key


class EventReporter:
    """Warning Events about pods whose container the agent refused (best effort).

    The kubelet reports PreStartContainer's failure on the container; this Event says on the
    pod why gpupool refused it, in words a tenant can act on. Failing to write it never changes
    the refusal.

    Args:
        api: The API server.
        node: This node (the Event's ``reportingInstance``, which admission checks).
    """

    def __init__(self, api: KubeAPI, node: str) -> None:
        self._api = api
        self._node = node

    async def untrusted(self, pod: PodRecord, message: str) -> None:
        """An ``AllocationNotTrusted`` Warning about ``pod``."""
        path, body = pod_event(
            pod,
            "Warning",
            "AllocationNotTrusted",
            message,
            controller=REPORTING_CONTROLLER,
            instance=self._node,
            action="PreStartContainer",
        )
        try:
            await self._api.create(path, body)
        except (ApiError, OSError, httpx2.HTTPError) as error:
            log.warning("event about pod %s not written: %s", pod.key, error)
