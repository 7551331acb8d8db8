"""Issue 32, part 2: signing in through an OpenID provider, users and groups.

Every test runs the real code flow against the local provider on loopback: the
product's start page, the provider's authorize endpoint over HTTP, the callback,
and the product's own calls to the provider's token, JWKS and userinfo
endpoints.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import override_settings

from audit.models import AuditEvent, AuditKind
from audit.services import audit_verify
from registry.models import Secret
from sso.models import SSOIdentity
from sso.views import SESSION_ISSUER
from tests.support.oidc_provider import PROVIDER_NAME, sign_in_through

pytestmark = pytest.mark.django_db

User = get_user_model()


def signed_in_user(client: Any) -> Any:
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id) if user_id else None


def group_names(user: Any) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def events(kind: AuditKind) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=kind).order_by("position"))


def test_the_login_page_offers_sign_in_with_the_provider_when_configured(client, idp):
    page = client.get("/accounts/login/?next=/traces/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"Sign in with {PROVIDER_NAME}" in html
    assert 'href="/oidc/authenticate/?next=/traces/"' in html
    # The password form is still there.
    assert 'name="password"' in html


def test_without_configuration_there_is_no_button_and_no_route(client, db):
    page = client.get("/accounts/login/")
    assert "Sign in with" not in page.content.decode()
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404


def test_the_start_sends_state_nonce_and_a_pkce_challenge_to_the_provider(client, idp):
    start = client.get("/oidc/authenticate/", {"next": "/"})
    assert start.status_code == 302
    target = urlsplit(start["Location"])
    query = {name: values[0] for name, values in parse_qs(target.query).items()}
    assert (
        f"{target.scheme}://{target.netloc}{target.path}" == f"{idp.issuer}/authorize"
    )
    assert query["client_id"] == idp.client_id
    assert query["response_type"] == "code"
    assert query["redirect_uri"] == "http://testserver/oidc/callback/"
    assert set(query["scope"].split()) == {"openid", "email", "profile"}
    assert query["code_challenge_method"] == "S256"
    assert len(query["state"]) >= 32 and len(query["nonce"]) >= 32
    # Kept in this browser's session only.
    assert query["state"] in client.session["oidc_states"]


def test_a_new_person_is_created_from_a_verified_email_with_the_mapped_groups(
    client, idp
):
    idp.sign_in_as(
        sub="u-carol",
        email="carol@corp.example",
        groups=["idp-approvers", "idp-ops", "idp-unmapped"],
    )

    callback = sign_in_through(client, idp, next_url="/traces/")

    assert callback.response.status_code == 302
    assert callback.response["Location"] == "/traces/"
    carol = signed_in_user(client)
    assert carol.email == "carol@corp.example"
    assert carol.username == "carol@corp.example"
    assert not carol.has_usable_password()
    assert group_names(carol) == {"approvers", "operators"}
    assert carol.has_perm("approvals.decide_approval")
    assert client.session[SESSION_ISSUER] == idp.issuer
    identity = SSOIdentity.objects.get(user=carol)
    assert (identity.issuer, identity.subject) == (idp.issuer, "u-carol")

    created, changed, login = (
        events(AuditKind.SSO_USER_CREATED),
        events(AuditKind.USER_GROUPS_CHANGED),
        events(AuditKind.SSO_LOGIN),
    )
    assert [e.object_id for e in created] == [str(carol.pk)]
    assert changed[0].actor == "carol@corp.example"
    assert changed[0].data == {
        "issuer": idp.issuer,
        "subject": "u-carol",
        "source": "sso",
        "added": ["approvers", "operators"],
        "removed": [],
    }
    assert login[0].data["created"] is True
    assert audit_verify()[1] == []

    # The product spoke to the provider as a confidential client with PKCE.
    token = next(hit for hit in idp.hits if hit.path == "/token")
    client_auth = base64.b64decode(token.headers["authorization"].split()[1]).decode()
    assert client_auth == f"{idp.client_id}:{idp.client_secret}"
    form = parse_qs(token.body.decode())
    assert "client_secret" not in form
    assert len(form["code_verifier"][0]) >= 43


def test_an_existing_user_is_matched_by_verified_email_and_keeps_unmapped_groups(
    client, idp, alice
):
    # Not in the map: left alone by every sign-in.
    alice.groups.add(Group.objects.create(name="finance"))
    idp.sign_in_as(sub="u-alice", email="ALICE@example.com", groups=["idp-audit"])

    callback = sign_in_through(client, idp)

    assert callback.response["Location"] == "/"
    assert signed_in_user(client) == alice
    assert group_names(alice) == {"finance", "auditors"}
    assert User.objects.filter(email__iexact="alice@example.com").count() == 1
    assert events(AuditKind.SSO_USER_CREATED) == []


def test_groups_are_mapped_again_on_each_sign_in(client, idp, operator):
    # operator is in approvers, auditors, operators and reviewers (the demo seed);
    # reviewers is not in the map, so no sign-in touches it.
    idp.sign_in_as(sub="u-op", email="operator@example.com", groups=["idp-approvers"])
    sign_in_through(client, idp)
    operator.refresh_from_db()
    assert group_names(operator) == {"approvers", "reviewers"}
    first = events(AuditKind.USER_GROUPS_CHANGED)[-1]
    assert first.data["added"] == [] and first.data["removed"] == [
        "auditors",
        "operators",
    ]

    client.logout()
    # The provider drops every group (Okta and Keycloak then omit the claim).
    idp.sign_in_as(sub="u-op", email="operator@example.com")
    sign_in_through(client, idp)
    assert group_names(operator) == {"reviewers"}
    assert not operator.has_perm("approvals.decide_approval")

    client.logout()
    idp.sign_in_as(sub="u-op", email="operator@example.com", groups=["idp-ops"])
    sign_in_through(client, idp)
    assert group_names(operator) == {"operators", "reviewers"}
    changes = [
        (e.data["added"], e.data["removed"])
        for e in events(AuditKind.USER_GROUPS_CHANGED)
    ]
    assert changes == [
        ([], ["auditors", "operators"]),
        ([], ["approvers"]),
        (["operators"], []),
    ]
    assert len(events(AuditKind.SSO_LOGIN)) == 3


def test_a_sign_in_that_changes_no_group_records_the_login_alone(client, idp, bob):
    idp.sign_in_as(sub="u-bob", email="bob@example.com", groups=[])
    sign_in_through(client, idp)
    assert signed_in_user(client) == bob
    assert events(AuditKind.USER_GROUPS_CHANGED) == []
    assert len(events(AuditKind.SSO_LOGIN)) == 1


def test_a_known_subject_stays_its_user_when_its_email_changes(client, idp, bob):
    idp.sign_in_as(sub="u-bob", email="bob@example.com")
    sign_in_through(client, idp)
    client.logout()

    # The provider account now claims alice's address: it is still bob.
    idp.sign_in_as(sub="u-bob", email="alice@example.com")
    sign_in_through(client, idp)

    assert signed_in_user(client) == bob
    assert SSOIdentity.objects.get(user=bob).email == "alice@example.com"


def test_a_mapped_group_that_does_not_exist_is_reported_not_made(client, idp):
    with override_settings(REACH_OIDC_GROUP_MAP="idp-approvers=approvers,x=nobody"):
        idp.sign_in_as(sub="u-dan", email="dan@corp.example", groups=["x"])
        sign_in_through(client, idp)
    assert not Group.objects.filter(name="nobody").exists()
    assert events(AuditKind.SSO_LOGIN)[0].data["missing_groups"] == ["nobody"]


def test_the_client_secret_may_come_from_the_environment(client, idp, monkeypatch):
    Secret.objects.all().delete()
    monkeypatch.setenv("REACH_SECRET_OIDC_CLIENT_SECRET", idp.client_secret)
    idp.sign_in_as(sub="u-erin", email="erin@corp.example")
    assert sign_in_through(client, idp).response["Location"] == "/"
    assert signed_in_user(client).email == "erin@corp.example"


def test_a_provider_that_takes_only_secrets_in_the_body_gets_them_there(client, idp):
    idp.token_auth_methods = ["client_secret_post"]
    idp.sign_in_as(sub="u-fay", email="fay@corp.example")
    sign_in_through(client, idp)
    token = next(hit for hit in idp.hits if hit.path == "/token")
    assert "authorization" not in token.headers
    assert parse_qs(token.body.decode())["client_secret"] == [idp.client_secret]
    assert signed_in_user(client).email == "fay@corp.example"


def test_password_logins_still_work_beside_it(client, idp, alice):
    answer = client.post(
        "/accounts/login/", {"username": "alice", "password": "test-password-1234"}
    )
    assert answer.status_code == 302
    assert signed_in_user(client) == alice
    # A password login never reaches the provider.
    assert [hit.path for hit in idp.hits] == []


def test_a_next_address_on_another_site_is_not_followed(client, idp):
    idp.sign_in_as(sub="u-gil", email="gil@corp.example")
    callback = sign_in_through(client, idp, next_url="https://evil.example/")
    assert callback.response["Location"] == "/"
    assert signed_in_user(client).email == "gil@corp.example"


def test_an_admin_unbinds_an_identity_and_the_next_sign_in_binds_the_new_one(
    client, idp, alice, admin_user
):
    idp.sign_in_as(sub="u-alice-old", email="alice@example.com")
    sign_in_through(client, idp)
    identity = SSOIdentity.objects.get(user=alice)
    client.logout()

    client.force_login(admin_user)
    page = client.get(f"/admin/sso/ssoidentity/{identity.pk}/change/")
    assert page.status_code == 200 and "u-alice-old" in page.content.decode()
    deleted = client.post(
        f"/admin/sso/ssoidentity/{identity.pk}/delete/", {"post": "yes"}
    )
    assert deleted.status_code == 302
    assert not SSOIdentity.objects.exists()
    unbound = AuditEvent.objects.get(kind=AuditKind.SSO_IDENTITY_UNBOUND)
    assert unbound.actor == "admin"
    assert unbound.data == {"issuer": idp.issuer, "subject": "u-alice-old"}
    client.logout()

    # alice's account at the provider was made anew: a new subject, same address.
    idp.sign_in_as(sub="u-alice-new", email="alice@example.com")
    sign_in_through(client, idp)
    assert signed_in_user(client) == alice
    assert SSOIdentity.objects.get(user=alice).subject == "u-alice-new"


def test_the_admin_bulk_delete_is_audited_for_each_identity(client, idp, admin_user):
    for sub, email in [("u-h", "h@corp.example"), ("u-i", "i@corp.example")]:
        idp.sign_in_as(sub=sub, email=email)
        sign_in_through(client, idp)
        client.logout()
    client.force_login(admin_user)
    answer = client.post(
        "/admin/sso/ssoidentity/",
        {
            "action": "delete_selected",
            "_selected_action": list(SSOIdentity.objects.values_list("pk", flat=True)),
            "post": "yes",
        },
    )
    assert answer.status_code == 302
    assert not SSOIdentity.objects.exists()
    assert sorted(
        e.data["subject"]
        for e in AuditEvent.objects.filter(kind=AuditKind.SSO_IDENTITY_UNBOUND)
    ) == ["u-h", "u-i"]


def test_a_signed_in_session_is_served_without_asking_the_provider(client, idp):
    idp.sign_in_as(sub="u-jo", email="jo@corp.example")
    sign_in_through(client, idp)
    asked = len(idp.hits)
    assert client.get("/").status_code == 200
    assert client.get("/traces/").status_code == 200
    assert len(idp.hits) == asked


def test_turning_single_sign_on_off_ends_the_sessions_it_made(client, idp):
    idp.sign_in_as(sub="u-jo", email="jo@corp.example")
    sign_in_through(client, idp)
    with override_settings(
        REACH_OIDC_ENABLED=False,
        AUTHENTICATION_BACKENDS=["django.contrib.auth.backends.ModelBackend"],
    ):
        answer = client.get("/")
    assert answer.status_code == 302
    assert answer["Location"].startswith("/accounts/login/")
