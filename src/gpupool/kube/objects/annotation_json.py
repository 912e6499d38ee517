"""Typed JSON annotations the node agent writes on its Node, read one way.

The usage signal (:mod:`.usage_signal`) and the contention signal (:mod:`.contention_signal`)
are msgspec structs written as compact JSON; reading either must name the annotation and the
field when the value is not what the struct allows, and never raise anything but the signal's
own error. One reader keeps both answering alike.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

T = TypeVar("T")


def decode_annotation(text: str, kind: type[T], annotation: str, error: type[ValueError]) -> T:
    """``text`` as ``kind``; ``error`` (naming ``annotation`` and the field) when it is not."""
    try:
        return msgspec.json.decode(text, type=kind)
    except msgspec.ValidationError as problem:
        raise error(f"{annotation}: {problem}") from None
    except msgspec.DecodeError as problem:
        raise error(f"{annotation}: not JSON ({problem})") from None
