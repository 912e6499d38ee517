"""DRA device selectors (CEL) evaluated as Kubernetes evaluates them, with Google's CEL runtime.

A claim or a DeviceClass selects devices with CEL expressions over ``device``: ``driver``,
``allowMultipleAllocations``, ``attributes[domain][name]`` and ``capacity[domain][name]``
(``k8s.io/dynamic-resource-allocation/cel/compile.go``). gpupool evaluates them itself, because
gpupool, not kube-scheduler, places claims on its devices. What is reproduced, and why:

* **The environment.** ``quantity()`` / ``isQuantity()`` with ``compareTo``, ``isGreaterThan``,
  ``isLessThan``, ``add``, ``sub``, ``asInteger``, ``isInteger``, ``asApproximateFloat``,
  ``sign``; ``semver()`` / ``isSemver()`` (also with ``normalize``) with ``compareTo``,
  ``isGreaterThan``, ``isLessThan``, ``major``, ``minor``, ``patch``; CEL's strings, math,
  optional (``.?name.orValue(...)``) and ``cel.bind`` extensions. Kubernetes' lists, regex, URL,
  IP, CIDR and format libraries are not provided: an expression that uses them fails to compile
  with the function named, so the pod pends with that reason instead of being placed wrongly.
* **Values.** Capacities are quantities and ``version`` attributes semantic versions, so
  ``device.capacity["gpu.gpupool.io"].memory.isGreaterThan(quantity("40Gi"))`` works, and
  ``quantity("1Gi") == quantity("1024Mi")`` holds (equality is by value, as in Kubernetes).
* **Missing things are errors.** An attribute a device lacks raises "no such key"; Kubernetes
  turns a domain the device lacks into an empty map first, so ``has(...)`` and
  ``.?name.orValue(...)`` work across domains: every domain the expression names as a string
  literal is given as an empty map when absent (a domain computed at run time is not).
* **A selector that errors does not match**, and the error is kept for the pod's pending reason
  (Kubernetes stops the whole allocation at the first such device; gpupool marks that device
  ineligible and tries the others, which can only place pods Kubernetes would also place on
  devices where the selector evaluates).
* **Compile once.** Each distinct expression is compiled (and type-checked: an unknown function,
  a wrong argument type, a result that is not bool, a ``device`` field that does not exist) once
  per process; errors are cached too, they do not change.

``cel-expr-python`` (the ``dra`` extra) is imported when the first selector is compiled: the
scheduler and agent start without it, and the pure core never imports this module. Custom
values cross into CEL as protobuf messages (``gpupool.cel.Quantity``, ``gpupool.cel.Semver``),
the one way its Python bindings carry a value type of their own.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpupool.kube.objects.dra.cel_values import (
    QUANTITY_FUNCTIONS,
    SEMVER_FUNCTIONS,
    CelValues,
    Overload,
    Semver,
    quantity_value,
    semver_value,
)
from gpupool.kube.objects.dra.records import Device

MAX_EXPRESSION_LENGTH = 10 * 1024
"""``CELSelectorExpressionMaxLength`` of resource.k8s.io/v1."""
DEVICE_FIELDS = frozenset({"driver", "allowMultipleAllocations", "attributes", "capacity"})
_DEVICE_FIELD = re.compile(r"\bdevice\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
_STRING_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'')


class SelectorCompileError(ValueError):
    """A selector expression that cannot be compiled; the message says why (not where)."""


@dataclass(frozen=True, slots=True)
class CelDevice:
    """One device as selectors see it, built once and evaluated against many selectors.

    Attributes:
        driver: The driver of its slice.
        attributes: Domain to name to value (a quantity or semver already converted).
        capacity: Domain to name to quantity.
        allow_multiple_allocations: As in the slice.
    """

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Any]]
    allow_multiple_allocations: bool


def _split(name: str, driver: str) -> tuple[str, str]:
    domain, _, rest = name.rpartition("/")
    return (domain or driver), rest


def cel_device(driver: str, device: Device, values: CelValues) -> CelDevice:
    """``device`` of a slice of ``driver`` as CEL input (names without a domain get the driver's).

    Raises:
        ValueError: A ``version`` attribute that is not a semantic version (Kubernetes refuses
            the device the same way).
    """
    attributes: dict[str, dict[str, Any]] = {}
    for name, attribute in device.attributes.items():
        domain, key = _split(name, driver)
        value = attribute.value()
        if attribute.version is not None:
            value = semver_value(values, attribute.version, normalize=False)
        attributes.setdefault(domain, {})[key] = value
    capacity: dict[str, dict[str, Any]] = {}
    for name, amount in device.capacity.items():
        domain, key = _split(name, driver)
        capacity.setdefault(domain, {})[key] = quantity_value(values, amount.value)
    return CelDevice(driver, attributes, capacity, bool(device.allow_multiple_allocations))


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a device matches a selector; ``error`` is set when evaluating failed."""

    matches: bool
    error: str = ""


class CompiledSelector:
    """One compiled expression.

    Args:
        expression: The source.
        program: cel-expr-python's compiled expression.
        domains: Domains named as string literals (given as empty maps when a device lacks them).
        values: The value types' message classes.
    """

    def __init__(self, expression: str, program: Any, domains: frozenset[str], values: CelValues):
        self.expression = expression
        self._program = program
        self._domains = domains
        self._values = values

    def _activation(self, device: CelDevice) -> dict[str, Any]:
        attributes: Mapping[str, Any] = device.attributes
        capacity: Mapping[str, Any] = device.capacity
        if not self._domains <= attributes.keys():
            attributes = {**{d: {} for d in self._domains}, **attributes}
        if not self._domains <= capacity.keys():
            capacity = {**{d: {} for d in self._domains}, **capacity}
        return {
            "device": {
                "driver": device.driver,
                "allowMultipleAllocations": device.allow_multiple_allocations,
                "attributes": attributes,
                "capacity": capacity,
            }
        }

    def evaluate(self, device: CelDevice) -> Verdict:
        """Evaluate on one device; an error (a missing attribute, an overflow) does not match."""
        types = self._values.cel.Type
        try:
            result = self._program.eval(data=self._activation(device))
        except Exception as error:  # a Python implementation raised: the device does not match
            return Verdict(False, _hinted(str(error)))
        if result.type() == types.ERROR:
            return Verdict(False, _hinted(str(result.value())))
        value = result.value()
        if not isinstance(value, bool):
            return Verdict(False, f"CEL result of type {result.type().name()} is not a bool")
        return Verdict(value)


def _hinted(message: str) -> str:
    if "not found" in message.lower() or "no such key" in message.lower():
        return (
            f"{message}: consider CEL optional chaining (.? followed by orValue()) or "
            "guarding the check with has() for optional fields"
        )
    return message


class SelectorCompiler:
    """Compiles selector expressions once each (thread-safe; shared by everything in a process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._env: Any = None
        self._values: CelValues | None = None
        self._compiled: dict[str, CompiledSelector | SelectorCompileError] = {}

    @property
    def values(self) -> CelValues:
        """The value types (loads the CEL runtime on first use)."""
        with self._lock:
            return self._load()[1]

    def _load(self) -> tuple[Any, CelValues]:
        if self._env is None or self._values is None:
            from cel_expr_python import cel
            from cel_expr_python.ext import ext_bindings, ext_math, ext_optional, ext_strings

            values = CelValues.create(cel)
            functions = [
                cel.FunctionDecl(name, [_overload(cel, *o) for o in overloads])
                for name, overloads in _declarations(values).items()
            ]
            self._env = cel.NewEnv(
                values.pool,
                variables={"device": cel.Type.Map(cel.Type.STRING, cel.Type.DYN)},
                extensions=[
                    ext_bindings.ExtBindings(),
                    ext_optional.ExtOptional(),
                    ext_strings.ExtStrings(),
                    ext_math.ExtMath(),
                ],
                functions=functions,
            )
            self._values = values
        return self._env, self._values

    def compile(self, expression: str) -> CompiledSelector:
        """The compiled selector (cached).

        Raises:
            SelectorCompileError: It does not compile, is too long, names a ``device`` field
                that does not exist, or does not evaluate to a bool.
        """
        with self._lock:
            cached = self._compiled.get(expression)
            if cached is None:
                cached = self._compile(expression)
                self._compiled[expression] = cached
        if isinstance(cached, SelectorCompileError):
            raise cached
        return cached

    def _compile(self, expression: str) -> CompiledSelector | SelectorCompileError:
        if len(expression) > MAX_EXPRESSION_LENGTH:
            return SelectorCompileError(
                f"longer than {MAX_EXPRESSION_LENGTH} characters ({len(expression)})"
            )
        unknown = sorted({m for m in _DEVICE_FIELD.findall(expression)} - DEVICE_FIELDS)
        if unknown:
            return SelectorCompileError(
                f"compilation failed: undefined field {unknown[0]!r} of device "
                f"(it has {', '.join(sorted(DEVICE_FIELDS))})"
            )
        env, values = self._load()
        try:
            program = env.compile(expression)
        except Exception as error:
            return SelectorCompileError(f"compilation failed: {error}")
        returned = program.return_type()
        if returned not in (values.cel.Type.BOOL, values.cel.Type.DYN):
            return SelectorCompileError(f"must evaluate to bool, not {returned.name()}")
        literals = {a or b for a, b in _STRING_LITERAL.findall(expression)}
        return CompiledSelector(expression, program, frozenset(literals), values)


def _overload(
    cel: Any, overload_id: str, result: Any, parameters: Any, member: bool, impl: Any
) -> Any:
    if impl is None:
        return cel.Overload(overload_id, result, parameters, is_member=member)
    return cel.Overload(overload_id, result, parameters, is_member=member, impl=impl)


def _declarations(values: CelValues) -> dict[str, list[tuple[Any, ...]]]:
    """Name to overloads ``(id, result type, parameter types, is member, implementation)``.

    The runtime tells values apart only by kind, and both value types are messages, so
    ``isGreaterThan(quantity, quantity)`` and ``isGreaterThan(semver, semver)`` cannot both be
    registered: the first overload of each runtime signature gets one implementation that picks
    the overload by the arguments' types; the others are declared for the type checker only.
    """
    declarations: dict[str, list[tuple[Any, ...]]] = {}
    groups: dict[tuple[str, bool, tuple[str, ...]], list[Overload]] = {}
    for table in (QUANTITY_FUNCTIONS, SEMVER_FUNCTIONS):
        for overload in table:
            name, overload_id, result, parameters, member, _ = overload
            kinds = tuple("message" if p in _VALUE_TYPES else p for p in parameters)
            group = groups.setdefault((name, member, kinds), [])
            group.append(overload)
            implementation = values.bound(_dispatcher(group)) if len(group) == 1 else None
            declarations.setdefault(name, []).append(
                (
                    overload_id,
                    values.type_of(result),
                    [values.type_of(p) for p in parameters],
                    member,
                    implementation,
                )
            )
    return declarations


_VALUE_TYPES = {"quantity": Fraction, "semver": Semver}
_PLAIN_TYPES: dict[str, type] = {"string": str, "bool": bool, "int": int, **_VALUE_TYPES}


def _dispatcher(group: list[Overload]) -> Callable[..., Any]:
    """One implementation for every overload in ``group`` (filled in later by the caller)."""

    def call(*arguments: Any) -> Any:
        for _, _, _, parameters, _, function in group:
            if all(type(a) is _PLAIN_TYPES[p] for a, p in zip(arguments, parameters, strict=True)):
                return function(*arguments)
        raise TypeError("no matching overload")

    return call


COMPILER = SelectorCompiler()
"""The process's compiler: one cache for the scheduler's claims, classes and the webhook."""
