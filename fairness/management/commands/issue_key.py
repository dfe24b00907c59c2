import sys
from pathlib import Path
from typing import Any, cast

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.db import transaction
from django.db.models import Field

from fairness.actions import users as user_actions
from fairness.actions.front_end_keys import KINDS, NONE, FrontEnd, requested
from fairness.actions.keys import expiry_in_days, issue
from fairness.management.audited import AuditedCommand
from fairness.models import ApiKey, Tier

LABEL_MAX = cast(int, ApiKey._meta.get_field("label").max_length)  # a CharField's: always set


class Command(AuditedCommand):
    help = "Issue an API key; the secret is printed once, alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="The key's owner, an existing username.")
        parser.add_argument("--create-user", action="store_true",
                            help="Create the user first if there is none.")
        parser.add_argument("--tier", required=True)
        parser.add_argument("--label", default="")
        parser.add_argument("--expires-days", type=int, default=None)
        parser.add_argument("--front-end", choices=sorted(KINDS), default=None,
                            help="The key is a shared front end's: each request names the person asking.")
        parser.add_argument("--jwt-secret-file", default=None, metavar="PATH",
                            help="A file holding the front end's JWT signing secret (Open WebUI's "
                                 "FORWARD_USER_INFO_HEADER_JWT_SECRET), or - for standard input.")
        parser.add_argument("--trust-plain-headers", action="store_true",
                            help="Accept the unsigned X-OpenWebUI-User-* headers too (anyone with the key "
                                 "can then name any person).")
        parser.add_argument("--no-add-people", action="store_true",
                            help="Refuse a person the portal does not know instead of adding them.")

    def handle(self, *args: Any, user: str, tier: str, label: str, expires_days: int | None, create_user: bool,
               front_end: str | None = None, jwt_secret_file: str | None = None, trust_plain_headers: bool = False,
               no_add_people: bool = False, **options: Any) -> None:
        try:
            tier_obj = Tier.objects.get(name=tier)
        except Tier.DoesNotExist:
            names = ", ".join(Tier.objects.values_list("name", flat=True))
            raise CommandError(f"No tier named {tier!r}. Tiers: {names}") from None
        if expires_days is not None and expires_days < 1:
            raise CommandError("--expires-days must be at least 1")
        if len(label) > LABEL_MAX or "\x00" in label:
            raise CommandError(f"--label: at most {LABEL_MAX} characters, no NUL")
        front = self.requested_front_end(front_end, jwt_secret_file, trust_plain_headers, no_add_people)
        User = get_user_model()
        owner = User.objects.filter(**{User.USERNAME_FIELD: user}).first()
        created = owner is None
        if created and not create_user:
            # A typo would otherwise make a new account and hand it a key.
            raise CommandError(f"No user named {user!r}. Check the name, or add --create-user "
                               "to create them.")
        if created:
            try:
                cast("Field[Any, Any]",
                     User._meta.get_field(User.USERNAME_FIELD)).run_validators(user)  # a concrete field
            except ValidationError as exc:
                raise CommandError(f"--user: {' '.join(exc.messages)}") from None
        actor = self.actor()
        try:
            with transaction.atomic():  # no new user without the key it was created for
                if owner is None:  # created
                    owner = user_actions.create_user(actor, user)
                key, secret = issue(actor, owner, tier_obj, label, expiry_in_days(expires_days), front_end=front)
        except ValidationError as exc:  # a deactivated owner
            raise CommandError(" ".join(exc.messages)) from None
        if created:
            self.stdout.write(f"Created user {user}.")
        if front.kind:
            self.stdout.write(f"It speaks for {KINDS[front.kind]}: each request names the person asking.")
        self.stdout.write(f"Issued key {key.prefix}… for {user} on tier {tier}. Store the secret now:")
        self.stdout.write(secret)

    def requested_front_end(self, kind: str | None, secret_file: str | None, trust_plain_headers: bool,
                            no_add_people: bool) -> FrontEnd:
        if kind is None:
            if secret_file is not None or trust_plain_headers or no_add_people:
                raise CommandError("--jwt-secret-file, --trust-plain-headers and --no-add-people need --front-end")
            return NONE
        if secret_file is None and not trust_plain_headers:
            raise CommandError("--front-end needs --jwt-secret-file (the secret the front end signs with), "
                               "or --trust-plain-headers")
        secret = None if secret_file is None else self.read_secret(secret_file)
        try:
            return requested(kind, secret, trust_plain_headers, adds_people=not no_add_people)
        except ValidationError as exc:  # the messages name no part of the secret
            raise CommandError(f"--jwt-secret-file: {' '.join(exc.messages)}") from None

    def read_secret(self, path: str) -> str:
        try:
            return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            # The reason, not the content: a decoding error would quote the bytes it choked on.
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise CommandError(f"--jwt-secret-file {path}: {reason}") from None
