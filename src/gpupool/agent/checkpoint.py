"""The agent's checkpoints: a JSON file per map, written atomically, read back strictly.

The hand-off's token map and the prepared DRA claims must survive an agent restart, or a
restarting container (or the kubelet's retried prepare) finds nothing. Both are small maps that
change at most a few times per pod, so each change rewrites the whole file through a temporary
file and a rename: a crash leaves the old map or the new one, never half of one. An unreadable
file is never guessed around: the caller starts empty (which refuses until the kubelet asks
again, never gives a wrong GPU) and the file is kept, renamed, for a person to read.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import TypeVar

import msgspec

log = logging.getLogger(__name__)

Value = TypeVar("Value")


def load(path: Path, kind: type[dict[str, Value]], what: str) -> dict[str, Value]:
    """The map stored at ``path`` (empty when there is none or it is unreadable)."""
    if not path.is_file():
        return {}
    try:
        return msgspec.json.decode(path.read_bytes(), type=kind)
    except msgspec.MsgspecError as error:
        log.error("%s unreadable (%s); starting with no %s", path, error, what)
        path.rename(path.with_suffix(".unreadable"))
        return {}


def save(path: Path, value: object) -> None:
    """Write ``value`` to ``path`` atomically (temporary file in the same folder, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(handle, "wb") as out:
        out.write(msgspec.json.encode(value))
    os.replace(temporary, path)
