from django.core.management.base import BaseCommand, CommandError

from fairness.gateway.api_keys import revoke_by_prefix
from fairness.models import ApiKey


class Command(BaseCommand):
    help = "Revoke an API key by its visible prefix (e.g. gp-AbCdEfGh)."

    def add_arguments(self, parser):
        parser.add_argument("prefix")

    def handle(self, *args, prefix, **options):
        try:
            key = revoke_by_prefix(prefix)
        except ApiKey.DoesNotExist:
            raise CommandError(f"No key with prefix {prefix!r}.") from None
        self.stdout.write(f"Revoked {key.prefix}… of {key.owner}.")
