"""A key's own limits on the key forms: staff's issue form and /me/keys/'s, and the Limits form of
an existing key. Each figure may be below the tier's, never above (KeyLimits.refusals says why on
the field); fairness.actions.keys checks again."""

from __future__ import annotations

from typing import Any

from django import forms

from fairness.models import ApiKey, KeyLimits, Tier
from fairness.portal.forms import IssueKeyForm, ModelNamesField, NoColon, OwnKeyForm

# field -> (its label, what it means). The cap at once counts as the tier's does: a person's
# requests in the tier, through all their keys (gateway/key_limits.py).
_FIGURES = {
    "max_concurrent": ("Requests at once", "A request of this key starts only while its owner runs fewer than "
                                           "this at once in the tier (their keys together, as the tier's cap counts)."),
    "requests_per_minute": ("Requests a minute", "The most requests a minute this key may start."),
    "tokens_per_minute": ("Tokens a minute", "The most weighted tokens a minute this key may use."),
}


def _figure(label: str) -> forms.IntegerField:
    return forms.IntegerField(label=f"{label} (this key)", min_value=1, max_value=10_000_000, required=False)


class KeyLimitFields(forms.Form):
    """Adds `limits` (a KeyLimits) to cleaned_data, checked against `limits_tier()`'s figures."""

    max_concurrent = _figure(_FIGURES["max_concurrent"][0])
    requests_per_minute = _figure(_FIGURES["requests_per_minute"][0])
    tokens_per_minute = _figure(_FIGURES["tokens_per_minute"][0])
    allowed_models = ModelNamesField(label="Models (this key)")

    def limits_tier(self) -> Tier | None:
        """The tier the limits are held to; None: not known (a field error elsewhere says why)."""
        return None

    def limits_before(self) -> KeyLimits | None:
        """An existing key's limits: only a changed figure is held to the tier (as the action does)."""
        return None

    def describe_limits(self, tier: Tier | None) -> None:
        """Help texts naming the tier's figures, when the tier is known as the form is drawn."""
        ceilings = KeyLimits.ceilings(tier) if tier is not None else {}
        for field, (_, meaning) in _FIGURES.items():
            if tier is None:
                said = "Lower than its tier's, never higher; empty for the tier's."
            elif ceilings[field] is None:
                said = f"Tier {tier.name} sets no limit; empty for none."
            else:
                said = f"At most {ceilings[field]:,}, tier {tier.name}'s; empty for the tier's."
                self.fields[field].widget.attrs["max"] = ceilings[field]
            self.fields[field].help_text = f"{meaning} {said}"
        models = self.fields["allowed_models"]
        if tier is not None and tier.allowed_models:
            models.help_text = (f"Some of tier {tier.name}'s ({', '.join(tier.allowed_models)}), separated by "
                                "commas or spaces. Empty for all of them.")
        else:
            models.help_text = "Only these, separated by commas or spaces. Empty for every model its tier allows."

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if any(field in self.errors for field in KeyLimits.FIELDS):
            return data
        limits = KeyLimits(data.get("max_concurrent"), data.get("requests_per_minute"), data.get("tokens_per_minute"),
                           tuple(data.get("allowed_models") or ()))
        tier, before = self.limits_tier(), self.limits_before()
        if tier is not None:
            changing = [f for f in KeyLimits.FIELDS if before is None or getattr(limits, f) != getattr(before, f)]
            for field, refusal in limits.refusals(tier, changing).items():
                self.add_error(field, refusal)
        data["limits"] = limits
        return data


class IssueKeyWithLimitsForm(KeyLimitFields, IssueKeyForm):
    """Staff's issue form: the limits are held to the tier chosen in it."""

    field_order = [*IssueKeyForm.field_order, *KeyLimits.FIELDS]  # the front end's fields after

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.describe_limits(None)

    def limits_tier(self) -> Tier | None:
        tier = self.cleaned_data.get("tier")
        return tier if isinstance(tier, Tier) else None


class OwnKeyWithLimitsForm(KeyLimitFields, OwnKeyForm):
    """A researcher's new key: the limits are held to the tier their keys get."""

    field_order = ["label", "account", "expires_days", *KeyLimits.FIELDS]

    def __init__(self, *args: Any, tier: Tier, **kwargs: Any) -> None:
        super().__init__(*args, tier=tier, **kwargs)
        self.tier = tier
        self.describe_limits(tier)

    def limits_tier(self) -> Tier | None:
        return self.tier


class KeyLimitsForm(NoColon, KeyLimitFields):
    """An existing key's limits, on staff's page or its owner's (sent twice, it sets the same)."""

    def __init__(self, *args: Any, key: ApiKey, **kwargs: Any) -> None:
        self.key = key
        kwargs.setdefault("initial", {**KeyLimits.of(key).fields()})
        super().__init__(*args, **kwargs)
        self.describe_limits(key.tier)

    def limits_tier(self) -> Tier | None:
        return self.key.tier

    def limits_before(self) -> KeyLimits | None:
        return KeyLimits.of(self.key)
