"""The front-end fields of the staff key forms: issuing a key, and changing an existing one's."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from fairness.actions import front_end_keys
from fairness.actions.front_end_keys import KINDS, FrontEnd
from fairness.gateway.front_end_secrets import MAX_SECRET_CHARS, MIN_SECRET_BYTES
from fairness.models import ApiKey

FRONT_END_CHOICES = [("", "None: the key speaks for its owner"), *KINDS.items()]


def _secret_input() -> forms.PasswordInput:
    # Never rendered back; "new-password" keeps a browser from filling in the staff member's own.
    return forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password", "spellcheck": "false"})


class FrontEndFields(forms.Form):
    """Adds `front_end` (a FrontEnd, its secret sealed) to cleaned_data; the secret as typed is
    dropped from it once sealed."""

    front_end_kind = forms.ChoiceField(
        label="Front end", choices=FRONT_END_CHOICES, required=False,
        help_text="A shared front end such as Open WebUI: each request names the person asking, whose "
                  "limits and share then apply.",
    )
    jwt_secret = forms.CharField(
        label="Front end's JWT secret", required=False, strip=False, max_length=MAX_SECRET_CHARS,
        widget=_secret_input(),
        help_text=f"Open WebUI's FORWARD_USER_INFO_HEADER_JWT_SECRET, at least {MIN_SECRET_BYTES} bytes: "
                  "the gateway checks who is asking with it.",
    )
    trusts_plain_headers = forms.BooleanField(
        label="Trust plain headers", required=False,
        help_text="Also accept unsigned X-OpenWebUI-User-* headers: weaker, anyone with the key can name anyone.",
    )
    adds_people = forms.BooleanField(
        label="Add new people", required=False, initial=True,
        help_text="A person the portal does not know yet is added on first sight to this key's account.",
    )

    def current(self) -> FrontEnd:
        return front_end_keys.NONE

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if any(name in self.errors for name in ("front_end_kind", "jwt_secret")):
            return data
        kind = data.get("front_end_kind", "")
        # With no front end the checkboxes mean nothing (a form sent without them leaves
        # "add new people" unticked); a secret typed in does, and is refused.
        modes = (bool(data.get("trusts_plain_headers")), bool(data.get("adds_people"))) if kind else (None, None)
        try:
            data["front_end"] = front_end_keys.changed(self.current(), kind, data.pop("jwt_secret", "") or None, *modes)
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                self.add_error("front_end_kind" if field == "front_end" else field, messages)
        return data


class FrontEndForm(FrontEndFields):
    """An existing key's front end: an empty secret keeps the one it has."""

    def __init__(self, *args: Any, key: ApiKey, **kwargs: Any) -> None:
        self.key = key
        now = FrontEnd.of(key)
        kwargs.setdefault("label_suffix", "")
        kwargs.setdefault("initial", {"front_end_kind": now.kind, "trusts_plain_headers": now.trusts_plain_headers,
                                      "adds_people": now.adds_people})
        super().__init__(*args, **kwargs)
        if now.sealed_secret:
            self.fields["jwt_secret"].help_text = ("A secret is set (never shown). Leave this empty to keep it, "
                                                   "or give the new one.")

    def current(self) -> FrontEnd:
        return FrontEnd.of(self.key)
