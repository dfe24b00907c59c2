"""Every change made through the pages lands in the audit log with who did it and from where."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fairness.models import ApiKey, AuditEntry, Replica, SaturationAlert
from tests.support.cast import STAFF_IP
from tests.support.key_forms import key_form
from tests.support.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_page_action_is_audited_with_actor_and_address(staff, staff_client, cast):
    alert = SaturationAlert.objects.create(model="tiny", kind="kv", opened_at=timezone.now(),
                                           figures={"kv_usage": 0.97})
    bob_key = ApiKey.objects.get(pk=cast["bob"].key_id)
    alice_key = ApiKey.objects.get(pk=cast["alice"].key_id)
    tier = {"description": "", "per_key_concurrency": 3, "pool_concurrency": "", "head_start_seconds": 0,
            "max_queue_wait_seconds": 60, "max_queued_per_key": 8, "engine_priority": 0,
            "fairshare_weight_seconds": 300, "queue_events": "on"}
    engine_url = f"http://127.0.0.1:{free_port()}"
    steps = [
        ("/staff/keys/issue/", key_form(owner="carol", tier="batch"), "key.issue"),
        (f"/staff/keys/{bob_key.prefix}/revoke/", {}, "key.revoke"),
        (f"/staff/keys/{alice_key.prefix}/rotate/", key_form(grace_seconds=0), "key.rotate"),
        ("/staff/users/new/", {"username": "dora"}, "user.create"),
        ("/staff/users/dora/password/", {"new_password1": "a fine long one", "new_password2": "a fine long one"},
         "user.password"),
        ("/staff/users/carol/tier/", {"tier": "interactive"}, "user.tier"),
        ("/staff/tiers/new/", {"name": "gold", **tier}, "tier.create"),
        ("/staff/tiers/gold/edit/", {"name": "gold", **tier, "per_key_concurrency": 5}, "tier.update"),
        # A loopback port nobody listens on: adding it probes it, which is refused at once.
        ("/staff/replicas/new/", {"name": "gpu1", "base_url": engine_url, "model": "tiny",
                                  "engine_kind": "vllm", "max_num_seqs": 8, "scheduling_policy": "fcfs"},
         "replica.create"),
        ("/staff/replicas/gpu1/edit/", {"base_url": engine_url, "model": "tiny", "engine_kind": "vllm",
                                        "max_num_seqs": 4, "scheduling_policy": "fcfs"}, "replica.update"),
        ("/staff/users/alice/deactivate/", {}, "user.deactivate"),
        ("/staff/users/alice/reactivate/", {}, "user.reactivate"),
        ("/staff/replicas/gpu1/drain/", {}, "replica.drain"),
        ("/staff/replicas/gpu1/enable/", {}, "replica.enable"),
        ("/staff/replicas/gpu1/disable/", {}, "replica.disable"),
        (f"/staff/alerts/{alert.pk}/acknowledge/", {}, "alert.acknowledge"),
    ]
    for path, body, action in steps:
        response = staff_client.post(path, body)
        assert response.status_code in (200, 302), (path, response.content)
        entry = AuditEntry.objects.first()  # newest first
        assert entry.action == action, (path, entry)
        assert (entry.actor, entry.actor_name, entry.ip) == (staff, "sam", STAFF_IP)

    assert AuditEntry.objects.count() == len(steps)
    by_action = {e.action: e for e in AuditEntry.objects.all()}
    assert by_action["key.revoke"].target == bob_key.prefix
    assert by_action["tier.update"].detail == {"per_key_concurrency": 5}
    assert by_action["user.tier"].detail == {"tier": "interactive", "keys": 2}
    assert by_action["replica.update"].detail == {"max_num_seqs": 4, "tiers": []}
    assert Replica.objects.get(name="gpu1").enabled is False

    # The log page lists them all, newest first, with the address.
    html = staff_client.get("/staff/audit/").content.decode()
    positions = [html.index(f"<code>{action}</code>") for _, _, action in reversed(steps)]
    assert positions == sorted(positions)
    assert STAFF_IP in html


def test_a_refused_or_invalid_action_writes_nothing(staff_client, researcher_client, cast):
    researcher_client.post("/staff/users/new/", {"username": "mallory"})
    staff_client.post("/staff/tiers/batch/edit/", {"name": "batch", "per_key_concurrency": 0})
    staff_client.post("/staff/keys/issue/", key_form(owner="nobody", tier="batch"))
    assert AuditEntry.objects.count() == 0
