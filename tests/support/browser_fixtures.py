"""The browser tests' fixtures, registered once for the whole suite by `tests/conftest.py`
(`pytest_plugins`): headless Chromium on demand, and where screenshots go."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.browser import CHROMIUM, launch_chromium
from tests.support.processes import LOG_DIR

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture
def chromium() -> Callable[[], AbstractContextManager[Browser]]:
    """Opens headless Chromium when the test says so (`with chromium() as browser:`).

    Not a browser fixture: while sync Playwright runs, this thread counts as inside an event loop,
    so Django refuses database calls here, fixtures' set-up and tear-down among them. The test
    opens the browser once its data is in place and closes it before the tables are flushed.
    """
    if not CHROMIUM.exists():
        pytest.fail(
            f"Browser tests need Debian's Chromium at {CHROMIUM}, which is missing. Install it "
            "with `apt-get install -y chromium` (scripts/ensure-system.sh does it as root). "
            "Do not run `playwright install`: it downloads another browser and fails offline.",
            pytrace=False,
        )
    return launch_chromium


@pytest.fixture
def screenshot_dir() -> Path:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    return LOG_DIR
