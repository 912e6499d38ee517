from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest

from gpupool.kube.objects.quantity import QuantityError, parse_quantity, to_count, to_mib, to_milli


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("16000", Fraction(16000)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("0.1", Fraction(1, 10)),
        ("+2", Fraction(2)),
        ("-1", Fraction(-1)),
        ("2Gi", Fraction(2 * 2**30)),
        ("512Mi", Fraction(512 * 2**20)),
        ("1Ki", Fraction(1024)),
        ("1Ei", Fraction(2**60)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1E", Fraction(10**18)),
        ("250n", Fraction(250, 10**9)),
        ("3u", Fraction(3, 10**6)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1.5e-2", Fraction(15, 1000)),
        ("2e+2", Fraction(200)),
        ("0.5Gi", Fraction(2**29)),
    ],
)
def test_parse_quantity_is_exact(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text", ["lots", "1Zi", "", "Gi", "1.5.5", ".", "1e", "1K", "1 Gi", "m", "²", "\uff11"]
)
def test_parse_quantity_refuses_bad_strings(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_quantity_error_names_the_text() -> None:
    with pytest.raises(QuantityError, match="'1Zi'"):
        parse_quantity("1Zi")


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("1", 1000),
        ("1.5", 1500),
        ("0.1", 100),
        ("1e3", 1_000_000),
        ("1k", 1_000_000),
        ("1n", 1),  # rounded up: a request is never made smaller
        ("1500u", 2),
        ("100001u", 101),
        ("0", 0),
    ],
)
def test_to_milli(text: str, milli: int) -> None:
    assert to_milli(text) == milli


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("2Gi", 2048),
        ("512Mi", 512),
        ("1Mi", 1),
        ("1", 1),  # one byte rounds up to one MiB
        ("0.1", 1),
        ("1048577", 2),
        ("1048576", 1),
        ("1k", 1),
        ("1G", 954),  # 10**9 bytes = 953.67 MiB, rounded up
        ("1e9", 954),
        ("0", 0),
    ],
)
def test_to_mib(text: str, mib: int) -> None:
    assert to_mib(text) == mib


@pytest.mark.parametrize(
    ("text", "count"),
    [("1", 1), ("8", 8), ("1e3", 1000), ("1k", 1000), ("1000m", 1), ("2.0", 2), ("-3", -3)],
)
def test_to_count(text: str, count: int) -> None:
    assert to_count(text) == count


@pytest.mark.parametrize("text", ["1.5", "0.5", "500m", "0.1", "1n", "1e-1"])
def test_to_count_refuses_fractions(text: str) -> None:
    with pytest.raises(QuantityError, match="not a whole number"):
        to_count(text)


@pytest.mark.parametrize("convert", [to_milli, to_mib, to_count])
@pytest.mark.parametrize("text", ["lots", "1Zi", ""])
def test_converters_refuse_bad_strings(convert: Callable[[str], int], text: str) -> None:
    with pytest.raises(QuantityError):
        convert(text)
