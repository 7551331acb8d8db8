"""Which provider account signs in as which user."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class SSOIdentity(models.Model):
    """A provider's subject (``iss`` + ``sub``) bound to one user.

    Made at the first sign-in (the user matched by verified e-mail, or created),
    then the subject alone finds the user: a provider account whose e-mail later
    changes to someone else's does not become that someone.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="sso_identities",
    )
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    email = models.EmailField(max_length=254, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_login_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "SSO identity"
        verbose_name_plural = "SSO identities"
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"], name="sso_identity_unique_subject"
            ),
            # One account at a provider per user.
            models.UniqueConstraint(
                fields=["user", "issuer"], name="sso_identity_one_per_user"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
