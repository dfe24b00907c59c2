"""What the tests import: process starters, waiting with a deadline, the test Redis databases, the
cast and the other plain functions, classes and constants shared across the suite's folders.

Fixtures stay in `conftest.py` files; fixtures that several folders use are registered once, from
the plugin modules here that `tests/conftest.py` names in `pytest_plugins`."""
