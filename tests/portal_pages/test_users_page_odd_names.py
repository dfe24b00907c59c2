"""One user's name never breaks the users page for every staff member: names made before the
SSO sign-in checked them may hold a "/" or run to the column's 150 characters."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import Client

from fairness.actions.users import create_user
from fairness.portal.signin import group_sync

User = get_user_model()
OIDC = group_sync.sync_actor("oidc")


def test_the_users_page_answers_with_a_name_made_before_names_were_checked(staff):
    # What the username-matching sign-in used to make from a claim of `lab/alice`.
    odd = User.objects.create_user("lab/alice")
    create_user(OIDC, "x" * 150)

    staff_client = Client(REMOTE_ADDR="127.0.0.7")
    staff_client.force_login(staff)
    page = staff_client.get("/staff/users/")

    assert page.status_code == 200
    assert 'href="/staff/users/lab/alice/password/"' in page.content.decode()
    assert staff_client.get("/staff/users/lab/alice/password/").status_code == 200
    response = staff_client.post("/staff/users/lab/alice/deactivate/")
    assert response.status_code == 302
    odd.refresh_from_db()
    assert not odd.is_active
