"""The browser fixtures of the capacity page's tests, shared here."""

from tests.pages.conftest import chromium, screenshot_dir  # noqa: F401  (pytest fixtures)
