from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError, CommandParser

from fairness.management.audited import AuditedCommand
from fairness.portal.signin import sso_identities


class Command(AuditedCommand):
    help = ("Let a person's account at the OpenID provider sign in as an existing portal user, who keeps "
            "their e-mail address and memberships (audited). Not for staff: they never sign in by SSO. "
            "A first SSO sign-in makes a new user instead, however its username reads.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help="An existing username (not staff).")
        parser.add_argument("subject", help="The `sub` the provider gives this person (its admin console, "
                                            "or the audit log's refused or made sign-in, shows it).")
        parser.add_argument("--issuer", default=None,
                            help="The provider's issuer, exactly as GP_OIDC_ISSUER (the default) has it.")

    def handle(self, *args: Any, user: str, subject: str, issuer: str | None, **options: Any) -> None:
        issuer = issuer if issuer is not None else settings.GP_OIDC_ISSUER
        if not issuer:
            raise CommandError("No issuer: set GP_OIDC_ISSUER, or give --issuer.")
        if "\x00" in user + subject + issuer:
            raise CommandError("No NUL characters, please.")
        person = get_user_model().objects.filter(username=user).first()
        if person is None:
            raise CommandError(f"No user named {user!r}.")
        try:
            sso_identities.link(self.actor(), person, issuer, subject)
        except PermissionDenied as refused:
            raise CommandError(str(refused)) from None
        self.stdout.write(f"{subject} at {issuer} now signs in as {user}.")
