"""Issue 32, part 2: one person's first sign-in, twice at once (two tabs, a retry),
makes one user and one binding."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from audit.models import AuditEvent, AuditKind
from sso.config import GroupMap, Provider
from sso.models import SSOIdentity
from sso.services import SignIn, sso_sign_in

PROVIDER = Provider(
    name="Test IdP",
    issuer="https://idp.example",
    client_id="agent-reach",
    authorization_endpoint="https://idp.example/authorize",
    token_endpoint="https://idp.example/token",
    userinfo_endpoint="https://idp.example/userinfo",
    jwks_uri="https://idp.example/jwks",
    scopes="openid email profile",
    sign_algo="RS256",
    groups_claim="groups",
    email_verified_claim="email_verified",
    group_map=GroupMap.parse("idp-approvers=approvers"),
    create_users=True,
    timeout_s=5.0,
)
CLAIMS = {
    "sub": "u-twice",
    "email": "twice@corp.example",
    "email_verified": True,
    "groups": ["idp-approvers"],
}


@pytest.mark.dbsensitive
def test_two_first_sign_ins_at_once_make_one_user_and_one_binding(
    transactional_db, demo
):
    count = 4
    start = threading.Barrier(count)
    results: list[SignIn] = []
    errors: list[BaseException] = []

    def sign_in(_: int) -> None:
        try:
            start.wait()
            results.append(sso_sign_in(provider=PROVIDER, claims=CLAIMS))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sign_in, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    users = get_user_model().objects.filter(email="twice@corp.example")
    assert users.count() == 1
    assert {result.user.pk for result in results} == {users.get().pk}
    assert [result.created for result in results].count(True) == 1
    assert SSOIdentity.objects.filter(subject="u-twice").count() == 1
    assert list(users.get().groups.values_list("name", flat=True)) == ["approvers"]
    assert AuditEvent.objects.filter(kind=AuditKind.SSO_LOGIN).count() == count
    assert AuditEvent.objects.filter(kind=AuditKind.SSO_USER_CREATED).count() == 1
