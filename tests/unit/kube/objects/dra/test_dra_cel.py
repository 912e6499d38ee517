"""DRA selectors evaluate as in Kubernetes: quantities, semvers, missing attributes, errors."""

from __future__ import annotations

import pytest

from gpupool.agent.dra.slice import slice_devices
from gpupool.agent.fakenvml import preset_devices
from gpupool.kube.objects.dra.cel import COMPILER, SelectorCompileError, cel_device
from gpupool.kube.objects.dra.cel_values import Semver, parse_semver
from gpupool.kube.objects.dra.records import DRIVER

DEVICES = [
    cel_device(DRIVER, device, COMPILER.values)
    for device in slice_devices(preset_devices("a100-mig", "n1"))
]  # 4 GPUs in MIG mode (7 x 1g.10gb each) and 4 whole A100s: 28 MIG devices, 4 GPU devices


def matches(expression: str) -> int:
    selector = COMPILER.compile(expression)
    return sum(selector.evaluate(device).matches for device in DEVICES)


@pytest.mark.parametrize(
    ("expression", "count"),
    [
        ('device.driver == "gpu.gpupool.io"', 32),
        ('device.attributes["gpu.gpupool.io"].type == "gpu"', 4),
        ('device.attributes["gpu.gpupool.io"].index >= 6', 2),  # GPUs 6 and 7
        ('device.capacity["gpu.gpupool.io"].memory.isGreaterThan(quantity("40Gi"))', 4),
        ('device.capacity["gpu.gpupool.io"].memory.compareTo(quantity("9856Mi")) == 0', 28),
        ('device.attributes["gpu.gpupool.io"].driverVersion.isLessThan(semver("570.124.7"))', 32),
        ('device.attributes["gpu.gpupool.io"].driverVersion.major() == 570', 32),
        ("device.allowMultipleAllocations", 4),
        ('cel.bind(g, device.attributes["gpu.gpupool.io"], g.migEnabled && g.parentIndex == 0)', 7),
        ('device.attributes["gpu.gpupool.io"].model.lowerAscii() == "a100"', 32),
        # a domain the device does not have is an empty map, as in Kubernetes
        ('!has(device.attributes["example.com"].x)', 32),
        ('device.attributes["example.com"].?x.orValue(1) == 1', 32),
        ('quantity("1Gi") == quantity("1024Mi")', 32),
        ('quantity("1.5").add(quantity("500m")).asInteger() == 2', 32),
        ('sign(quantity("-1k")) == -1 && quantity("1").sub(2).isLessThan(quantity("0"))', 32),
        ('semver("v1.02", true) == semver("1.2.0") && isSemver("1.2.3-rc.1+b5")', 32),
        ('semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))', 32),
        ('semver("1.0.0-rc.1+build.5").compareTo(semver("1.0.0-rc.1")) == 0', 32),
        ("false", 0),
    ],
)
def test_selectors_match_the_devices_kubernetes_would(expression: str, count: int) -> None:
    assert matches(expression) == count


def test_a_missing_attribute_is_an_error_that_does_not_match() -> None:
    selector = COMPILER.compile('device.attributes["gpu.gpupool.io"].profile == "1g.10gb"')
    verdicts = [selector.evaluate(device) for device in DEVICES]
    assert sum(v.matches for v in verdicts) == 28
    errors = [v.error for v in verdicts if v.error]
    assert len(errors) == 4  # the four whole GPUs have no profile
    assert all('"profile"' in e and "orValue" in e for e in errors)


def test_runtime_failures_in_gpupools_functions_are_errors() -> None:
    verdict = COMPILER.compile('quantity("1.5").asInteger() == 1').evaluate(DEVICES[0])
    assert not verdict.matches
    assert "cannot convert value to integer" in verdict.error
    bad = COMPILER.compile('semver("1.2") == semver("1.2.0")').evaluate(DEVICES[0])
    assert not bad.matches
    assert "not a semantic version" in bad.error


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ('device.attributes["gpu.gpupool.io"].model ==', "Syntax error"),
        ("device.nodeName == 'n1'", "undefined field 'nodeName'"),
        ('quantity("1Gi").isGreaterThan(1)', "no matching overload"),
        ("1 + 1", "must evaluate to bool, not INT"),
        ('device.attributes["gpu.gpupool.io"].model.matches("x") && ip("1.2.3.4") != null', "ip"),
        ("x" * 10241, "longer than 10240"),
    ],
)
def test_compile_errors_say_why(expression: str, why: str) -> None:
    with pytest.raises(SelectorCompileError, match=why):
        COMPILER.compile(expression)
    with pytest.raises(SelectorCompileError):  # cached, same answer
        COMPILER.compile(expression)


def test_one_compilation_per_distinct_expression() -> None:
    expression = 'device.attributes["gpu.gpupool.io"].index == 7'
    assert COMPILER.compile(expression) is COMPILER.compile(expression)


def test_semver_precedence_follows_the_specification() -> None:
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
    ]
    versions = [parse_semver(v) for v in ordered]
    for i, low in enumerate(versions):
        for high in versions[i + 1 :]:
            assert low.compare(high) == -1
            assert high.compare(low) == 1
    assert parse_semver("v01.2", normalize=True) == Semver(1, 2, 0)
    for bad in ("1.2", "01.2.3", "1.2.3-01", "v1.2.3", ""):
        with pytest.raises(ValueError, match=r"semantic version|leading zeros"):
            parse_semver(bad)


def test_quantities_are_exact() -> None:
    selector = COMPILER.compile('quantity("0.1").add(quantity("0.2")) == quantity("300m")')
    assert selector.evaluate(DEVICES[0]).matches
    assert not COMPILER.compile('quantity("0.1") == quantity("101m")').evaluate(DEVICES[0]).matches
