"""Reading the dashboard in one go, so that htmx's refresh cannot pull elements away mid-read.

htmx swaps the live fragment every two seconds: an element found by one WebDriver call may be
detached by the next (CI once failed with StaleElementReferenceException reading a counter's
text right after finding it). A single script runs between two swaps and sees one version of
the page.
"""

from __future__ import annotations

from typing import Any

from selenium.webdriver.remote.webdriver import WebDriver


def visible(element: str = "e") -> str:
    """Script: whether ``element`` is laid out on the page (what ``is_displayed`` asks)."""
    return f"({element}.offsetParent !== null && {element}.getBoundingClientRect().width > 0)"


def text_of(element: str = "e") -> str:
    """Script: the text of ``element`` with its whitespace collapsed, as a reader sees it."""
    return f"{element}.textContent.replace(/\\s+/g, ' ').trim()"


def read(page: WebDriver, selector: str, script: str) -> list[Any]:
    """One value per element matching ``selector`` (``script`` sees it as ``e``), read at once."""
    found: list[Any] = page.execute_script(
        f"return [...document.querySelectorAll(arguments[0])].map(e => {script});", selector
    )
    return found


def texts(page: WebDriver, selector: str) -> list[str]:
    """The text of every element matching ``selector``, read at once."""
    return [str(text) for text in read(page, selector, text_of())]
