"""The site's reference pages (CRD fields, CLI help, REST paths) are what the code says today."""

from __future__ import annotations

from collections.abc import Callable


def test_reference_pages_are_current(generated_current: Callable[[str], None]) -> None:
    generated_current("gen_reference_docs.py")
