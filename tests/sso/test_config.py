"""Issue 32, part 2: single sign-on's configuration, read from settings and checked
at start-up."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings

from sso.checks import check_settings
from sso.config import GroupMap


def test_the_group_map_reads_pairs_and_manages_only_what_it_names():
    mapping = GroupMap.parse(
        " idp-approvers=approvers, idp-ops = operators,,x=operators"
    )
    assert mapping.pairs == (
        ("idp-approvers", "approvers"),
        ("idp-ops", "operators"),
        ("x", "operators"),
    )
    assert mapping.managed == {"approvers", "operators"}
    assert mapping.granted(["x", "idp-unknown"]) == {"operators"}
    assert mapping.granted([]) == frozenset()
    assert GroupMap.parse("") == GroupMap()


@pytest.mark.parametrize("text", ["approvers", "=approvers", "idp-ops="])
def test_a_group_map_entry_that_is_not_a_pair_is_named(text):
    with pytest.raises(ValueError, match=f"entry {text!r} is not provider-group"):
        GroupMap.parse(text)


def test_unconfigured_single_sign_on_adds_no_backend_and_no_check_error():
    assert settings.REACH_OIDC_ENABLED is False
    # The lockout check (accounts/) and the passwords: no SSO backend.
    assert settings.AUTHENTICATION_BACKENDS == [
        "axes.backends.AxesStandaloneBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    assert check_settings() == []


@pytest.mark.parametrize(
    ("overrides", "error_id", "says"),
    [
        (
            {"REACH_OIDC_ISSUER": "https://idp.example"},
            "sso.E001",
            "REACH_OIDC_CLIENT_ID",
        ),
        ({"REACH_OIDC_CLIENT_ID": "reach"}, "sso.E001", "REACH_OIDC_ISSUER"),
        ({"REACH_OIDC_GROUP_MAP": "approvers"}, "sso.E002", "'approvers'"),
        ({"REACH_OIDC_SIGN_ALGO": "HS256"}, "sso.E003", "'HS256'"),
        ({"REACH_OIDC_SIGN_ALGO": "none"}, "sso.E003", "'none'"),
    ],
)
def test_a_bad_configuration_is_an_error_at_start_up(overrides, error_id, says):
    with override_settings(**overrides):
        errors = [message for message in run_checks() if message.id.startswith("sso.")]
    assert [error.id for error in errors] == [error_id]
    assert says in errors[0].msg
