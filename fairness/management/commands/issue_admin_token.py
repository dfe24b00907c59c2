from typing import Any, cast

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser

from fairness.actions.keys import expiry_in_days
from fairness.actions.tokens import issue_admin_token
from fairness.management.audited import AuditedCommand
from fairness.models import AdminToken

LABEL_MAX = cast(int, AdminToken._meta.get_field("label").max_length)  # a CharField's: always set


class Command(AuditedCommand):
    help = ("Issue a token for the admin JSON API to a staff member; it acts as them. "
            "The secret is printed once, alone on the last line.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="An active staff member's username.")
        parser.add_argument("--label", default="", help="What it is for, e.g. “nightly user sync”.")
        parser.add_argument("--expires-days", type=int, default=None,
                            help="Leave out for a token that does not expire.")

    def handle(self, *args: Any, user: str, label: str, expires_days: int | None, **options: Any) -> None:
        if expires_days is not None and not 1 <= expires_days <= 3650:
            raise CommandError("--expires-days must be from 1 to 3650")
        if len(label) > LABEL_MAX or "\x00" in label:
            raise CommandError(f"--label: at most {LABEL_MAX} characters, no NUL")
        owner = get_user_model().objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"No user named {user!r}.")
        if not (owner.is_active and owner.is_staff):
            raise CommandError(f"{user} is not active staff: admin tokens are for staff only.")
        token, secret = issue_admin_token(
            self.actor(), owner, label, expiry_in_days(expires_days)
        )
        expiry = f"it expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else "it does not expire"
        self.stdout.write(f"Issued admin token {token.prefix}… for {user}; {expiry}. Scripts send it as "
                          "'Authorization: Bearer <token>' to /api/admin/. Store the secret now:")
        self.stdout.write(secret)
