"""Issue 32, part 2: a bad sign-in is refused with a clear message, and nothing is
let in.

Each case runs the real flow against the local provider, made to misbehave in
one way. Every refusal lands on the login page with a message that says what was
wrong, leaves the browser signed out, creates no user and changes no group, and
is audited as ``sso.login_refused`` with its reason.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
import requests
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import override_settings
from joserfc.jwk import OctKey

from audit.models import AuditEvent, AuditKind
from registry.models import Secret
from sso.errors import RefusalReason
from sso.models import SSOIdentity
from tests.support.oidc_provider import (
    CLIENT_SECRET,
    PROVIDER_NAME,
    rsa_key,
    sign_in_through,
)

pytestmark = pytest.mark.django_db

User = get_user_model()
NEWCOMER = {"sub": "u-mallory", "email": "mallory@corp.example"}


def assert_refused(client: Any, response: Any, reason: RefusalReason, says: str) -> str:
    """The answer is the login page with the message; nobody got in; audited."""
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"
    assert "_auth_user_id" not in client.session
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert len(shown) == 1, shown
    assert shown[0].startswith(f"Sign-in with {PROVIDER_NAME} failed: ")
    assert says in shown[0], shown[0]
    # The page the browser lands on shows it.
    page = client.get("/accounts/login/")
    assert (
        f'<li class="error">Sign-in with {PROVIDER_NAME} failed'
        in page.content.decode()
    )
    assert "_auth_user_id" not in client.session
    refused = AuditEvent.objects.filter(kind=AuditKind.SSO_LOGIN_REFUSED).last()
    assert refused is not None and refused.data["reason"] == reason
    assert refused.actor == "anonymous"
    assert not AuditEvent.objects.filter(kind=AuditKind.SSO_LOGIN).exists()
    assert not User.objects.filter(email=NEWCOMER["email"]).exists()
    assert not SSOIdentity.objects.exists()
    return page.content.decode()


def test_a_callback_with_a_state_this_browser_never_sent_is_refused(client, idp):
    idp.sign_in_as(**NEWCOMER)
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302
    forged = client.get(
        "/oidc/callback/?" + urlencode({"code": "stolen-code", "state": "forged"})
    )
    assert_refused(client, forged, RefusalReason.BAD_STATE, "unknown state")
    # The product never took the code to the provider.
    assert not [hit for hit in idp.hits if hit.path == "/token"]


def test_a_callback_in_a_browser_that_started_nothing_is_refused(client, idp):
    idp.sign_in_as(**NEWCOMER)
    response = client.get("/oidc/callback/?code=c&state=s")
    assert_refused(client, response, RefusalReason.BAD_STATE, "not started in this")


def test_a_replayed_callback_is_refused(client, idp, alice):
    idp.sign_in_as(sub="u-alice", email="alice@example.com")
    callback = sign_in_through(client, idp)
    assert callback.response["Location"] == "/"
    client.logout()

    again = client.get(callback.url)

    assert again["Location"] == "/accounts/login/"
    assert "_auth_user_id" not in client.session
    refused = AuditEvent.objects.get(kind=AuditKind.SSO_LOGIN_REFUSED)
    assert refused.data["reason"] == RefusalReason.BAD_STATE


def test_a_callback_without_a_code_is_refused(client, idp):
    client.get("/oidc/authenticate/")
    state = next(iter(client.session["oidc_states"]))
    response = client.get("/oidc/callback/?" + urlencode({"state": state}))
    assert_refused(client, response, RefusalReason.BAD_STATE, "lacks its code")


def test_a_token_with_another_nonce_is_refused(client, idp):
    idp.sign_in_as(**NEWCOMER)
    idp.misbehave(nonce="a-nonce-of-another-sign-in")
    callback = sign_in_through(client, idp)
    assert_refused(client, callback.response, RefusalReason.BAD_NONCE, "nonce mismatch")


def test_a_token_from_another_issuer_is_refused(client, idp):
    idp.sign_in_as(**NEWCOMER)
    idp.misbehave(issuer="https://evil.example")
    callback = sign_in_through(client, idp)
    assert_refused(
        client,
        callback.response,
        RefusalReason.WRONG_ISSUER,
        f"another issuer, not {idp.issuer}",
    )


def test_a_token_signed_by_another_key_under_the_published_kid_is_refused(client, idp):
    idp.sign_in_as(**NEWCOMER)
    idp.misbehave(key=rsa_key("key-1"))  # same kid, not the published key
    callback = sign_in_through(client, idp)
    assert_refused(
        client, callback.response, RefusalReason.BAD_SIGNATURE, "does not verify"
    )


def test_a_token_signed_by_a_key_the_provider_does_not_publish_is_refused(client, idp):
    idp.sign_in_as(**NEWCOMER)
    idp.misbehave(key=rsa_key("attacker"))
    callback = sign_in_through(client, idp)
    assert_refused(
        client,
        callback.response,
        RefusalReason.BAD_SIGNATURE,
        "signed by a key Test IdP does not publish (kid 'attacker')",
    )


def test_a_token_signed_with_the_client_secret_is_refused(client, idp):
    # HS256 with the shared secret: whoever has the secret could mint it.
    idp.sign_in_as(**NEWCOMER)
    idp.misbehave(key=OctKey.import_key(CLIENT_SECRET), algorithm="HS256")
    callback = sign_in_through(client, idp)
    assert_refused(
        client, callback.response, RefusalReason.BAD_SIGNATURE, "'HS256', not RS256"
    )


def test_an_expired_token_is_refused(client, idp):
    idp.sign_in_as(**NEWCOMER)
    idp.misbehave(lifetime_s=-3600)
    callback = sign_in_through(client, idp)
    assert_refused(client, callback.response, RefusalReason.EXPIRED, "has expired")


def test_a_token_for_another_client_is_refused(client, idp):
    idp.sign_in_as(**NEWCOMER)
    idp.misbehave(audience="another-app")
    callback = sign_in_through(client, idp)
    assert_refused(
        client,
        callback.response,
        RefusalReason.WRONG_AUDIENCE,
        f"another client, not {idp.client_id}",
    )


def test_a_token_for_several_clients_must_name_us_as_its_party(client, idp):
    idp.sign_in_as(**NEWCOMER, azp="another-app")
    idp.misbehave(audience=[idp.client_id, "another-app"])
    callback = sign_in_through(client, idp)
    assert_refused(client, callback.response, RefusalReason.WRONG_AUDIENCE, "another")


@pytest.mark.parametrize("verified", [False, "false", None])
def test_an_unverified_email_is_refused(client, idp, alice, verified):
    # alice's address, unverified: matching by it would hand over her account.
    idp.sign_in_as(sub="u-x", email="alice@example.com", email_verified=verified)
    callback = sign_in_through(client, idp)
    assert_refused(
        client,
        callback.response,
        RefusalReason.EMAIL_UNVERIFIED,
        "has not verified the e-mail alice@example.com",
    )


def test_userinfo_that_contradicts_the_verified_token_cannot_verify_an_email(
    client, idp, alice
):
    idp.sign_in_as(sub="u-x", email="alice@example.com", email_verified=False)
    idp.misbehave(userinfo={"sub": "u-someone-else", "email_verified": True})
    callback = sign_in_through(client, idp)
    assert_refused(
        client, callback.response, RefusalReason.BAD_CLAIMS, "another subject"
    )


def test_a_groups_claim_that_is_not_a_list_of_names_is_refused(client, idp):
    idp.sign_in_as(**NEWCOMER, groups=[{"name": "idp-approvers"}])
    callback = sign_in_through(client, idp)
    assert_refused(client, callback.response, RefusalReason.BAD_CLAIMS, "'groups'")


def test_the_providers_own_refusal_is_shown(client, idp):
    idp.user = None  # nobody signed in at the provider: it answers access_denied
    callback = sign_in_through(client, idp)
    assert_refused(
        client, callback.response, RefusalReason.PROVIDER_ERROR, "'access_denied'"
    )
    # The state is spent.
    assert client.session["oidc_states"] == {}


def test_a_code_the_provider_rejects_is_refused_with_its_error(client, idp):
    idp.sign_in_as(**NEWCOMER)
    idp.client_secret = "rotated-at-the-provider"
    callback = sign_in_through(client, idp)
    assert_refused(client, callback.response, RefusalReason.PROVIDER_ERROR, "HTTP 401")
    assert (
        "invalid_client"
        in AuditEvent.objects.get(kind=AuditKind.SSO_LOGIN_REFUSED).data["detail"]
    )


def test_an_unknown_person_is_refused_when_creating_users_is_off(client, idp):
    idp.sign_in_as(**NEWCOMER)
    with override_settings(REACH_OIDC_CREATE_USERS=False):
        callback = sign_in_through(client, idp)
    assert_refused(
        client, callback.response, RefusalReason.NO_ACCOUNT, "ask an admin to add one"
    )


def test_a_deactivated_user_is_refused(client, idp, bob):
    bob.is_active = False
    bob.save(update_fields=["is_active"])
    idp.sign_in_as(sub="u-bob", email="bob@example.com", groups=["idp-approvers"])
    callback = sign_in_through(client, idp)
    assert_refused(client, callback.response, RefusalReason.INACTIVE, "deactivated")
    assert not bob.groups.filter(name="approvers").exists()


def test_two_accounts_with_one_email_are_refused(client, idp, alice, bob):
    bob.email = alice.email
    bob.save(update_fields=["email"])
    idp.sign_in_as(sub="u-x", email=alice.email)
    callback = sign_in_through(client, idp)
    assert_refused(
        client, callback.response, RefusalReason.AMBIGUOUS_EMAIL, "More than one"
    )


def test_an_email_whose_account_is_bound_to_another_subject_is_refused(
    client, idp, alice
):
    idp.sign_in_as(sub="u-alice", email="alice@example.com")
    sign_in_through(client, idp)
    client.logout()
    AuditEvent.objects.all().delete()  # only the second sign-in's events below

    # Another provider account that now has alice's address.
    idp.sign_in_as(sub="u-impostor", email="alice@example.com")
    callback = sign_in_through(client, idp)

    assert callback.response["Location"] == "/accounts/login/"
    assert "_auth_user_id" not in client.session
    refused = AuditEvent.objects.get(kind=AuditKind.SSO_LOGIN_REFUSED)
    assert refused.data["reason"] == RefusalReason.AMBIGUOUS_EMAIL
    assert SSOIdentity.objects.get().subject == "u-alice"


def test_an_unreachable_provider_is_refused_at_the_start(client, idp):
    idp.stop()
    response = client.get("/oidc/authenticate/")
    assert_refused(
        client, response, RefusalReason.PROVIDER_UNREACHABLE, "could not be reached"
    )


def test_a_discovery_document_of_another_issuer_is_refused(client, idp):
    with override_settings(REACH_OIDC_ISSUER=idp.issuer + "/realms/other"):
        response = client.get("/oidc/authenticate/")
        assert_refused(
            client,
            response,
            RefusalReason.PROVIDER_UNREACHABLE,
            f"calls itself '{idp.issuer}', not '{idp.issuer}/realms/other'",
        )
    assert any(
        hit.path == "/realms/other/.well-known/openid-configuration" for hit in idp.hits
    )


def test_a_plain_http_endpoint_off_loopback_is_refused(client, idp):
    with override_settings(
        REACH_OIDC_AUTHORIZATION_ENDPOINT="http://idp.example/authorize"
    ):
        response = client.get("/oidc/authenticate/")
    assert_refused(client, response, RefusalReason.PROVIDER_UNREACHABLE, "not https")


def test_no_client_secret_is_refused_with_where_to_set_it(client, idp):
    Secret.objects.all().delete()
    idp.sign_in_as(**NEWCOMER)
    callback = sign_in_through(client, idp)
    assert_refused(
        client,
        callback.response,
        RefusalReason.NOT_CONFIGURED,
        "REACH_SECRET_OIDC_CLIENT_SECRET",
    )


def test_a_sign_in_that_took_too_long_is_refused(client, idp):
    idp.sign_in_as(**NEWCOMER)
    start = client.get("/oidc/authenticate/")
    session = client.session
    state = next(iter(session["oidc_states"]))
    session["oidc_states"][state]["added_on"] -= 11 * 60
    session.save()
    answer = requests.get(start["Location"], allow_redirects=False, timeout=10)
    back = urlsplit(answer.headers["Location"])
    response = client.get(f"{back.path}?{back.query}")
    assert_refused(client, response, RefusalReason.BAD_STATE, "longer than 10 minutes")


def test_an_error_callback_this_browser_did_not_start_shows_none_of_its_words(
    client, idp
):
    client.get("/oidc/authenticate/")
    lure = "Your account is locked: call +1 555 0100"
    response = client.get(
        "/oidc/callback/?"
        + urlencode({"error": "access_denied", "error_description": lure})
    )
    page = assert_refused(client, response, RefusalReason.BAD_STATE, "unknown state")
    assert "555 0100" not in page
    assert "555 0100" not in str(AuditEvent.objects.last().data)
