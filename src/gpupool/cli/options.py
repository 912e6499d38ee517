"""Parsing of option values that Typer cannot type by itself."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

MAX_SEEDS = 1000


class SeedsError(ValueError):
    """A ``--seeds`` value that is not a seed list."""


def parse_seeds(text: str) -> list[int]:
    """Parse ``42-51``, ``42,43,50`` or ``42`` (ranges inclusive, order kept, no duplicates).

    Raises:
        SeedsError: Empty, non-integer, negative, reversed range, duplicate or too many seeds.
    """
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise SeedsError(f"empty item in {text!r}")
        low, sep, high = part.partition("-")
        try:
            first = int(low)
            last = int(high) if sep else first
        except ValueError:
            raise SeedsError(f"{part!r} is not a seed or a range like 42-51") from None
        if first < 0 or last < first:
            raise SeedsError(f"{part!r} must be a non-negative seed or an increasing range")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise SeedsError(f"at most {MAX_SEEDS} seeds")
        seeds.extend(range(first, last + 1))
    if len(set(seeds)) != len(seeds):
        raise SeedsError(f"duplicate seeds in {text!r}")
    return seeds


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` (which names the option) and return the exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


LogLevel = Annotated[str, typer.Option(help="debug, info, warning or error.")]
"""The ``--log-level`` option of the long-running commands."""


def log_level_of(name: str) -> int:
    """The logging level ``--log-level`` names."""
    level = logging.getLevelNamesMapping().get(name.upper())
    if level is None:
        raise fail(f"--log-level: unknown level {name!r}")
    return level


def start_logging(level: int) -> None:
    """Log at ``level`` (:func:`log_level_of`), with times, to stderr."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
