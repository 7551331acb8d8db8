"""What the apps' views share."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from functools import wraps
from typing import Any, TypeVar

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect

View = Callable[..., HttpResponse]
_Member = TypeVar("_Member", bound=Enum)


def template_enum(enum: type[_Member]) -> dict[str, _Member]:
    """``enum``'s members by name, for a template to compare a value with
    (``{% if state == states.FAILED %}``) instead of a bare string.

    A model's choices are reached through its rows (``approval.Kind.RECOVERY``);
    a plain enum class cannot be handed to a template as it is, since the
    template would call it (with no value).
    """
    return {member.name: member for member in enum}


def post_only(back_to: str) -> Callable[[View], View]:
    """``require_POST``, except that a GET goes to the page the form is on.

    A form's action is reached with a GET when a login page sends the browser
    on (``?next=``) after the session ended under an open page: a bare 405 there
    is a dead end, and whatever was typed is gone. Say so on the form's page
    (the URL named ``back_to``); other methods still answer 405.
    """

    def decorate(view: View) -> View:
        @wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method == "POST":
                return view(request, *args, **kwargs)
            if request.method in ("GET", "HEAD"):
                if request.method == "GET":  # a HEAD shows no page to say it on
                    messages.info(
                        request,
                        "Nothing was sent from that form: please send it again.",
                    )
                return redirect(back_to)
            return HttpResponseNotAllowed(["POST"])

        return guarded

    return decorate
