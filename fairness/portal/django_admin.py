"""The Django admin: raw edits for staff, within the rules the staff pages keep.

Keys are issued on the staff pages or through the API (a secret is shown once there), so here
they can be read, relabelled and revoked but not added. Records the portal writes itself (usage,
samples, the audit log) are read-only. Every change to tiers, keys and replicas bumps the config
epoch through the model signals, so gateways follow within a second; Django's own admin log
records who made it, and revocations and replica saves (with their tiers, in one transaction) go
through the audited actions like the staff pages' own. A user's password is set here within the
staff pages' rule, and audited as there (PortalUserAdmin).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import Field, QuerySet, URLField
from django.forms import Field as FormField
from django.http import HttpRequest, HttpResponse

from fairness.actions.audit import Actor, audit, jsonable
from fairness.actions.keys import revoke
from fairness.actions.replicas import save_replica
from fairness.actions.tiers import save_tier
from fairness.actions.users import password_refusal, refuse_password
from fairness.models import (
    Account,
    AdminToken,
    ApiKey,
    AuditEntry,
    BatchFile,
    EngineSample,
    GroupMapping,
    Membership,
    Replica,
    SaturationAlert,
    Tier,
    UsageHourly,
    UsageRecord,
)
from fairness.portal.client_address import client_address
from fairness.portal.forms import ReplicaForm
from fairness.portal.signin import group_sync

if TYPE_CHECKING:
    from django.contrib.auth import models as auth_models

    # Django's admin classes take type arguments for the checker only: at run time they are not subscriptable.
    _ReadOnlyAdminBase = admin.ModelAdmin[Any]
    _AuditedAdminBase = admin.ModelAdmin[Any]
    _GroupMappingAdminBase = admin.ModelAdmin[GroupMapping]
    _ApiKeyAdminBase = admin.ModelAdmin[ApiKey]
    _ReplicaAdminBase = admin.ModelAdmin[Replica]
    _UserAdminBase = UserAdmin[auth_models.User]
else:
    _ReadOnlyAdminBase = _AuditedAdminBase = _GroupMappingAdminBase = admin.ModelAdmin
    _ApiKeyAdminBase = _ReplicaAdminBase = admin.ModelAdmin
    _UserAdminBase = UserAdmin

User = get_user_model()


def _actor(request: HttpRequest) -> Actor:
    # The admin site lets in active staff only, so its requests are always signed in.
    assert request.user.is_authenticated
    return Actor(request.user, client_address(request))


class ReadOnlyAdmin(_ReadOnlyAdminBase):
    """Rows the portal writes; people only read them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


def _changed(form: Any) -> dict[str, Any]:
    """The fields an admin form changed, with their new values, for the audit log. (Django's
    JSONField reports an unchanged empty list as changed: a value equal to the initial is not.)"""
    return jsonable({name: form.cleaned_data.get(name) for name in form.changed_data
                     if form.cleaned_data.get(name) != form.initial.get(name)})


class AuditedAdmin(_AuditedAdminBase):
    """Adds, changes and deletions audited as `<what>.add`, `.change` and `.delete`, with the fields
    changed: the same log the staff pages and the admin API write."""

    what = ""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        audit(_actor(request), f"{self.what}.change" if change else f"{self.what}.add", str(obj), **_changed(form))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        name = str(obj)
        super().delete_model(request, obj)
        audit(_actor(request), f"{self.what}.delete", name)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(Tier)
class TierAdmin(AuditedAdmin):
    """Also on the staff page /staff/tiers/ and in the admin API; saved through the same action."""

    what = "tier"
    list_display = ["name", "per_key_concurrency", "pool_concurrency", "head_start_seconds",
                    "max_queue_wait_seconds", "max_queued_per_key", "max_queued", "engine_priority",
                    "borrow_idle_slots"]

    def save_model(self, request: HttpRequest, obj: Tier, form: Any, change: bool) -> None:
        save_tier(_actor(request), obj, _changed(form))  # audited as tier.create / tier.update


@admin.register(Account)
class AccountAdmin(AuditedAdmin):
    """The fair-share tree (the staff page /staff/accounts/ shows it with usage)."""

    what = "account"
    list_display = ["name", "parent", "shares", "description"]
    search_fields = ["name"]


@admin.register(GroupMapping)
class GroupMappingAdmin(_GroupMappingAdminBase):
    """Also on the staff page /staff/sign-in/; changes here are audited like the page's."""

    list_display = ["group", "account", "tier", "created_at"]
    list_filter = ["account", "tier"]
    search_fields = ["group", "account__name"]
    readonly_fields = ["created_at"]

    def save_model(self, request: HttpRequest, obj: GroupMapping, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        audit(_actor(request), "group_mapping.change" if change else "group_mapping.add", obj.group,
                      account=obj.account.name, tier=obj.tier.name)

    def delete_model(self, request: HttpRequest, obj: GroupMapping) -> None:
        group_sync.remove_mapping(_actor(request), obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[GroupMapping]) -> None:
        for mapping in queryset.select_related("account", "tier"):
            group_sync.remove_mapping(_actor(request), mapping)


@admin.register(Membership)
class MembershipAdmin(AuditedAdmin):
    what = "membership"
    list_display = ["user", "account", "shares", "is_default"]
    list_filter = ["account"]
    search_fields = ["user__username", "account__name"]


@admin.register(ApiKey)
class ApiKeyAdmin(_ApiKeyAdminBase):
    list_display = ["prefix", "owner", "tier", "label", "created_at", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["tier", "revoked_at"]
    search_fields = ["prefix", "label", "owner__username"]
    fields = ["prefix", "owner", "tier", "membership", "label", "created_at", "expires_at", "revoked_at",
              "last_used_at"]
    readonly_fields = ["prefix", "owner", "membership", "created_at", "revoked_at", "last_used_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a secret is minted and shown once on the staff pages or by the API

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        actor = _actor(request)
        live = list(queryset.filter(revoked_at=None))
        for key in live:
            revoke(actor, key)
        self.message_user(request, f"Revoked {len(live)} key(s).", messages.SUCCESS)


class ReplicaAdminForm(ReplicaForm):
    class Meta(ReplicaForm.Meta):
        fields = [*ReplicaForm.Meta.fields, "enabled", "draining"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["api_key"].help_text = "Leave empty to keep the current one (never shown)."

    def clean_api_key(self) -> str:
        # The key is never rendered back, so an empty field on an edit means "unchanged".
        return self.cleaned_data["api_key"] or (self.instance.api_key if self.instance.pk else "")


@admin.register(Replica)
class ReplicaAdmin(_ReplicaAdminBase):
    form = ReplicaAdminForm  # refuses deployments that would share some replicas but not all
    list_display = ["name", "model", "model_kind", "base_url", "max_num_seqs", "scheduling_policy", "enabled",
                    "draining"]
    list_filter = ["model", "enabled", "draining"]

    def save_model(self, request: HttpRequest, obj: Replica, form: ReplicaAdminForm, change: bool) -> None:
        # The replica and its tiers together, audited like the staff pages' changes.
        actor = _actor(request)
        save_replica(actor, obj, form.changes(), form.cleaned_data["tiers"])

    def save_related(self, request: HttpRequest, form: ReplicaAdminForm, formsets: list[Any], change: bool) -> None:
        for formset in formsets:  # not form.save_m2m(): save_model has set the tiers already
            self.save_formset(request, form, formset, change=change)

    def formfield_for_dbfield(self, db_field: Field[Any, Any], request: HttpRequest, **kwargs: Any) -> FormField | None:
        if isinstance(db_field, URLField):
            kwargs["assume_scheme"] = "http"  # as on the staff pages: engines rarely sit behind TLS
        return super().formfield_for_dbfield(db_field, request, **kwargs)


@admin.register(SaturationAlert)
class SaturationAlertAdmin(ReadOnlyAdmin):
    list_display = ["model", "kind", "opened_at", "resolved_at", "acknowledged_at", "acknowledged_by"]
    list_filter = ["model", "kind"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor_name", "action", "target", "ip"]
    list_filter = ["action"]
    search_fields = ["target", "actor_name"]


@admin.register(AdminToken)
class AdminTokenAdmin(ReadOnlyAdmin):
    list_display = ["prefix", "owner", "label", "created_at", "expires_at", "revoked_at"]
    exclude = ["secret_hash"]


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = ["request_id", "key", "model", "status", "prompt_tokens", "completion_tokens", "stream"]
    list_filter = ["model", "status", "stream"]


@admin.register(UsageHourly)
class UsageHourlyAdmin(ReadOnlyAdmin):
    pass


@admin.register(EngineSample)
class EngineSampleAdmin(ReadOnlyAdmin):
    list_display = ["replica", "taken_at", "resolution_seconds", "running", "waiting", "generation_tps", "healthy"]
    list_filter = ["replica", "resolution_seconds"]


@admin.register(BatchFile)
class BatchFileAdmin(ReadOnlyAdmin):
    """Uploaded through /v1/files; their owners delete them there (which removes the content too)."""

    list_display = ["public_id", "owner", "filename", "purpose", "bytes", "created_at"]
    list_filter = ["purpose"]
    search_fields = ["public_id", "filename", "owner__username"]
    exclude = ["stored_name"]


class PortalUserAdmin(_UserAdminBase):
    """Django's user admin, within the staff pages' rule on passwords (password_refusal):
    its password page refuses, audited, what they would refuse (a password for someone whose
    sign-in is the directory's or the provider's, say), and a password it sets is audited too."""

    def user_change_password(self, request: HttpRequest, id: str, form_url: str = "") -> HttpResponse:
        person = self.get_object(request, unquote(id))
        if person is None or not self.has_change_permission(request, person):
            return super().user_change_password(request, id, form_url)  # its own 404 or 403
        actor = _actor(request)
        reason = password_refusal(actor.user, person)
        if reason and request.method == "POST":
            refuse_password(actor, person, reason)  # raises PermissionDenied
        if reason:
            raise PermissionDenied(reason)
        before = person.password
        response: HttpResponse = super().user_change_password(request, id, form_url)
        person.refresh_from_db(fields=["password"])
        if person.password != before:
            audit(actor, "user.password", person.get_username(), via="admin")
        return response


admin.site.unregister(User)
admin.site.register(User, PortalUserAdmin)
