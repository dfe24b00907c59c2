"""Who a test's own set-up acts as, so the audit log tells it apart from staff's changes."""

from __future__ import annotations

from fairness.actions.audit import Actor

SETUP = Actor(None, name="test-setup")
