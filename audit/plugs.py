"""What audit hooks into: a failed login is recorded in the chain."""

from __future__ import annotations

from django.contrib.auth.signals import user_login_failed

from audit.services import audit_failed_login

user_login_failed.connect(audit_failed_login, dispatch_uid="reach-login-failed")
