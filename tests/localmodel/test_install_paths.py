"""The installer puts the weights where the product looks for them."""

from __future__ import annotations

from django.conf import settings

from localmodel import install


def test_the_default_var_dir_is_the_one_the_settings_use(monkeypatch):
    monkeypatch.delenv("REACH_VAR_DIR", raising=False)
    assert install.REPO_ROOT == settings.BASE_DIR
    assert install.default_var_dir() == settings.BASE_DIR / "var"
    assert install.model_path().parent == settings.BASE_DIR / "var" / "models"
