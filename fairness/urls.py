from django.urls import path

from fairness import metrics, proxy, views, views_me, views_staff

urlpatterns = [
    path("v1/chat/completions", proxy.chat_completions, name="chat-completions"),
    path("v1/completions", proxy.completions, name="completions"),
    path("v1/models", proxy.models, name="models"),
    path("", views_me.home, name="home"),
    path("capacity/", views.capacity, name="capacity"),
    path("metrics", metrics.view, name="metrics"),
    # A signed-in person's own pages
    path("me/", views_me.dashboard, name="me"),
    path("me/usage/", views_me.usage, name="me-usage"),
    path("me/usage/daily.json", views_me.usage_daily, name="me-usage-daily"),
    # Staff pages
    path("staff/keys/", views_staff.keys, name="staff-keys"),
    path("staff/keys/issue/", views_staff.issue_key, name="staff-key-issue"),
    path("staff/keys/<str:prefix>/revoke/", views_staff.revoke_key, name="staff-key-revoke"),
    path("staff/keys/<str:prefix>/rotate/", views_staff.rotate_key, name="staff-key-rotate"),
    path("staff/users/", views_staff.users, name="staff-users"),
    path("staff/users/new/", views_staff.create_user, name="staff-user-create"),
    path("staff/users/<str:username>/password/", views_staff.set_user_password, name="staff-user-password"),
    path("staff/users/<str:username>/tier/", views_staff.set_user_tier, name="staff-user-tier"),
    path("staff/tiers/", views_staff.tiers, name="staff-tiers"),
    path("staff/tiers/new/", views_staff.edit_tier, name="staff-tier-create"),
    path("staff/tiers/<slug:name>/edit/", views_staff.edit_tier, name="staff-tier-edit"),
    path("staff/replicas/", views_staff.replicas, name="staff-replicas"),
    path("staff/replicas/new/", views_staff.add_replica, name="staff-replica-add"),
    path("staff/replicas/<slug:name>/<slug:state>/", views_staff.replica_state, name="staff-replica-state"),
    path("staff/alerts/", views_staff.alerts, name="staff-alerts"),
    path("staff/alerts/<int:alert_id>/acknowledge/", views_staff.acknowledge_alert, name="staff-alert-acknowledge"),
    path("staff/audit/", views_staff.audit, name="staff-audit"),
]
