"""A key's own limits in the admin API: the fields POST /keys and PATCH /keys/{prefix} take, and
the 422 that names a field above its tier's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Annotated, TypeVar

from django.core.exceptions import ValidationError
from ninja import Field, Schema
from ninja.errors import HttpError

from fairness.models import MAX_ALLOWED_MODELS, NO_KEY_LIMITS, KeyLimits

T = TypeVar("T")

_ModelName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^|\s]+$")]
_BELOW = " Below its tier's or equal, never above (422); null: the tier's."


class KeyLimitsIn(Schema):
    max_concurrent: int | None = Field(None, ge=1, le=10_000_000,
                                       description="Its own cap on requests at once." + _BELOW)
    requests_per_minute: int | None = Field(None, ge=1, le=10_000_000,
                                            description="Its own requests a minute." + _BELOW)
    tokens_per_minute: int | None = Field(None, ge=1, le=10_000_000,
                                          description="Its own weighted tokens a minute." + _BELOW)
    allowed_models: list[_ModelName] | None = Field(
        None, max_length=MAX_ALLOWED_MODELS,
        description="The only models it may use, among its tier's (422 otherwise); empty or null: every "
        "model its tier allows.",
    )


def limits_in(data: KeyLimitsIn, before: KeyLimits = NO_KEY_LIMITS) -> KeyLimits | None:
    """The limits the body asks for: `before` with each field the body names replaced (null sets
    it back to the tier's); None when it names none."""
    named = set(KeyLimits.FIELDS) & data.model_fields_set
    if not named:
        return None
    given = {field: getattr(data, field) for field in named}
    if "allowed_models" in given:
        given["allowed_models"] = tuple(given["allowed_models"] or ())
    return dataclasses.replace(before, **given)


def within_tier(act: Callable[[], T]) -> T:
    """`act`'s result; its ValidationError (a figure above the tier's) as a 422 naming the field."""
    try:
        return act()
    except ValidationError as exc:
        messages = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
        raise HttpError(422, "; ".join(f"{field}: {' '.join(m)}" for field, m in messages.items())) from None
