from typing import cast

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.db import transaction
from django.db.models import Field

from fairness.management.audited import AuditedCommand
from fairness.models import ApiKey, Tier
from fairness.portal import actions
from fairness.portal.keys import expiry_in_days

LABEL_MAX = cast(int, ApiKey._meta.get_field("label").max_length)  # a CharField's: always set


class Command(AuditedCommand):
    help = "Issue an API key; the secret is printed once, alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, help="The key's owner, an existing username.")
        parser.add_argument("--create-user", action="store_true",
                            help="Create the user first if there is none.")
        parser.add_argument("--tier", required=True)
        parser.add_argument("--label", default="")
        parser.add_argument("--expires-days", type=int, default=None)

    def handle(self, *args, user, tier, label, expires_days, create_user, **options):
        try:
            tier_obj = Tier.objects.get(name=tier)
        except Tier.DoesNotExist:
            names = ", ".join(Tier.objects.values_list("name", flat=True))
            raise CommandError(f"No tier named {tier!r}. Tiers: {names}") from None
        if expires_days is not None and expires_days < 1:
            raise CommandError("--expires-days must be at least 1")
        if len(label) > LABEL_MAX or "\x00" in label:
            raise CommandError(f"--label: at most {LABEL_MAX} characters, no NUL")
        User = get_user_model()
        owner = User.objects.filter(**{User.USERNAME_FIELD: user}).first()
        created = owner is None
        if created and not create_user:
            # A typo would otherwise make a new account and hand it a key.
            raise CommandError(f"No user named {user!r}. Check the name, or add --create-user "
                               "to create them.")
        if created:
            try:
                cast(Field, User._meta.get_field(User.USERNAME_FIELD)).run_validators(user)  # a concrete field
            except ValidationError as exc:
                raise CommandError(f"--user: {' '.join(exc.messages)}") from None
        actor = self.actor()
        try:
            with transaction.atomic():  # no new user without the key it was created for
                if owner is None:  # created
                    owner = actions.create_user(actor, user)
                key, secret = actions.issue(actor, owner, tier_obj, label, expiry_in_days(expires_days))
        except ValidationError as exc:  # a deactivated owner
            raise CommandError(" ".join(exc.messages)) from None
        if created:
            self.stdout.write(f"Created user {user}.")
        self.stdout.write(f"Issued key {key.prefix}… for {user} on tier {tier}. Store the secret now:")
        self.stdout.write(secret)
