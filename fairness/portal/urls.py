from django.urls import path

from fairness.portal import (
    account_pages,
    my_pages,
    public_pages,
    staff_account_pages,
    staff_home,
    staff_pages,
    staff_replica_pages,
    staff_token_pages,
    staff_user_pages,
)
from fairness.telemetry import gateway_metrics

# /v1/ is not here: it never reaches Django's URL resolver (gateway/asgi.py routes it).

urlpatterns = [
    path("", my_pages.home, name="home"),
    path("capacity/", public_pages.capacity, name="capacity"),
    path("metrics", gateway_metrics.view, name="metrics"),
    # A signed-in person's own pages
    path("me/", my_pages.dashboard, name="me"),
    path("me/usage/", my_pages.usage, name="me-usage"),
    path("me/usage/daily.json", my_pages.usage_daily, name="me-usage-daily"),
    # One's own password
    path("accounts/password/", account_pages.PasswordChangeView.as_view(), name="password-change"),
    path("accounts/password/done/", account_pages.PasswordChangeDoneView.as_view(), name="password-change-done"),
    # Staff pages
    path("staff/", staff_home.home, name="staff-home"),
    path("staff/keys/", staff_pages.keys, name="staff-keys"),
    path("staff/keys/load.json", staff_pages.keys_load, name="staff-keys-load"),
    path("staff/keys/issue/", staff_pages.issue_key, name="staff-key-issue"),
    path("staff/keys/<str:prefix>/revoke/", staff_pages.revoke_key, name="staff-key-revoke"),
    path("staff/keys/<str:prefix>/rotate/", staff_pages.rotate_key, name="staff-key-rotate"),
    path("staff/users/", staff_user_pages.users, name="staff-users"),
    path("staff/users/new/", staff_user_pages.create_user, name="staff-user-create"),
    path("staff/users/<str:username>/password/", staff_user_pages.set_user_password, name="staff-user-password"),
    path("staff/users/<str:username>/tier/", staff_user_pages.set_user_tier, name="staff-user-tier"),
    path("staff/users/<str:username>/deactivate/", staff_user_pages.set_user_active, {"active": False},
         name="staff-user-deactivate"),
    path("staff/users/<str:username>/reactivate/", staff_user_pages.set_user_active, {"active": True},
         name="staff-user-reactivate"),
    path("staff/accounts/", staff_account_pages.accounts, name="staff-accounts"),
    path("staff/accounts/new/", staff_account_pages.add_account, name="staff-account-add"),
    path("staff/accounts/members/new/", staff_account_pages.add_member, name="staff-member-add"),
    path("staff/accounts/<str:name>/shares/", staff_account_pages.change_shares, name="staff-account-shares"),
    path("staff/tokens/", staff_token_pages.tokens, name="staff-tokens"),
    path("staff/tokens/issue/", staff_token_pages.issue_token, name="staff-token-issue"),
    path("staff/tokens/<str:prefix>/revoke/", staff_token_pages.revoke_token, name="staff-token-revoke"),
    path("staff/tiers/", staff_pages.tiers, name="staff-tiers"),
    path("staff/tiers/new/", staff_pages.edit_tier, name="staff-tier-create"),
    path("staff/tiers/<slug:name>/edit/", staff_pages.edit_tier, name="staff-tier-edit"),
    path("staff/replicas/", staff_replica_pages.replicas, name="staff-replicas"),
    path("staff/replicas/new/", staff_replica_pages.add_replica, name="staff-replica-add"),
    path("staff/replicas/<slug:name>/edit/", staff_replica_pages.edit_replica, name="staff-replica-edit"),
    path("staff/replicas/<slug:name>/delete/", staff_replica_pages.delete_replica, name="staff-replica-delete"),
    path("staff/replicas/<slug:name>/<slug:state>/", staff_replica_pages.replica_state, name="staff-replica-state"),
    path("staff/alerts/", staff_pages.alerts, name="staff-alerts"),
    path("staff/alerts/<int:alert_id>/acknowledge/", staff_pages.acknowledge_alert, name="staff-alert-acknowledge"),
    path("staff/audit/", staff_pages.audit, name="staff-audit"),
]
