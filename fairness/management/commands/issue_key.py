from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from fairness.gateway.api_keys import expiry_in_days, issue_key
from fairness.models import Tier


class Command(BaseCommand):
    help = "Issue an API key; the secret is printed once, alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, help="Username; created if it does not exist.")
        parser.add_argument("--tier", required=True)
        parser.add_argument("--label", default="")
        parser.add_argument("--expires-days", type=int, default=None)

    def handle(self, *args, user, tier, label, expires_days, **options):
        try:
            tier_obj = Tier.objects.get(name=tier)
        except Tier.DoesNotExist:
            names = ", ".join(Tier.objects.values_list("name", flat=True))
            raise CommandError(f"No tier named {tier!r}. Tiers: {names}") from None
        if expires_days is not None and expires_days < 1:
            raise CommandError("--expires-days must be at least 1")
        owner, created = get_user_model().objects.get_or_create(username=user)
        key, secret = issue_key(owner, tier_obj, label=label, expires_at=expiry_in_days(expires_days))
        if created:
            self.stdout.write(f"Created user {user}.")
        self.stdout.write(f"Issued key {key.prefix}… for {user} on tier {tier}. Store the secret now:")
        self.stdout.write(secret)
