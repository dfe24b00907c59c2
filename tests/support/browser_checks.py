"""What every page's browser test checks, at desktop and phone width: nothing scrolls sideways,
and axe-core finds no accessibility violation.

axe-core (MPL-2.0, from npm, tests/assets/) is evaluated through the browser's debugging
protocol, which the page's Content-Security-Policy does not govern, so the page is tested with
its real policy in force.
"""

from __future__ import annotations

import time
import weakref
from pathlib import Path
from typing import Any

AXE_SOURCE = (Path(__file__).parents[1] / "assets" / "axe-4.14.1.min.js").read_text()
WIDTHS = (1280, 390)  # a desktop and a phone
# Playwright's `networkidle` waits for 500 ms without a request, a fixed half second that was
# nearly half of a page check; the pages' scripts start their fetches at load or in the promise
# chain of the last one, so a tenth of that tells the same "settled".
QUIET_SECONDS = 0.1


class Requests:
    """How many of a page's requests are in flight, and since when that number last changed."""

    def __init__(self, page: Any) -> None:
        self.in_flight = 0
        self.changed = time.monotonic()
        page.on("request", lambda request: self._count(+1))
        page.on("requestfinished", lambda request: self._count(-1))
        page.on("requestfailed", lambda request: self._count(-1))

    def _count(self, step: int) -> None:
        self.in_flight = max(0, self.in_flight + step)
        self.changed = time.monotonic()


_watched: weakref.WeakKeyDictionary[Any, Requests] = weakref.WeakKeyDictionary()


def requests_of(page: Any) -> Requests:
    """The page's request count, watched from the first time it is asked for."""
    if page not in _watched:
        _watched[page] = Requests(page)
    return _watched[page]


def open_settled(page: Any, url: str, timeout: float = 15.0) -> None:
    """Open `url`, wait for its load event, then until no request has been in flight for
    QUIET_SECONDS."""
    requests = requests_of(page)
    page.goto(url)
    deadline = time.monotonic() + timeout
    while requests.in_flight or time.monotonic() - requests.changed < QUIET_SECONDS:
        assert time.monotonic() < deadline, f"{url}: {requests.in_flight} requests still in flight after {timeout} s"
        page.wait_for_timeout(20)  # Playwright delivers the page's events while it waits


def sideways_overflow(page: Any) -> int:
    """How many CSS pixels the page is wider than the window (0: it fits)."""
    return int(page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth"))


def accessibility_violations(page: Any, rules: list[str] | None = None) -> list[str]:
    """axe-core's violations on the page as it stands: "rule: target, target …" each (of `rules`
    only, when given)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE_SOURCE)
    return page.evaluate(
        """async (rules) => (await axe.run(document, rules ? {runOnly: {type: 'rule', values: rules}} : {}))
            .violations.map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '))""",
        rules,
    )


def check_page(page: Any, url: str, widths: tuple[int, ...] = WIDTHS) -> None:
    """Open `url` at each width and assert the page fits and has no accessibility violation."""
    for width in widths:
        page.set_viewport_size({"width": width, "height": 900})
        open_settled(page, url)
        assert sideways_overflow(page) <= 0, f"{url} scrolls sideways at {width} px"
        violations = accessibility_violations(page)
        assert not violations, f"{url} at {width} px: {violations}"


def check_current_page(page: Any, what: str, widths: tuple[int, ...] = WIDTHS) -> None:
    """check_page for the page as it stands, not reloaded: one a form led to, whose errors or
    messages a reload would lose (or which would send the form again)."""
    for width in widths:
        page.set_viewport_size({"width": width, "height": 900})
        assert sideways_overflow(page) <= 0, f"{what} scrolls sideways at {width} px"
        violations = accessibility_violations(page)
        assert not violations, f"{what} at {width} px: {violations}"
