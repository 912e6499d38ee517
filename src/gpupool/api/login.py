"""A browser's way to present a token: ``/login`` keeps it in a cookie for the dashboard.

A browser cannot add an ``Authorization`` header to the pages it opens, and the dashboard has no
loopback bypass, so without this a person could reach the API with ``curl`` but never see the
dashboard of an installed control plane. ``GET /login`` is a form; ``POST /login`` with the
token stores it in a cookie that is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no
other site's page sends it: every route only reads, and no cross-site request carries the
token), ``Secure`` when served over HTTPS, and limited to :data:`COOKIE_SECONDS`; the token is
checked on every request exactly as a header would be. ``POST /logout`` removes it.
"""

from __future__ import annotations

import html
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import Receive, Scope, Send

COOKIE = "gpupool_token"
COOKIE_SECONDS = 8 * 3600
"""As long as a token made with ``kubectl create token --duration 8h``."""
MAX_BODY = 16_384
"""A token is a few kilobytes; a larger body is refused unread."""

_FORM = """<!doctype html><html><head><meta charset="utf-8"><title>gpupool: sign in</title></head>
<body><h1>gpupool</h1><p>{message}</p>
<form method="post" action="/login"><label>Token for audience {audience}<br>
<textarea name="token" rows="6" cols="80" autocomplete="off"></textarea></label><br>
<button type="submit">Sign in</button></form>
<p><code>kubectl create token ACCOUNT -n NAMESPACE --audience {audience} --duration 8h</code></p>
</body></html>"""


def token_of(scope: Scope) -> str:
    """The bearer token of a request: the ``Authorization`` header, else the login cookie."""
    headers: dict[bytes, bytes] = dict(scope.get("headers", []))
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return value
    return ""


def login_form(audience: str, message: str = "Sign in with a token.") -> HTMLResponse:
    """The form (also the body of a 401 for a browser's page)."""
    text = _FORM.format(message=html.escape(message), audience=html.escape(audience))
    return HTMLResponse(text, status_code=200)


async def login(scope: Scope, receive: Receive, send: Send, audience: str) -> None:
    """Serve ``/login`` (form, or store the posted token) and ``/logout``."""
    request = Request(scope, receive)
    secure = scope.get("scheme") == "https"
    response: Response
    if scope["path"] == "/logout" and request.method == "POST":
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/", secure=secure, httponly=True, samesite="strict")
    elif request.method == "POST":
        body = await request.body()
        token = (
            ""
            if len(body) > MAX_BODY
            else parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0].strip()
        )
        if not token or any(c.isspace() or c in ";," for c in token):
            response = login_form(audience, "That is not a token.")
            response.status_code = 400
        else:
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(
                COOKIE,
                token,
                max_age=COOKIE_SECONDS,
                path="/",
                secure=secure,
                httponly=True,
                samesite="strict",
            )
    else:
        response = login_form(audience)
    await response(scope, receive, send)
