from __future__ import annotations

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out, user_login_failed

        user_logged_out.connect(_close_sockets, dispatch_uid="reach-close-sockets")
        user_login_failed.connect(
            _audit_failed_login, dispatch_uid="reach-login-failed"
        )
        _import_extra_tool_modules()


def _import_extra_tool_modules() -> None:
    """Import REACH_EXTRA_TOOL_MODULES: their handlers register themselves."""
    import importlib

    from django.conf import settings

    for module in getattr(settings, "REACH_EXTRA_TOOL_MODULES", []):
        importlib.import_module(module)


def _close_sockets(sender: object, request: object, user: object, **_: object) -> None:
    """Sockets close when the session ends."""
    if user is None:
        return
    from agents.push import push, user_group

    push(user_group(user.pk), {"type": "session.ended"})  # type: ignore[attr-defined]


def _audit_failed_login(
    sender: object, credentials: dict[str, object], **_: object
) -> None:
    from traces.services import audit_append

    audit_append(
        kind="auth.login_failed",
        actor="anonymous",
        object_type="user",
        object_id=str(credentials.get("username", ""))[:150],
    )
