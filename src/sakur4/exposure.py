"""The network-exposure policy: who may reach an HTTP surface, and with what.

One policy for every HTTP surface (the gateway, MCP over Streamable HTTP), so the
two cannot drift apart (issue 15: the gateway had its own, weaker copy):

- **loopback**: a bind address only this machine can reach (127.0.0.0/8, ::1,
  ``localhost``). A wildcard bind (``""``, ``0.0.0.0``, ``::``) listens on every
  interface and is *not* loopback;
- **token**: off loopback a bearer token is required, of at least
  :data:`MIN_TOKEN_LENGTH` characters; the ``Bearer`` scheme is matched without
  regard to case (RFC 9110 §11.1), the token in constant time;
- **Host** (DNS rebinding: a page on a name its owner re-points at 127.0.0.1 reaches
  a local server with its own name in ``Host``): loopback names, the bind address,
  and for a wildcard bind this machine's own names and any IP address; anything
  else is 421;
- **Origin** (a browser page): absent (not a browser) or an ``http(s)`` origin on an
  allowed host; ``null`` (a sandboxed frame, a ``file://`` page), ``file://``, other
  schemes and unparseable values are 403;
- **content type**: a request body is read as JSON only when it says it is JSON
  (``application/json`` or ``application/*+json``), else 415 — a plain form or a
  ``text/plain`` POST is what a page may send cross-origin without asking first;
- **body size**: a declared ``Content-Length`` over the limit is 413 before a byte
  is read (each surface also counts what arrives).

The checks return a :class:`Refusal` (status, kind, message); each surface renders
it in its own error shape (OpenAI JSON, JSON-RPC), so the rules live here once.
Foundation layer (SPEC §13): the standard library only.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from sakur4.errors import SettingsError

MIN_TOKEN_LENGTH = 16
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})  # noqa: S104 - recognised, not bound
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
JSON_TYPES = ("application/json",)


def is_wildcard(host: str) -> bool:
    """A bind address that listens on every interface."""
    return host.strip() in WILDCARD_BINDS


def is_loopback(host: str) -> bool:
    """Only this machine can reach ``host`` (a bind address or a Host name)."""
    name = host.strip().lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False  # a wildcard ("", "0.0.0.0", "::") is not loopback


def checked_token(token: str | None, bind: str, surface: str) -> str | None:
    """The token clients must present on ``surface`` bound at ``bind``, or None.

    Refuses a token shorter than :data:`MIN_TOKEN_LENGTH` and a bind off loopback
    without one, each with one line saying what to do.
    """
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise SettingsError(
            f"SAKUR4_HTTP_TOKEN is too short ({len(token)} character"
            f"{'' if len(token) == 1 else 's'}; use at least "
            f"{MIN_TOKEN_LENGTH}, e.g. from `python -c 'import secrets; "
            "print(secrets.token_urlsafe())'`)"
        )
    if token is None and not is_loopback(bind):
        where = f"every interface ({bind!r})" if is_wildcard(bind) else bind
        raise SettingsError(
            f"refusing to serve {surface} on {where}, off loopback, without a bearer "
            "token: set SAKUR4_HTTP_TOKEN (at least 16 characters) or bind 127.0.0.1"
        )
    return token


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: an HTTP status, a short kind, and one line of text."""

    status: int
    kind: str
    message: str


def _host_name(value: str) -> str | None:
    """The host part of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``)."""
    value = value.strip().lower()
    if not value:
        return None
    try:
        parts = urlsplit(f"//{value}")
        name = parts.hostname
        _ = parts.port  # a port that is not a number is not a Host
    except ValueError:
        return None
    if not name or parts.username is not None or parts.path or parts.query:
        return None
    return name


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


@dataclass(frozen=True)
class ExposurePolicy:
    """The rules for one surface bound at ``bind``; see the module docstring."""

    surface: str
    bind: str
    token: str | None
    max_body: int
    machine_names: tuple[str, ...] = ()

    @classmethod
    def create(cls, surface: str, bind: str, token: str | None, max_body: int) -> ExposurePolicy:
        """The policy for a server about to bind; refuses an unsafe configuration."""
        checked = checked_token(token, bind, surface)
        names: tuple[str, ...] = ()
        if is_wildcard(bind):
            # Bound everywhere: clients may arrive under this machine's own names.
            names = tuple({socket.gethostname().lower(), socket.getfqdn().lower()})
        return cls(surface, bind, checked, max_body, names)

    def host_names(self) -> tuple[str, ...]:
        """The host names a client may address this server by (IPv6 without brackets)."""
        names = list(LOOPBACK_NAMES)
        bind = self.bind.strip().strip("[]").lower()
        if bind and not is_wildcard(self.bind) and bind not in names:
            names.append(bind)
        names.extend(n for n in self.machine_names if n and n not in names)
        return tuple(names)

    def host_allowed(self, name: str) -> bool:
        """``name`` (lower case, no brackets) is one this server answers to.

        Bound everywhere, any IP address is also allowed: rebinding needs a *name*
        the attacker controls, and a client on the network may use this machine's
        address.
        """
        if name in self.host_names():
            return True
        if not is_wildcard(self.bind):
            return False
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    # -- the checks, each None when the request passes --------------------------------

    def check_host(self, host: str | None) -> Refusal | None:
        name = _host_name(host or "")
        if name is None or not self.host_allowed(name):
            return Refusal(
                421,
                "misdirected_request",
                f"{self.surface}: Host {host!r} is not a name this server answers to "
                f"({', '.join(self.host_names())})",
            )
        return None

    def check_origin(self, origin: str | None) -> Refusal | None:
        if origin is None:
            return None  # not a browser, or a same-origin GET
        try:
            parts = urlsplit(origin.strip())
            name = parts.hostname
            _ = parts.port
        except ValueError:
            name = None
        if (
            parts.scheme not in ("http", "https")
            or not name
            or parts.path
            or not self.host_allowed(name)
        ):
            return Refusal(403, "forbidden", f"{self.surface}: Origin {origin!r} is not allowed")
        return None

    def check_token(self, authorization: str | None) -> Refusal | None:
        if self.token is None:
            return None
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        ):
            return Refusal(
                401,
                "unauthorized",
                f"{self.surface}: send 'Authorization: Bearer <SAKUR4_HTTP_TOKEN>'",
            )
        return None

    def check_body(self, content_type: str | None, content_length: str | None) -> Refusal | None:
        """For a request that carries a body: JSON only, and no more than the limit."""
        if not _is_json(content_type or ""):
            return Refusal(
                415,
                "unsupported_media_type",
                f"{self.surface}: the request body must be JSON sent as application/json "
                f"(got content type {content_type!r})",
            )
        if content_length is not None:
            size = content_length.strip()
            if size.isdigit() and int(size) > self.max_body:
                return self.too_large()
        return None

    def too_large(self) -> Refusal:
        return Refusal(
            413,
            "request_too_large",
            f"{self.surface}: request body exceeds {self.max_body:,} bytes "
            "(SAKUR4_MAX_REQUEST_BYTES)",
        )

    def check(self, method: str, headers: Mapping[str, str]) -> Refusal | None:
        """Every check in order (where it may come from, who it is, what it carries).

        ``headers``: lower-case names. A POST, PUT or PATCH carries a body to check.
        """
        refusal = (
            self.check_host(headers.get("host"))
            or self.check_origin(headers.get("origin"))
            or self.check_token(headers.get("authorization"))
        )
        if refusal is None and method.upper() in ("POST", "PUT", "PATCH"):
            refusal = self.check_body(headers.get("content-type"), headers.get("content-length"))
        return refusal
