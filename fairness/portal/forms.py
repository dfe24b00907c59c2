"""Forms for the staff pages. Validation lives on the models; these only gather input."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import get_user_model, password_validation
from django.core.validators import MaxValueValidator
from django.db import models
from django.utils import timezone

from fairness.actions.self_service import memberships
from fairness.gateway.replica_rows import conflict_if_saved
from fairness.models import Account, ApiKey, Membership, Replica, Tier, check_allowed_models
from fairness.portal import replica_probe, submit_once
from fairness.portal.front_end_forms import FrontEndFields
from fairness.portal.replica_probe import EngineFacts

if TYPE_CHECKING:
    from django.contrib.auth import models as auth_models

    # Django's form classes take type arguments for the checker only: at run time they are not subscriptable.
    _SetPasswordFormBase = auth_forms.SetPasswordForm[auth_models.User]
    _MembershipChoiceFieldBase = forms.ModelChoiceField[Membership]
    _TierFormBase = forms.ModelForm[Tier]
    _ReplicaFormBase = forms.ModelForm[Replica]
else:
    _SetPasswordFormBase = auth_forms.SetPasswordForm
    _MembershipChoiceFieldBase = forms.ModelChoiceField
    _TierFormBase = _ReplicaFormBase = forms.ModelForm

User = get_user_model()

GRACE_CHOICES = [
    (0, "at once"),
    (3600, "in an hour"),
    (86400, "in a day"),
    (7 * 86400, "in a week"),
]


class NoColon:
    """Labels as the pages write them: "Owner", not Django's "Owner:"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


class SetPasswordForm(NoColon, _SetPasswordFormBase):
    pass


class PasswordChangeForm(NoColon, auth_forms.PasswordChangeForm):
    pass


class WholeSecondsField(forms.FloatField):
    """Seconds stored as a float, shown as "600" rather than "600.0" when they are whole."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return super().prepare_value(value)


class ModelNamesField(forms.CharField):
    """Model names typed in one box, separated by commas or spaces; a list (names once each, in
    the order typed) to the model, checked by the model's rule. Empty: every model."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.update(required=False, max_length=None)
        kwargs.setdefault("label", "Allowed models")
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        return list(dict.fromkeys(text.replace(",", " ").split()))

    def validate(self, value: Any) -> None:
        try:
            check_allowed_models(value)
        except forms.ValidationError as refused:
            raise forms.ValidationError(refused.messages) from None


def default_tier(owner_name: str | None) -> Tier | None:
    """The tier a new key most likely wants: the owner's (their live keys share one), else the
    interactive tier, else the first."""
    if owner_name:
        theirs = ApiKey.objects.filter(owner__username=owner_name, revoked_at=None).order_by("-created_at")
        key = theirs.select_related("tier").first()
        if key is not None:
            return key.tier
    return Tier.objects.filter(name="interactive").first() or Tier.objects.first()


class SubmitOnceForm(NoColon, forms.Form):
    """A form whose action must not run twice: it carries a token fairness.once claims."""

    once = forms.RegexField(
        regex=submit_once.TOKEN_PATTERN, initial=submit_once.new_token, widget=forms.HiddenInput,
        error_messages={
            "required": "This form is out of date: reload the page and submit it again.",
            "invalid": "This form is out of date: reload the page and submit it again.",
        },
    )


class IssueKeyForm(FrontEndFields, SubmitOnceForm):
    field_order = ["owner", "tier", "label", "expires_days", "account"]  # the front end's fields after
    owner = forms.ModelChoiceField(
        queryset=User.objects.filter(is_active=True).order_by("username"), to_field_name="username"
    )
    tier = forms.ModelChoiceField(queryset=Tier.objects.all(), to_field_name="name", empty_label=None)
    label = forms.CharField(max_length=100, required=False, help_text="What it is for, e.g. “nightly eval”.")
    expires_days = forms.IntegerField(
        label="Expires after (days)", min_value=1, max_value=3650, required=False,
        help_text="Leave empty for a key that does not expire.",
    )
    account = forms.ModelChoiceField(
        queryset=Account.objects.all(), to_field_name="name", required=False,
        empty_label="The owner's default account",
        help_text="Whose fair share its requests count against: one of the owner's accounts.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tier = default_tier(self.initial.get("owner"))
        if tier is not None:
            self.fields["tier"].initial = tier.name
        owner = self.initial.get("owner")
        if not self.is_bound and owner:  # the owner is known: offer only their accounts
            account = cast("forms.ModelChoiceField[Account]", self.fields["account"])
            account.queryset = Account.objects.filter(memberships__user__username=owner).order_by("name")

    def accounts_of_owners(self) -> dict[str, list[str]]:
        """Each active user's accounts, for the page's script to narrow the list to the chosen
        owner's (without script the whole list stays, and clean() refuses a stranger's account)."""
        accounts: dict[str, list[str]] = {}
        for username, account in (Membership.objects.filter(user__is_active=True)
                                  .order_by("account__name").values_list("user__username", "account__name")):
            accounts.setdefault(username, []).append(account)
        return accounts

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        owner, account = data.get("owner"), data.get("account")
        if owner is not None and account is not None:
            data["membership"] = Membership.objects.filter(user=owner, account=account).first()
            if data["membership"] is None:
                self.add_error("account", f"{owner.get_username()} is not a member of {account.name}; "
                                          "add them on the accounts page first.")
        return data

    def expires_at(self) -> dt.datetime | None:
        days = self.cleaned_data.get("expires_days")
        return timezone.now() + dt.timedelta(days=days) if days else None


class RotateKeyForm(SubmitOnceForm):
    grace_seconds = forms.TypedChoiceField(
        label="Stop the old secret", choices=GRACE_CHOICES, coerce=int, initial=0,
        help_text="A grace period lets running jobs switch to the new secret before the old one stops.",
    )


class MembershipChoiceField(_MembershipChoiceFieldBase):
    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.account.name} (default)" if obj.is_default else str(obj.account.name)


class OwnKeyForm(SubmitOnceForm):
    """A researcher's own key (/me/keys/): the accounts offered are theirs alone, and the expiry
    is bounded by their tier (fairness.actions.self_service checks both again)."""

    label = forms.CharField(max_length=100, help_text="What it is for, e.g. “laptop” or “nightly eval”.")
    account = MembershipChoiceField(
        queryset=Membership.objects.none(), empty_label=None, required=False,  # none sent: the default
        help_text="Whose fair share its requests count against.",
    )
    expires_days = forms.IntegerField(label="Expires after (days)", min_value=1, max_value=3650)

    def __init__(self, *args: Any, user: auth_models.User, tier: Tier, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        account = cast("forms.ModelChoiceField[Membership]", self.fields["account"])  # as declared above
        account.queryset = memberships(user)
        default = account.queryset.first()  # their default account comes first
        if default is None:  # no account yet: the key makes them one of their own
            del self.fields["account"]
        else:
            account.initial = default.pk
        days = cast(forms.IntegerField, self.fields["expires_days"])
        if tier.max_key_days:
            days.max_value = tier.max_key_days
            days.validators.append(MaxValueValidator(tier.max_key_days))
            days.widget.attrs["max"] = tier.max_key_days
            days.initial = min(90, tier.max_key_days)
            days.help_text = f"At most {tier.max_key_days} days on tier {tier.name}."
        else:
            days.required = False
            days.initial = 90
            days.help_text = "Leave empty for a key that does not expire."


class IssueAdminTokenForm(SubmitOnceForm):
    """A token acts as its owner: staff issue for themselves, a superuser for any active staff."""

    owner = forms.ModelChoiceField(
        queryset=User.objects.filter(is_active=True, is_staff=True).order_by("username"), to_field_name="username",
        help_text="The token acts as this staff member, with their powers.",
    )
    label = forms.CharField(max_length=100, required=False, help_text="What it is for, e.g. “nightly user sync”.")
    expires_days = forms.IntegerField(
        label="Expires after (days)", min_value=1, max_value=3650, required=False,
        help_text="Leave empty for a token that does not expire.",
    )

    def __init__(self, *args: Any, issuer: auth_models.User, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        owner = cast("forms.ModelChoiceField[auth_models.User]", self.fields["owner"])  # as declared above
        owner.initial = issuer.get_username()  # most tokens are one's own
        if not issuer.is_superuser:
            # The only choice is oneself, so a form posted with another name fails validation.
            owner.queryset = User.objects.filter(pk=issuer.pk)
            owner.help_text = "Your own: only a superuser may issue a token for someone else."
        if owner.queryset is not None and owner.queryset.count() == 1:  # nothing to choose: no empty choice
            owner.empty_label = None

    def expires_at(self) -> dt.datetime | None:
        days = self.cleaned_data.get("expires_days")
        return timezone.now() + dt.timedelta(days=days) if days else None


class CreateUserForm(NoColon, forms.Form):
    """A password now, or none: the account then waits for the set-password step."""

    username = forms.CharField(max_length=150, validators=[User.username_validator])
    email = forms.EmailField(required=False)
    is_staff = forms.BooleanField(label="Staff (may use these pages)", required=False)
    password1 = forms.CharField(
        label="Password", required=False, strip=False, widget=forms.PasswordInput(render_value=False),
        help_text="Optional: leave empty and set one afterwards.",
    )
    password2 = forms.CharField(
        label="Password again", required=False, strip=False, widget=forms.PasswordInput(render_value=False)
    )

    def clean_username(self) -> str:
        username: str = self.cleaned_data["username"]
        if User.objects.filter(username__iexact=username).exists():
            raise forms.ValidationError("That username is taken.")
        return username

    def clean(self) -> dict[str, Any]:
        super().clean()  # Form.clean() returns cleaned_data itself
        data = self.cleaned_data
        first, second = data.get("password1") or "", data.get("password2") or ""
        if first or second:
            if first != second:
                self.add_error("password2", "The two passwords differ.")
            else:
                try:
                    password_validation.validate_password(first, User(username=data.get("username", "")))
                except forms.ValidationError as exc:
                    self.add_error("password1", exc)
        return data

    def password(self) -> str | None:
        return self.cleaned_data.get("password1") or None


class UserTierForm(NoColon, forms.Form):
    tier = forms.ModelChoiceField(queryset=Tier.objects.all(), to_field_name="name")


def _tier_fields(field: models.Field[Any, Any], **kwargs: Any) -> forms.Field | None:
    if field.name in ("head_start_seconds", "max_queue_wait_seconds"):
        kwargs["form_class"] = WholeSecondsField
    if field.name == "allowed_models":
        return ModelNamesField(help_text="Separated by commas or spaces: its keys may use only these. "
                                         "Empty for every model.")
    return field.formfield(**kwargs)


class TierForm(NoColon, _TierFormBase):
    """Field validators and Tier.clean() run in is_valid(): their errors land on the fields."""

    class Meta:
        formfield_callback = _tier_fields
        model = Tier
        fields = [
            "name", "description", "per_key_concurrency", "pool_concurrency", "head_start_seconds",
            "max_queue_wait_seconds", "max_queued_per_key", "max_queued", "engine_priority",
            "borrow_idle_slots", "queue_events", "fairshare_weight_seconds",
            "key_requests_per_minute", "key_tokens_per_minute", "requests_per_minute", "tokens_per_minute",
            "isolate_prefix_cache", "allowed_models", "self_service_keys", "max_key_days",
        ]
        labels = {
            "per_key_concurrency": "Requests at once per key",
            "pool_concurrency": "Requests at once across the tier",
            "head_start_seconds": "Head start (seconds)",
            "max_queue_wait_seconds": "Longest queue wait (seconds)",
            "max_queued_per_key": "Queued requests per key",
            "max_queued": "Queued requests across the tier",
            "engine_priority": "Engine priority (lower runs first)",
            "borrow_idle_slots": "May borrow idle slots",
            "queue_events": "Tell waiting streams their place",
            "fairshare_weight_seconds": "Fair-share weight (seconds)",
            "key_requests_per_minute": "Requests a minute per person",
            "key_tokens_per_minute": "Weighted tokens a minute per person",
            "requests_per_minute": "Requests a minute across the tier",
            "tokens_per_minute": "Weighted tokens a minute across the tier",
            "isolate_prefix_cache": "Keep each user's prefix cache apart",
            "self_service_keys": "Its users make and rotate their own keys",
            "max_key_days": "Longest life of a key they make (days)",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            # Scripts and the API address tiers by name: renaming would break them silently.
            self.fields["name"].disabled = True

    def changes(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in self.changed_data}


def _plain_http_urls(field: models.Field[Any, Any], **kwargs: Any) -> forms.Field | None:
    if isinstance(field, models.URLField):
        kwargs["assume_scheme"] = "http"  # engines sit on the internal network, rarely behind TLS
    return field.formfield(**kwargs)


class ReplicaForm(NoColon, _ReplicaFormBase):
    class Meta:
        formfield_callback = _plain_http_urls
        model = Replica
        fields = ["name", "base_url", "model", "engine_kind", "model_kind", "max_num_seqs", "scheduling_policy",
                  "api_key", "gpu_metrics_url", "tiers"]
        labels = {
            "base_url": "Base URL", "max_num_seqs": "Sequences at once (--max-num-seqs)", "api_key": "Engine API key",
            "scheduling_policy": "Engine scheduling policy", "model_kind": "Serves",
            "gpu_metrics_url": "GPU exporter (DCGM) address",
        }
        widgets = {
            "api_key": forms.PasswordInput(render_value=False),
            "tiers": forms.CheckboxSelectMultiple,
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A form posted without it (a script's, or one from before kinds) keeps the replica's kind.
        self.fields["model_kind"].required = False

    def clean_model_kind(self) -> str:
        return str(self.cleaned_data.get("model_kind") or self.instance.model_kind)

    def clean_gpu_metrics_url(self) -> str:
        # Not posted at all (a form from before GPU exporters): keep it, rather than clear it.
        if "gpu_metrics_url" not in self.data:
            return self.instance.gpu_metrics_url
        return str(self.cleaned_data.get("gpu_metrics_url") or "")

    def clean(self) -> dict[str, Any]:
        super().clean()  # ModelForm.clean() returns cleaned_data itself
        data = self.cleaned_data
        if not self.errors:
            # The instance takes the form's values only after clean(), its tiers after saving.
            fields = {name: value for name, value in data.items() if name not in ("tiers", "remove_api_key")}
            candidate = Replica(pk=self.instance.pk, **{"enabled": self.instance.enabled, **fields})
            conflict = conflict_if_saved(candidate, frozenset(t.name for t in data.get("tiers") or ()))
            if conflict:
                self.add_error("tiers", conflict)
        return data

    def changes(self) -> dict[str, Any]:
        kept = {"model_kind", "gpu_metrics_url"} - set(self.data)  # not posted: as it was
        return {name: self.cleaned_data[name] for name in self.changed_data
                if name not in ("tiers", "remove_api_key", *kept)}


class ReplicaPageForm(ReplicaForm):
    """The staff pages' add and edit: on an edit the name stays (telemetry, samples and the
    audit log know the replica by it), and an empty engine key keeps the one it has unless
    "remove" is ticked (the key is never rendered back). A new replica, or a change the engine
    would answer differently, asks the engine first (replica_probe): an empty model becomes the
    one it serves, and more sequences at once than its KV cache could ever run are refused."""

    remove_api_key = forms.BooleanField(label="Remove the engine key", required=False)

    def __init__(self, *args: Any, look: Callable[[Replica], EngineFacts] = replica_probe.look,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._look = look
        self.engine: EngineFacts | None = None  # what the engine said, when this form asked it
        self.fields["model"].required = False
        self.fields["model"].help_text = ("The served model name clients ask for. Leave it empty to take the one "
                                          "the engine serves.")
        if self.instance.pk is None:
            del self.fields["remove_api_key"]
        else:
            self.fields["name"].disabled = True
            if self.instance.api_key:
                self.fields["api_key"].help_text = "It has one: leave this empty to keep it, or type a new one."

    def clean_api_key(self) -> str:
        typed: str = self.cleaned_data["api_key"]
        if typed or self.instance.pk is None or self.data.get("remove_api_key"):
            return typed
        kept: str = self.instance.api_key
        return kept

    def clean(self) -> dict[str, Any]:
        self._ask_engine()  # first: ReplicaForm.clean's deployment check needs the model
        return super().clean()

    def changes(self) -> dict[str, Any]:
        # A model filled in from the engine was not typed, so Django does not count it as changed.
        model = self.cleaned_data["model"]
        return {**super().changes(), **({"model": model} if model != self.initial.get("model") else {})}

    def _ask_engine(self) -> None:
        data = self.cleaned_data
        asked = ("base_url", "model", "api_key", "max_num_seqs")
        if any(name in self.errors for name in (*asked, "engine_kind")):
            return
        if self.instance.pk is not None and data["model"] and all(data[n] == self.initial.get(n) for n in asked):
            return  # nothing the engine would answer differently
        candidate = Replica(name=data.get("name") or self.instance.name, base_url=data["base_url"],
                            model=data["model"], api_key=data["api_key"], engine_kind=data["engine_kind"])
        self.engine = facts = self._look(candidate)
        if not data["model"]:
            data["model"], why = replica_probe.model_to_fill(facts)
            if why:
                self.add_error("model", why)
        refused = replica_probe.sequences_refused(facts, data["max_num_seqs"])
        if refused:
            self.add_error("max_num_seqs", refused)


# -- the fair-share tree (staff_account_pages.py); the actions in accounts.py validate again ----

# The database column's bound: the actions may hold shares to a tighter one.
SHARES_BOUND = 2_147_483_647


def _shares_field(help_text: str, **kwargs: Any) -> forms.IntegerField:
    return forms.IntegerField(min_value=1, max_value=SHARES_BOUND, initial=1, help_text=help_text, **kwargs)


ACCOUNT_MODELS_HELP = ("Separated by commas or spaces: its members' keys, and those of the accounts under it, "
                       "may use only these. Empty for every model.")


class AccountForm(NoColon, forms.Form):
    name = forms.CharField(max_length=100, help_text="Letters, digits and . @ + - _ only, e.g. “nlp-lab”.")
    parent = forms.ModelChoiceField(
        queryset=Account.objects.all(), to_field_name="name", required=False,
        empty_label="None: at the top of the tree", help_text="The account it is part of.",
    )
    shares = _shares_field("Its part of the parent's share, relative to its siblings' shares.")
    description = forms.CharField(max_length=200, required=False)
    allowed_models = ModelNamesField(help_text=ACCOUNT_MODELS_HELP)


class AccountSharesForm(NoColon, forms.Form):
    """An account's shares and the models it allows."""

    shares = _shares_field("Its part of the parent's share, relative to its siblings' shares.")
    allowed_models = ModelNamesField(help_text=ACCOUNT_MODELS_HELP)


class MemberForm(NoColon, forms.Form):
    """Adds a user to an account, or changes their shares in one they are already in."""

    user = forms.ModelChoiceField(
        queryset=User.objects.filter(is_active=True).order_by("username"), to_field_name="username",
    )
    account = forms.ModelChoiceField(queryset=Account.objects.all(), to_field_name="name")
    shares = _shares_field("Their part of the account's share, relative to the other members'.")
    default = forms.BooleanField(
        label="Make it their default account", required=False,
        help_text="Their keys that name no account charge this one.",
    )
    manager = forms.BooleanField(
        label="Manager of the account", required=False,
        help_text="They manage its members, their keys, the accounts under it, shares and budgets, within "
                  "what staff gave the account, from My overview.",
    )
