"""An evaluation decides its approvals as whoever starts it: with
REACH_REQUIRE_2FA naming approvers, starting one needs their second factor."""

from __future__ import annotations

import pytest

from accounts import services as accounts
from evals.services import EvalError, eval_access_check
from infra.errors import ErrorKind
from tests.support.sign_in import totp_code

pytestmark = pytest.mark.django_db


def test_an_operator_without_two_factor_is_refused_before_the_run(operator, settings):
    settings.REACH_REQUIRE_2FA = ["approvers"]

    with pytest.raises(EvalError) as refused:
        eval_access_check(operator)

    assert refused.value.kind is ErrorKind.FORBIDDEN
    assert str(refused.value) == (
        "Running an evaluation decides its approvals as you. Deciding approvals "
        "needs two-factor authentication, and your account has none yet: set it "
        "up at /accounts/two-factor/."
    )

    device = accounts.totp_pending(user=operator)
    accounts.totp_confirm(user=operator, code=totp_code(device))
    assert eval_access_check(operator) is None  # the account has one now
