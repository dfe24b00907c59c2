"""What every page's browser test checks, at desktop and phone width: nothing scrolls sideways,
and axe-core finds no accessibility violation.

axe-core (MPL-2.0, from npm, tests/assets/) is evaluated through the browser's debugging
protocol, which the page's Content-Security-Policy does not govern, so the page is tested with
its real policy in force.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

AXE_SOURCE = (Path(__file__).parents[1] / "assets" / "axe-4.14.1.min.js").read_text()
WIDTHS = (1280, 390)  # a desktop and a phone


def sideways_overflow(page: Any) -> int:
    """How many CSS pixels the page is wider than the window (0: it fits)."""
    return int(page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth"))


def accessibility_violations(page: Any) -> list[str]:
    """axe-core's violations on the page as it stands: "rule: target, target …" each."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE_SOURCE)
    return page.evaluate(
        """async () => (await axe.run(document)).violations.map(
            v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '))"""
    )


def check_page(page: Any, url: str, widths: tuple[int, ...] = WIDTHS) -> None:
    """Open `url` at each width and assert the page fits and has no accessibility violation."""
    for width in widths:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(url)
        page.wait_for_load_state("networkidle")
        assert sideways_overflow(page) <= 0, f"{url} scrolls sideways at {width} px"
        violations = accessibility_violations(page)
        assert not violations, f"{url} at {width} px: {violations}"
