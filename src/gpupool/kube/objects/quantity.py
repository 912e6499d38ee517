"""Kubernetes resource quantities ("500m", "1.5", "64Gi", "1e3") as exact numbers.

The API server has already checked the syntax of every quantity it stores, but a value can still
be out of what gpupool accepts (a fractional GPU count, a negative number), so parsing returns an
exact :class:`~fractions.Fraction` and the callers decide, naming the field when they refuse.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_PATTERN = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))$")
MIB = 2**20
MAX_EXPONENT = 100
"""Largest decimal exponent parsed: ``1e999999999`` would build a billion-digit number and
stall the scheduler on one pod; no resource amount comes near 10**100."""


class QuantityError(ValueError):
    """A quantity string is not valid Kubernetes quantity syntax."""


def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity string."""
    if text.isascii() and text.isdigit():  # the common case: "1", "8", "16000"
        return Fraction(int(text))
    match = _PATTERN.match(text.strip())
    if not match:
        raise QuantityError(f"{text!r} is not a quantity")
    number, exponent, suffix = match.groups()
    try:
        value = Fraction(number)
    except ValueError:
        raise QuantityError(f"{text!r} is not a quantity") from None
    if exponent:
        power = int(exponent[1:])
        if abs(power) > MAX_EXPONENT:
            raise QuantityError(f"{text!r} has an exponent beyond ±{MAX_EXPONENT}")
        return value * Fraction(10) ** power
    if suffix not in _SUFFIXES:
        raise QuantityError(f"{text!r} has an unknown suffix {suffix!r}")
    return value * _SUFFIXES[suffix]


def to_milli(text: str) -> int:
    """A CPU quantity in milli-cores, rounded up (a request is never made smaller)."""
    return math.ceil(parse_quantity(text) * 1000)


def to_mib(text: str) -> int:
    """A memory quantity (bytes) in MiB, rounded up."""
    return math.ceil(parse_quantity(text) / MIB)


def to_value(text: str) -> int:
    """A quantity as a whole number, rounded up (kube's ``Value()``: bytes, devices)."""
    return math.ceil(parse_quantity(text))


def to_count(text: str) -> int:
    """A whole-number quantity (an extended resource), or an error for a fraction."""
    value = parse_quantity(text)
    if value.denominator != 1:
        raise QuantityError(f"{text!r} is not a whole number")
    return int(value)


_BINARY = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


def binary_quantity(value: int) -> str:
    """A byte count as the API server writes it back (``81920Mi`` -> ``80Gi``).

    Kubernetes stores quantities in canonical form: the largest binary suffix that keeps the
    number whole. Writing them that way lets a stored object be compared with what gpupool
    would write (a ResourceSlice re-published only when it changed, a claim's allocation
    against its record) without parsing.
    """
    if value <= 0:
        return "0" if value == 0 else f"-{binary_quantity(-value)}"
    for suffix, shift in _BINARY:
        if value % (1 << shift) == 0:
            return f"{value >> shift}{suffix}"
    return str(value)


def milli_quantity(milli: int) -> str:
    """Thousandths as the API server writes them back (``1000m`` -> ``1``, ``250m``)."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
