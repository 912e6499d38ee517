"""Kubernetes' CEL value types for DRA selectors: ``quantity`` and ``semver``, in Python.

The semantics follow ``k8s.io/apiserver/pkg/cel/library`` (``quantity.go``, ``semverlib.go``):
quantities compare and add exactly (``Fraction``, never floats), ``asInteger`` fails outside
int64 or for a fraction, ``sign`` is a global function (``sign(q)``), semantic versions are
parsed strictly (``semver("v1.2")`` is an error unless ``normalize`` is true, which strips the
``v``, leading zeros and fills the missing parts) and ordered by semver precedence, build metadata
ignored. The functions are kept as plain tables (name, overload id, types, member?, function) so
the CEL environment (:mod:`gpupool.kube.objects.dra.cel`) declares exactly these and the tests
can call them without CEL.

Values cross into CEL as two protobuf messages built at run time (``kubernetes.Quantity``,
``kubernetes.Semver``), which is what gives them a CEL type of their own: CEL's type checker
then refuses ``quantity("1Gi").isGreaterThan(1)`` at compile time, as Kubernetes does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpupool.kube.objects.quantity import QuantityError, parse_quantity

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

_NUMERIC = r"0|[1-9][0-9]*"
_IDENTIFIER = r"[0-9A-Za-z-]+"
_SEMVER = re.compile(
    rf"^({_NUMERIC})\.({_NUMERIC})\.({_NUMERIC})"
    rf"(?:-({_IDENTIFIER}(?:\.{_IDENTIFIER})*))?(?:\+({_IDENTIFIER}(?:\.{_IDENTIFIER})*))?$"
)


@dataclass(frozen=True, slots=True, order=False)
class Semver:
    """A semantic version (build metadata dropped: it does not take part in comparisons)."""

    major: int
    minor: int
    patch: int
    pre: str = ""

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by semver precedence."""
        mine, theirs = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        if self.pre == other.pre:
            return 0
        if not self.pre or not other.pre:  # a release is greater than its pre-releases
            return 1 if not self.pre else -1
        return _compare_pre(self.pre.split("."), other.pre.split("."))


def _compare_pre(left: list[str], right: list[str]) -> int:
    for a, b in zip(left, right, strict=False):
        if a == b:
            continue
        if a.isdigit() and b.isdigit():
            return -1 if int(a) < int(b) else 1
        if a.isdigit() != b.isdigit():  # numeric identifiers sort before alphanumeric ones
            return -1 if a.isdigit() else 1
        return -1 if a < b else 1
    return (len(left) > len(right)) - (len(left) < len(right))


def parse_semver(text: str, *, normalize: bool = False) -> Semver:
    """A version string as :class:`Semver`.

    Raises:
        ValueError: Not a semantic version (the message names it).
    """
    if normalize:
        text = _normalized(text)
    match = _SEMVER.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a semantic version")
    major, minor, patch, pre, _ = match.groups()
    if pre and any(p.isdigit() and len(p) > 1 and p[0] == "0" for p in pre.split(".")):
        raise ValueError(f"{text!r}: numeric pre-release identifiers must not have leading zeros")
    return Semver(int(major), int(minor), int(patch), pre or "")


def _normalized(text: str) -> str:
    parts = text.removeprefix("v").split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            parts[i] = stripped if stripped[:1].isdigit() else "0" + stripped
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def is_semver(text: str, normalize: bool = False) -> bool:
    """Whether ``text`` parses as a semantic version."""
    try:
        parse_semver(text, normalize=normalize)
    except ValueError:
        return False
    return True


def parse_exact(text: str) -> Fraction:
    """A quantity string's exact value.

    Raises:
        ValueError: Not a quantity.
    """
    try:
        return parse_quantity(text)
    except QuantityError as error:
        raise ValueError(str(error)) from None


def is_quantity(text: str) -> bool:
    """Whether ``text`` parses as a quantity."""
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def as_integer(value: Fraction) -> int:
    """The quantity as int64.

    Raises:
        ValueError: A fraction, or outside int64 (``cannot convert value to integer``).
    """
    if value.denominator != 1 or not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return int(value)


def _cmp(left: Any, right: Any) -> int:
    return int(left > right) - int(left < right)


# name, overload id, result, parameters, member?, function over plain values (Fraction, Semver)
Overload = tuple[str, str, str, tuple[str, ...], bool, Callable[..., Any]]
Table = tuple[Overload, ...]
QUANTITY_FUNCTIONS: Table = (
    ("quantity", "string_to_quantity", "quantity", ("string",), False, parse_exact),
    ("isQuantity", "is_quantity_string", "bool", ("string",), False, is_quantity),
    ("sign", "quantity_sign", "int", ("quantity",), False, lambda q: _cmp(q, 0)),
    ("isGreaterThan", "quantity_is_greater_than", "bool", ("quantity", "quantity"), True,
     lambda a, b: a > b),
    ("isLessThan", "quantity_is_less_than", "bool", ("quantity", "quantity"), True,
     lambda a, b: a < b),
    ("compareTo", "quantity_compare_to", "int", ("quantity", "quantity"), True, _cmp),
    ("asApproximateFloat", "quantity_get_float", "double", ("quantity",), True, float),
    ("asInteger", "quantity_get_int", "int", ("quantity",), True, as_integer),
    ("isInteger", "quantity_is_integer", "bool", ("quantity",), True,
     lambda q: q.denominator == 1 and INT64_MIN <= q <= INT64_MAX),
    ("add", "quantity_add", "quantity", ("quantity", "quantity"), True, lambda a, b: a + b),
    ("add", "quantity_add_int", "quantity", ("quantity", "int"), True, lambda a, b: a + b),
    ("sub", "quantity_sub", "quantity", ("quantity", "quantity"), True, lambda a, b: a - b),
    ("sub", "quantity_sub_int", "quantity", ("quantity", "int"), True, lambda a, b: a - b),
)  # fmt: skip
SEMVER_FUNCTIONS: Table = (
    ("semver", "string_to_semver", "semver", ("string",), False, parse_semver),
    ("semver", "string_bool_to_semver", "semver", ("string", "bool"), False,
     lambda text, normalize: parse_semver(text, normalize=normalize)),
    ("isSemver", "is_semver_string", "bool", ("string",), False, is_semver),
    ("isSemver", "is_semver_string_bool", "bool", ("string", "bool"), False, is_semver),
    ("isGreaterThan", "semver_is_greater_than", "bool", ("semver", "semver"), True,
     lambda a, b: a.compare(b) == 1),
    ("isLessThan", "semver_is_less_than", "bool", ("semver", "semver"), True,
     lambda a, b: a.compare(b) == -1),
    ("compareTo", "semver_compare_to", "int", ("semver", "semver"), True,
     lambda a, b: a.compare(b)),
    ("major", "semver_major", "int", ("semver",), True, lambda v: v.major),
    ("minor", "semver_minor", "int", ("semver",), True, lambda v: v.minor),
    ("patch", "semver_patch", "int", ("semver",), True, lambda v: v.patch),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class CelValues:
    """The CEL module and the two message types the values travel as.

    Attributes:
        cel: ``cel_expr_python.cel``.
        pool: The descriptor pool holding ``kubernetes.Quantity`` and ``kubernetes.Semver``.
        quantity: The Quantity message class (field ``value``: the exact value as ``n/d``).
        semver: The Semver message class (``major``, ``minor``, ``patch``, ``pre``).
    """

    cel: Any
    pool: Any
    quantity: Any
    semver: Any

    @classmethod
    def create(cls, cel: Any) -> CelValues:
        """Build the descriptor pool and message classes."""
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        field = descriptor_pb2.FieldDescriptorProto
        proto = descriptor_pb2.FileDescriptorProto(
            name="gpupool/cel/kubernetes.proto", package="kubernetes", syntax="proto3"
        )
        quantity = proto.message_type.add(name="Quantity")
        quantity.field.add(name="value", number=1, type=field.TYPE_STRING)
        semver = proto.message_type.add(name="Semver")
        for number, name in enumerate(("major", "minor", "patch"), start=1):
            semver.field.add(name=name, number=number, type=field.TYPE_INT64)
        semver.field.add(name="pre", number=4, type=field.TYPE_STRING)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        return cls(
            cel,
            pool,
            message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver")),
        )

    def type_of(self, name: str) -> Any:
        """The CEL type of a table's type name."""
        types = self.cel.Type
        plain = {"string": types.STRING, "bool": types.BOOL, "int": types.INT}
        plain["double"] = types.DOUBLE
        if name in plain:
            return plain[name]
        return types(f"kubernetes.{name.capitalize()}")

    def to_cel(self, value: Any) -> Any:
        """A plain result as a CEL value (Fraction and Semver as their messages)."""
        if isinstance(value, Fraction):
            return self.quantity(value=f"{value.numerator}/{value.denominator}")
        if isinstance(value, Semver):
            return self.semver(
                major=value.major, minor=value.minor, patch=value.patch, pre=value.pre
            )
        return value

    def from_cel(self, value: Any) -> Any:
        """A CEL argument as a plain value."""
        if isinstance(value, self.quantity):
            return Fraction(value.value)
        if isinstance(value, self.semver):
            return Semver(value.major, value.minor, value.patch, value.pre)
        return value

    def bound(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` over CEL values."""

        def call(*arguments: Any) -> Any:
            return self.to_cel(function(*(self.from_cel(a) for a in arguments)))

        return call


def quantity_value(values: CelValues, text: str) -> Any:
    """A quantity string as a CEL value.

    Raises:
        ValueError: Not a quantity.
    """
    return values.to_cel(parse_exact(text))


def semver_value(values: CelValues, text: str, *, normalize: bool) -> Any:
    """A version string as a CEL value.

    Raises:
        ValueError: Not a semantic version.
    """
    return values.to_cel(parse_semver(text, normalize=normalize))
