"""RFC 3339 times as the API server writes them, and back to epoch seconds.

One module for every timestamp gpupool reads from or writes to an object (conditions, Events,
the agent's usage annotation, audit times): three hand-written copies had begun to differ in
whether they accept a missing zone and whether they keep microseconds.
"""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(text: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time; ``None`` when it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def format_time(seconds: float, micro: bool = False) -> str:
    """RFC 3339 (UTC) of epoch seconds; whole seconds unless ``micro`` (Events' ``eventTime``)."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339(micro: bool = False) -> str:
    """The current UTC time as the API server writes it."""
    return format_time(datetime.now(UTC).timestamp(), micro)
