"""Secrets in the admin: encrypted at rest, write-only, never rendered again."""

from __future__ import annotations

import pytest

from registry.models import Secret
from registry.secrets import secret_set, secret_value

pytestmark = pytest.mark.django_db

VALUE = "adm1n-only-secret-value-31337"


def test_a_secret_is_stored_encrypted(demo):
    secret_set(name="SHOP_TOKEN", value=VALUE)
    stored = Secret.objects.get(name="SHOP_TOKEN")
    assert VALUE not in stored.ciphertext
    assert secret_value("SHOP_TOKEN") == VALUE


def test_the_admin_saves_a_secret_and_never_renders_its_value(client, admin_user):
    client.force_login(admin_user)
    response = client.post(
        "/admin/registry/secret/add/", {"name": "SHOP_TOKEN", "value": VALUE}
    )
    assert response.status_code == 302, response.content
    secret = Secret.objects.get(name="SHOP_TOKEN")
    assert secret_value("SHOP_TOKEN") == VALUE
    pages = [
        client.get("/admin/registry/secret/"),
        client.get(f"/admin/registry/secret/{secret.pk}/change/"),
        client.get(f"/admin/registry/secret/{secret.pk}/history/"),
        client.get(f"/admin/registry/secret/{secret.pk}/delete/"),
    ]
    for page in pages:
        assert page.status_code == 200
        html = page.content.decode()
        assert VALUE not in html
        assert secret.ciphertext not in html
    change = pages[1].content.decode()
    assert 'type="password"' in change
    assert 'name="value"' in change and 'value="' + VALUE not in change


def test_saving_the_admin_form_without_a_value_keeps_the_secret(client, admin_user):
    secret_set(name="SHOP_TOKEN", value=VALUE)
    secret = Secret.objects.get(name="SHOP_TOKEN")
    client.force_login(admin_user)
    response = client.post(
        f"/admin/registry/secret/{secret.pk}/change/",
        {"name": "SHOP_TOKEN", "value": ""},
    )
    assert response.status_code == 302
    assert secret_value("SHOP_TOKEN") == VALUE


def test_a_new_secret_needs_a_value(client, admin_user):
    client.force_login(admin_user)
    response = client.post(
        "/admin/registry/secret/add/", {"name": "EMPTY", "value": ""}
    )
    assert response.status_code == 200
    assert "A new secret needs a value." in response.content.decode()
    assert not Secret.objects.filter(name="EMPTY").exists()
