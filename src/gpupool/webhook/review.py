"""AdmissionReview v1, the envelope the API server sends to a webhook and expects back.

Only the fields gpupool reads or writes are modelled; unknown fields are ignored, so newer API
servers keep working. The response echoes ``request.uid``: the API server drops an answer whose
uid does not match, and so fails the request (many example webhooks forget it).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class GroupVersionKind(_Model):
    """The kind of the object under review."""

    group: str = ""
    version: str = ""
    kind: str = ""


class AdmissionRequest(_Model):
    """One admission request: an operation on an object."""

    uid: str = Field(max_length=128)
    kind: GroupVersionKind = GroupVersionKind()
    namespace: str = ""
    operation: str = ""
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(default=None, alias="oldObject")
    dry_run: bool = Field(default=False, alias="dryRun")


class AdmissionReview(_Model):
    """The request envelope."""

    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


class Status(_Model):
    """Why a request is refused; the API server shows ``message`` to the user."""

    code: int
    reason: str
    message: str


class AdmissionResponse(_Model):
    """The webhook's answer to one request."""

    uid: str
    allowed: bool
    status: Status | None = None
    patch_type: Literal["JSONPatch"] | None = Field(default=None, alias="patchType")
    patch: str | None = None


class AdmissionReviewResponse(_Model):
    """The response envelope."""

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: str = KIND
    response: AdmissionResponse

    def to_json(self) -> dict[str, Any]:
        """The wire form: camelCase names, no null fields."""
        return self.model_dump(by_alias=True, exclude_none=True)


def allow(uid: str, patch: list[dict[str, Any]] | None = None) -> AdmissionReviewResponse:
    """Admit, applying ``patch`` (a JSONPatch) when it has operations."""
    response = AdmissionResponse(uid=uid, allowed=True)
    if patch:
        response.patch_type = "JSONPatch"
        response.patch = base64.b64encode(json.dumps(patch).encode()).decode()
    return AdmissionReviewResponse(response=response)


def deny(uid: str, message: str) -> AdmissionReviewResponse:
    """Refuse with ``message`` (which names the field)."""
    status = Status(code=422, reason="Invalid", message=message)
    response = AdmissionResponse(uid=uid, allowed=False, status=status)
    return AdmissionReviewResponse(response=response)
