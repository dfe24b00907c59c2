from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import Q

from fairness.actions.tokens import revoke_admin_token
from fairness.gateway.api_keys import hash_secret
from fairness.management.audited import AuditedCommand
from fairness.models import AdminToken


class Command(AuditedCommand):
    help = "Revoke an admin token by its visible prefix (e.g. gpa-AbCdEfGh) or its whole secret."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("token", help="The prefix shown on the staff pages, or the secret itself.")

    def handle(self, *args: Any, token: str, **options: Any) -> None:
        given = token.strip().rstrip("…")  # the pages show the prefix with an ellipsis
        found = AdminToken.objects.select_related("owner").filter(
            Q(prefix=given) | Q(secret_hash=hash_secret(given))
        ).first()
        if found is None:
            raise CommandError("No admin token with that prefix or secret.")  # never echo what may be a secret
        if found.revoked_at is not None:
            self.stdout.write(f"{found.prefix}… of {found.owner} was already revoked.")
            return
        revoke_admin_token(self.actor(), found)
        self.stdout.write(f"Revoked admin token {found.prefix}… of {found.owner}. Its next request is refused.")
