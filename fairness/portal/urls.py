from django.urls import path

from fairness.portal.pages import batches as batch_pages
from fairness.portal.pages import public as public_pages
from fairness.portal.pages.me import home as my_pages
from fairness.portal.pages.me import keys as my_key_pages
from fairness.portal.pages.me import lab as lab_pages
from fairness.portal.pages.me import password as account_pages
from fairness.portal.pages.me import playground as my_playground
from fairness.portal.pages.me import queue as my_queue_pages
from fairness.portal.pages.me import requests as my_request_pages
from fairness.portal.pages.me import standing as my_standing_pages
from fairness.portal.pages.staff import accounts as staff_account_pages
from fairness.portal.pages.staff import alerts as staff_alerts
from fairness.portal.pages.staff import audit as staff_audit
from fairness.portal.pages.staff import budgets as staff_budget_pages
from fairness.portal.pages.staff import home as staff_home
from fairness.portal.pages.staff import keys as staff_keys
from fairness.portal.pages.staff import replicas as staff_replica_pages
from fairness.portal.pages.staff import requests as staff_request_pages
from fairness.portal.pages.staff import signin as staff_signin_pages
from fairness.portal.pages.staff import storage as staff_storage_pages
from fairness.portal.pages.staff import tiers as staff_tiers
from fairness.portal.pages.staff import tokens as staff_token_pages
from fairness.portal.pages.staff import usage as staff_usage_pages
from fairness.portal.pages.staff import users as staff_user_pages
from fairness.telemetry import gateway_metrics

# /v1/ is not here: it never reaches Django's URL resolver (gateway/asgi.py routes it).

urlpatterns = [
    path("", my_pages.home, name="home"),
    path("capacity/", public_pages.capacity, name="capacity"),
    path("favicon.ico", public_pages.favicon, name="favicon"),
    path("metrics", gateway_metrics.view, name="metrics"),
    # A signed-in person's own pages
    path("me/", my_pages.dashboard, name="me"),
    path("me/keys/", my_key_pages.keys, name="me-keys"),
    path("me/keys/<str:prefix>/rotate/", my_key_pages.rotate_key, name="me-key-rotate"),
    path("me/keys/<str:prefix>/revoke/", my_key_pages.revoke_key, name="me-key-revoke"),
    path("me/keys/<str:prefix>/limits/", my_key_pages.limits_key, name="me-key-limits"),
    path("me/standing/", my_standing_pages.standing, name="me-standing"),
    path("me/usage/", my_pages.usage, name="me-usage"),
    path("me/requests/", my_request_pages.my_requests, name="me-requests"),
    path("me/requests.csv", my_request_pages.my_requests_csv, name="me-requests-csv"),
    path("me/requests/<str:request_id>/", my_request_pages.my_request, name="me-request"),
    path("me/lab/", lab_pages.labs, name="me-labs"),
    path("me/lab/<str:name>/", lab_pages.lab, name="me-lab"),
    path("me/usage/daily.json", my_pages.usage_daily, name="me-usage-daily"),
    path("me/queue.json", my_queue_pages.my_queue, name="me-queue"),
    path("me/playground/", my_playground.playground, name="me-playground"),
    path("me/playground/key", my_playground.playground_key, name="me-playground-key"),
    path("me/batches/", batch_pages.my_batches, name="me-batches"),
    path("me/batches/<str:public_id>/cancel/", batch_pages.my_cancel, name="me-batch-cancel"),
    path("me/files/<str:public_id>/content", batch_pages.my_file_content, name="me-file-content"),
    # One's own password
    path("accounts/password/", account_pages.PasswordChangeView.as_view(), name="password-change"),
    path("accounts/password/done/", account_pages.PasswordChangeDoneView.as_view(), name="password-change-done"),
    # Staff pages
    path("staff/", staff_home.home, name="staff-home"),
    path("staff/keys/", staff_keys.keys, name="staff-keys"),
    path("staff/keys/load.json", staff_keys.keys_load, name="staff-keys-load"),
    path("staff/keys/issue/", staff_keys.issue_key, name="staff-key-issue"),
    path("staff/keys/<str:prefix>/revoke/", staff_keys.revoke_key, name="staff-key-revoke"),
    path("staff/keys/<str:prefix>/rotate/", staff_keys.rotate_key, name="staff-key-rotate"),
    path("staff/keys/<str:prefix>/front-end/", staff_keys.front_end_key, name="staff-key-front-end"),
    path("staff/keys/<str:prefix>/limits/", staff_keys.limits_key, name="staff-key-limits"),
    path("staff/users/", staff_user_pages.users, name="staff-users"),
    path("staff/users/new/", staff_user_pages.create_user, name="staff-user-create"),
    # `path`, not `str`: a username made before names were checked may hold a "/", and one such
    # name must not stop the users page (which links every row) for everyone.
    path("staff/users/<path:username>/password/", staff_user_pages.set_user_password, name="staff-user-password"),
    path("staff/users/<path:username>/tier/", staff_user_pages.set_user_tier, name="staff-user-tier"),
    path("staff/users/<path:username>/deactivate/", staff_user_pages.set_user_active, {"active": False},
         name="staff-user-deactivate"),
    path("staff/users/<path:username>/reactivate/", staff_user_pages.set_user_active, {"active": True},
         name="staff-user-reactivate"),
    path("staff/accounts/", staff_account_pages.accounts, name="staff-accounts"),
    path("staff/accounts/new/", staff_account_pages.add_account, name="staff-account-add"),
    path("staff/accounts/members/new/", staff_account_pages.add_member, name="staff-member-add"),
    path("staff/accounts/<str:name>/shares/", staff_account_pages.change_shares, name="staff-account-shares"),
    path("staff/budgets/", staff_budget_pages.budgets_page, name="staff-budgets"),
    path("staff/budgets/set/", staff_budget_pages.set_budget, name="staff-budget-set"),
    path("staff/budgets/<int:budget_id>/remove/", staff_budget_pages.remove_budget, name="staff-budget-remove"),
    path("staff/tokens/", staff_token_pages.tokens, name="staff-tokens"),
    path("staff/tokens/issue/", staff_token_pages.issue_token, name="staff-token-issue"),
    path("staff/tokens/<str:prefix>/revoke/", staff_token_pages.revoke_token, name="staff-token-revoke"),
    path("staff/tiers/", staff_tiers.tiers, name="staff-tiers"),
    path("staff/tiers/new/", staff_tiers.edit_tier, name="staff-tier-create"),
    path("staff/tiers/<slug:name>/edit/", staff_tiers.edit_tier, name="staff-tier-edit"),
    path("staff/replicas/", staff_replica_pages.replicas, name="staff-replicas"),
    path("staff/replicas/new/", staff_replica_pages.add_replica, name="staff-replica-add"),
    path("staff/replicas/<slug:name>/edit/", staff_replica_pages.edit_replica, name="staff-replica-edit"),
    path("staff/replicas/<slug:name>/delete/", staff_replica_pages.delete_replica, name="staff-replica-delete"),
    path("staff/replicas/<slug:name>/<slug:state>/", staff_replica_pages.replica_state, name="staff-replica-state"),
    path("staff/batches/", batch_pages.staff_batches, name="staff-batches"),
    path("staff/batches/<str:public_id>/cancel/", batch_pages.staff_cancel, name="staff-batch-cancel"),
    path("staff/storage/", staff_storage_pages.storage, name="staff-storage"),
    path("staff/storage/<path:username>/free/", staff_storage_pages.free, name="staff-storage-free"),
    path("staff/alerts/", staff_alerts.alerts, name="staff-alerts"),
    path("staff/alerts/<int:alert_id>/acknowledge/", staff_alerts.acknowledge_alert, name="staff-alert-acknowledge"),
    path("staff/sign-in/", staff_signin_pages.sign_in, name="staff-sign-in"),
    path("staff/sign-in/<int:mapping_id>/remove/", staff_signin_pages.remove_mapping, name="staff-sign-in-remove"),
    path("staff/audit/", staff_audit.audit, name="staff-audit"),
    path("staff/audit.csv", staff_audit.audit_csv, name="staff-audit-csv"),
    path("staff/usage/", staff_usage_pages.usage, name="staff-usage"),
    path("staff/usage.csv", staff_usage_pages.usage_csv, name="staff-usage-csv"),
    path("staff/usage.json", staff_usage_pages.usage_json, name="staff-usage-json"),
    path("staff/requests/", staff_request_pages.requests_log, name="staff-requests"),
    path("staff/requests.csv", staff_request_pages.requests_csv, name="staff-requests-csv"),
    path("staff/requests/<str:request_id>/", staff_request_pages.request_detail, name="staff-request"),
]
