from typing import Any

from django.core.management.base import CommandError, CommandParser

from fairness.actions.keys import revoke
from fairness.gateway.api_keys import SECRET_PREFIX, VISIBLE_CHARS, hash_secret
from fairness.management.audited import AuditedCommand
from fairness.models import ApiKey


class Command(AuditedCommand):
    help = "Revoke an API key by its visible prefix (e.g. gp-AbCdEfGh) or its whole secret."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key", help="The prefix shown on the pages, or the whole secret "
                            "(a leaked key, say).")

    def handle(self, *args: Any, key: str, **options: Any) -> None:
        given = key.strip().rstrip("…")  # the pages show the prefix with an ellipsis
        keys = ApiKey.objects.select_related("owner")
        if given.startswith(SECRET_PREFIX) and len(given) > VISIBLE_CHARS:
            found = keys.filter(secret_hash=hash_secret(given)).first()
            if found is None:
                raise CommandError("No key with that secret.")  # never echo a secret
        else:
            found = keys.filter(prefix=given).first()
            if found is None:  # echoed only when too short to be anybody's secret
                shown = repr(given) if len(given) <= VISIBLE_CHARS else "like that"
                raise CommandError(f"No key with prefix {shown}.")
        if found.revoked_at is not None:  # nothing changes, so nothing is audited
            self.stdout.write(f"{found.prefix}… of {found.owner} was already revoked.")
            return
        revoke(self.actor(), found)
        self.stdout.write(f"Revoked {found.prefix}… of {found.owner}. "
                          "Every gateway refuses it within a second.")
