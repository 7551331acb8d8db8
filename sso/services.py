"""Signing in through the provider: find or make the user, map the groups, audit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.models import AuditKind
from audit.services import audit_append
from sso.config import Provider
from sso.errors import RefusalReason, SSORefused
from sso.models import SSOIdentity

#: The longest username Django's user model takes.
USERNAME_MAX = 150


@dataclass(frozen=True)
class SignIn:
    """Who signed in, and what the sign-in changed."""

    user: Any
    created: bool
    groups_added: tuple[str, ...]
    groups_removed: tuple[str, ...]
    #: Product groups the map names that do not exist here (nothing to add to).
    groups_missing: tuple[str, ...]


def email_verified(value: Any) -> bool:
    """True only for a true claim (some providers send the string "true")."""
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() == "true"


def provider_groups(claims: Mapping[str, Any], claim: str) -> list[str]:
    """The groups claim as a list of names; absent means none (revocation wins)."""
    value = claims.get(claim)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise SSORefused(
        RefusalReason.BAD_CLAIMS,
        f"The provider's {claim!r} claim is not a list of group names.",
    )


def _free_username(email: str) -> str:
    users = get_user_model().objects
    base = email[:USERNAME_MAX]
    candidate, suffix = base, 1
    while users.filter(username__iexact=candidate).exists():
        suffix += 1
        tail = f"-{suffix}"
        candidate = base[: USERNAME_MAX - len(tail)] + tail
    return candidate


def _match_user(
    *, provider: Provider, subject: str, email: str
) -> tuple[Any, SSOIdentity, bool]:
    identity = (
        SSOIdentity.objects.select_related("user")
        .filter(issuer=provider.issuer, subject=subject)
        .first()
    )
    if identity is not None:
        identity.email = email
        identity.last_login_at = timezone.now()
        identity.save(update_fields=["email", "last_login_at"])
        return identity.user, identity, False
    users = list(get_user_model().objects.filter(email__iexact=email)[:2])
    if len(users) > 1:
        raise SSORefused(
            RefusalReason.AMBIGUOUS_EMAIL,
            f"More than one account here has the e-mail {email}; an admin must "
            "give each its own before it can sign in.",
        )
    created = False
    if users:
        user = users[0]
        bound = SSOIdentity.objects.filter(user=user, issuer=provider.issuer).first()
        if bound is not None and bound.subject == subject:
            # Bound since the lookup above, by a sign-in of the same subject
            # that committed in between (two tabs at once).
            return _match_user(provider=provider, subject=subject, email=email)
        if bound is not None:
            raise SSORefused(
                RefusalReason.AMBIGUOUS_EMAIL,
                f"The account with the e-mail {email} signs in as another "
                f"{provider.name} account.",
            )
    elif not provider.create_users:
        raise SSORefused(
            RefusalReason.NO_ACCOUNT,
            f"No account here has the e-mail {email}; ask an admin to add one.",
        )
    else:
        user = get_user_model().objects.create_user(
            username=_free_username(email), email=email
        )
        user.set_unusable_password()
        user.save(update_fields=["password"])
        created = True
    identity = SSOIdentity.objects.create(
        user=user, issuer=provider.issuer, subject=subject, email=email
    )
    return user, identity, created


def _sync_groups(
    *, user: AbstractBaseUser, provider: Provider, names: list[str]
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    managed = provider.group_map.managed
    if not managed:
        return (), (), ()
    wanted = provider.group_map.granted(names)
    groups = {group.name: group for group in Group.objects.filter(name__in=managed)}
    current = set(user.groups.filter(name__in=managed).values_list("name", flat=True))
    added = sorted(name for name in wanted - current if name in groups)
    removed = sorted(current - wanted)
    if added:
        user.groups.add(*(groups[name] for name in added))
    if removed:
        user.groups.remove(*(groups[name] for name in removed))
    missing = sorted(managed - groups.keys())
    return tuple(added), tuple(removed), tuple(missing)


def sso_sign_in(*, provider: Provider, claims: Mapping[str, Any]) -> SignIn:
    """The user these verified claims sign in as, with the mapped groups applied.

    ``claims`` are the id_token's, with the userinfo's over them (their
    signature, issuer, audience, expiry and nonce already checked). The e-mail
    must be verified by the provider. A known subject is its user; otherwise the
    one user with that e-mail (bound to the subject from now on), or a new user
    when REACH_OIDC_CREATE_USERS allows. On every sign-in the product groups the
    map names are set from the provider's groups (added and removed); groups it
    does not name are left alone. Creation, group changes and the sign-in are
    audited. Raises :class:`SSORefused` (nothing changed) otherwise.
    """
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise SSORefused(
            RefusalReason.BAD_TOKEN, "The provider's token names no subject."
        )
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email:
        raise SSORefused(
            RefusalReason.EMAIL_UNVERIFIED,
            f"{provider.name} sent no e-mail address; allow the 'email' scope.",
        )
    email = email.strip()
    if not email_verified(claims.get(provider.email_verified_claim)):
        raise SSORefused(
            RefusalReason.EMAIL_UNVERIFIED,
            f"{provider.name} has not verified the e-mail {email}; verify it there "
            "and sign in again.",
        )
    names = provider_groups(claims, provider.groups_claim)
    for attempt in range(2):
        try:
            with transaction.atomic():
                user, identity, created = _match_user(
                    provider=provider, subject=subject, email=email
                )
                if not user.is_active:
                    raise SSORefused(
                        RefusalReason.INACTIVE,
                        f"The account {user.get_username()} is deactivated.",
                    )
                added, removed, missing = _sync_groups(
                    user=user, provider=provider, names=names
                )
                _audit_sign_in(
                    user=user,
                    provider=provider,
                    identity=identity,
                    created=created,
                    added=added,
                    removed=removed,
                    missing=missing,
                )
            break
        except IntegrityError:
            # Two first sign-ins of one subject at once: the other made the
            # identity (or the username); find it again.
            if attempt:
                raise
    return SignIn(
        user=user,
        created=created,
        groups_added=added,
        groups_removed=removed,
        groups_missing=missing,
    )


def _audit_sign_in(
    *,
    user: Any,
    provider: Provider,
    identity: SSOIdentity,
    created: bool,
    added: tuple[str, ...],
    removed: tuple[str, ...],
    missing: tuple[str, ...],
) -> None:
    where = {"issuer": provider.issuer, "subject": identity.subject}
    if created:
        audit_append(
            kind=AuditKind.SSO_USER_CREATED,
            actor=user,
            object_type="user",
            object_id=user.pk,
            data=where,
        )
    if added or removed:
        audit_append(
            kind=AuditKind.USER_GROUPS_CHANGED,
            actor=user,
            object_type="user",
            object_id=user.pk,
            data={
                **where,
                "source": "sso",
                "added": list(added),
                "removed": list(removed),
            },
        )
    audit_append(
        kind=AuditKind.SSO_LOGIN,
        actor=user,
        object_type="user",
        object_id=user.pk,
        data={**where, "created": created, "missing_groups": list(missing)},
    )


def sso_identity_unbind(*, identity: SSOIdentity, actor: Any) -> None:
    """Forget which provider account signs in as this user (an admin's delete).

    The next sign-in of that user matches by verified e-mail again, so a person
    whose account at the provider was made anew (a new subject) can come back.
    Audited with the admin as actor.
    """
    with transaction.atomic():
        audit_append(
            kind=AuditKind.SSO_IDENTITY_UNBOUND,
            actor=actor,
            object_type="user",
            object_id=identity.user_id,
            data={"issuer": identity.issuer, "subject": identity.subject},
        )
        identity.delete()


def sso_refusal_record(*, reason: RefusalReason, issuer: str, detail: str = "") -> None:
    """Audit a refused sign-in (the view calls this after the refusal)."""
    audit_append(
        kind=AuditKind.SSO_LOGIN_REFUSED,
        actor="anonymous",
        object_type="sso",
        object_id=issuer,
        data={"reason": str(reason), "detail": detail[:300]},
    )
