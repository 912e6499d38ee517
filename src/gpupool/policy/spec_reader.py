"""Typed access to a GPUPool or GPUQueue document's fields, with errors that name the path.

Split from :mod:`gpupool.policy.config` (the one parser of those specs) so that its sections can
be read by helpers of their own without each repeating the checks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


class PolicyConfigError(ValueError):
    """A pool or queue document that cannot be used; the message names the object and field."""


def parse_duration(text: str) -> float:
    """``"1h30m"`` -> 5400.0 seconds (the CRDs' duration pattern).

    Raises:
        ValueError: Not of the form ``[Nh][Nm][Ns]``.
    """
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None or not text:
        raise ValueError(f"must be a duration like 30m, 2h, 1h30m or 45s, got {text!r}")
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return float(hours * 3600 + minutes * 60 + seconds)


class SpecReader:
    """Typed access to one document's fields with errors that name the path."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def fail(self, path: str, message: str) -> PolicyConfigError:
        """The error for ``path``, naming the object too."""
        return PolicyConfigError(f"{self.owner}: {path}: {message}")

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        """A mapping (absent: empty)."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be a mapping, got {type(value).__name__}")
        return value

    def strings(self, value: Any, path: str) -> list[str]:
        """A list of non-empty strings (absent: empty)."""
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(path, "must be a list of non-empty strings")
        return list(value)

    def integer(self, value: Any, path: str, low: int, high: int | None = None) -> int:
        """An integer within ``low..high``."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, got {value!r}")
        if value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high is not None else f">= {low}"
            raise self.fail(path, f"must be {bound}, got {value}")
        return value

    def duration(self, spec: Mapping[str, Any], key: str, path: str) -> float | None:
        """``spec[key]`` as seconds (absent: ``None``)."""
        value = spec.get(key)
        if value is None:
            return None
        try:
            return parse_duration(value)
        except ValueError as error:
            raise self.fail(f"{path}.{key}", str(error)) from None

    def number(self, value: Any, path: str, low: float, high: float, *, open_low: bool) -> float:
        """A finite number above (or from) ``low`` and at most ``high``."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(path, f"must be a number, got {value!r}")
        number = float(value)
        too_low = number <= low if open_low else number < low
        if not math.isfinite(number) or too_low or number > high:
            bound = f"> {low:g}" if open_low else f">= {low:g}"
            raise self.fail(path, f"must be {bound} and <= {high:g}, got {value}")
        return number
