"""What the apps' views share."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect

View = Callable[..., HttpResponse]


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
