"""The cast the shared fixtures make (alice and bob interactive, carol on batch, sam staff) and the
model the session's simulated engine serves."""

from __future__ import annotations

from dataclasses import dataclass

MODEL = "sim"
EMBEDDING_MODEL = "sim-embed"  # an embedding model, on its own replica (embedding_replica)
# sam's address on the staff pages (the audit log records it).
STAFF_IP = "127.10.0.7"
# sam's password (the `staff` fixture sets it), and alice's for the tests that give her one.
STAFF_PASSWORD = "a long staff password"
ALICE_PASSWORD = "alice's long password"


@dataclass
class Member:
    username: str
    tier: str
    secret: str
    key_id: int
    user_id: int = 0

    @property
    def unit(self) -> str:
        """What admission's caps count for this member's requests: the person in the tier."""
        return f"p{self.user_id}.{self.tier}"
