"""/staff/sign-in/: the group mappings, staff only, every change audited; and the Django admin's."""

from __future__ import annotations

from django.test import Client

from fairness.models import AuditEntry, GroupMapping
from tests.support.oidc import Labs


def test_only_staff_reach_the_page(labs: Labs, researcher_client):
    mapping = GroupMapping.objects.get(group="nlp-lab")
    anonymous = Client()
    assert anonymous.get("/staff/sign-in/")["Location"].startswith("/accounts/login/")
    assert anonymous.post(f"/staff/sign-in/{mapping.pk}/remove/").status_code == 302
    assert researcher_client.get("/staff/sign-in/").status_code == 403
    assert researcher_client.post("/staff/sign-in/", {"group": "x", "account": labs.nlp.pk,
                                                      "tier": labs.standard.pk}).status_code == 403
    assert researcher_client.post(f"/staff/sign-in/{mapping.pk}/remove/").status_code == 403
    assert GroupMapping.objects.count() == 2 and not AuditEntry.objects.exists()


def test_staff_add_and_remove_mappings_audited(labs: Labs, staff_client):
    page = staff_client.get("/staff/sign-in/").content.decode()
    assert "nlp-lab" in page and "vision-lab" in page
    added = staff_client.post("/staff/sign-in/", {"group": "/labs/robotics", "account": labs.shared.pk,
                                                  "tier": labs.standard.pk})
    assert added.status_code == 302
    taken = staff_client.post("/staff/sign-in/", {"group": "nlp-lab", "account": labs.shared.pk,
                                                  "tier": labs.standard.pk})
    assert taken.status_code == 400 and "already exists" in taken.content.decode()
    mapping = GroupMapping.objects.get(group="/labs/robotics")
    assert staff_client.post(f"/staff/sign-in/{mapping.pk}/remove/").status_code == 302
    assert not GroupMapping.objects.filter(group="/labs/robotics").exists()
    assert list(AuditEntry.objects.order_by("pk").values_list("action", "target", "actor_name")) == [
        ("group_mapping.add", "/labs/robotics", "sam"), ("group_mapping.remove", "/labs/robotics", "sam")]


def test_the_django_admin_lists_mappings(labs: Labs, staff):
    staff.is_superuser = True
    staff.save()
    client = Client()
    client.force_login(staff)
    response = client.get("/admin/fairness/groupmapping/")
    assert response.status_code == 200 and "nlp-lab" in response.content.decode()
