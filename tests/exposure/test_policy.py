"""The network-exposure policy both HTTP surfaces share (issue 15, rows 1-4)."""

from __future__ import annotations

import pytest

from sakur4.errors import SettingsError
from sakur4.exposure import ExposurePolicy, checked_token, is_loopback, is_wildcard
from sakur4.gateway.app import require_token_for
from sakur4.mcp.http import bearer_token
from sakur4.settings import Settings

TOKEN = "t0ken-for-tests-0123456789"


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::", "[::]", " "])
def test_a_wildcard_bind_is_not_loopback(host: str) -> None:
    assert is_wildcard(host)
    assert not is_loopback(host)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_binds(host: str) -> None:
    assert is_loopback(host)
    assert checked_token(None, host, "x") is None


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::", "192.0.2.1", "localhost.example"])
def test_both_surfaces_refuse_off_loopback_without_a_token(host: str) -> None:
    # Row 1: `sakur4 gateway --host ""` listened on every interface without a token.
    with pytest.raises(SettingsError, match="off loopback, without a bearer token"):
        require_token_for(Settings.load(gateway_host=host))
    with pytest.raises(SettingsError, match="off loopback, without a bearer token"):
        bearer_token(Settings.load(http_host=host))


@pytest.mark.parametrize("token", ["x", "short", "f" * 15])
def test_both_surfaces_refuse_a_short_token(token: str) -> None:
    # Row 4: the gateway took a 1-character token off loopback.
    with pytest.raises(SettingsError, match="too short"):
        require_token_for(Settings.load(gateway_host="0.0.0.0", http_token=token))
    with pytest.raises(SettingsError, match="too short"):
        bearer_token(Settings.load(http_host="0.0.0.0", http_token=token))
    assert require_token_for(Settings.load(gateway_host="0.0.0.0", http_token="f" * 16))


def _policy(bind: str = "127.0.0.1", token: str | None = TOKEN) -> ExposurePolicy:
    return ExposurePolicy.create("the test", bind, token, 1000)


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        (f"Bearer {TOKEN}", True),
        (f"bearer {TOKEN}", True),  # row 4: the scheme is case-insensitive (RFC 9110)
        (f"BEARER  {TOKEN} ", True),
        (f"Basic {TOKEN}", False),
        ("Bearer wrong-token-wrong-token", False),
        (TOKEN, False),
        ("", False),
    ],
)
def test_token_rules(header: str, ok: bool) -> None:
    refusal = _policy().check_token(header or None)
    assert (refusal is None) == ok
    if refusal is not None:
        assert refusal.status == 401


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1:8741", True),
        ("localhost:8741", True),
        ("LOCALHOST", True),
        ("[::1]:8741", True),
        ("evil.example:8741", False),  # row 2: DNS rebinding
        ("localhost.evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("127.0.0.1:notaport", False),
        ("user@127.0.0.1", False),
        ("", False),
        (None, False),
    ],
)
def test_host_allow_list(host: str | None, ok: bool) -> None:
    refusal = _policy().check_host(host)
    assert (refusal is None) == ok
    if refusal is not None:
        assert refusal.status == 421


def test_host_names_of_other_binds() -> None:
    specific = _policy("192.0.2.7")
    assert specific.check_host("192.0.2.7:80") is None
    assert specific.check_host("192.0.2.8:80") is not None
    everywhere = _policy("0.0.0.0")
    # Bound everywhere: any IP address (rebinding needs a name), and this machine's names.
    assert everywhere.check_host("192.0.2.8:80") is None
    assert everywhere.check_host("[2001:db8::1]:80") is None
    assert everywhere.check_host("evil.example") is not None
    for name in everywhere.machine_names:
        assert everywhere.check_host(f"{name}:80") is None


@pytest.mark.parametrize(
    ("origin", "ok"),
    [
        (None, True),  # not a browser
        ("http://127.0.0.1:8741", True),
        ("http://localhost:3000", True),
        ("https://[::1]:8741", True),
        ("null", False),  # row 3: a sandboxed iframe, a file:// page
        ("file://", False),
        ("file:///home/u/page.html", False),
        ("%%%", False),
        ("", False),
        ("http://evil.example", False),
        ("http://localhost.evil.example:8741", False),
        ("chrome-extension://abc", False),
        ("ftp://127.0.0.1:8741", False),  # an allowed host, but not a web page's scheme
        ("file://localhost", False),
        ("http://127.0.0.1:8741/path", False),
        ("http://127.0.0.1:port", False),
    ],
)
def test_origin_allow_list(origin: str | None, ok: bool) -> None:
    refusal = _policy().check_origin(origin)
    assert (refusal is None) == ok
    if refusal is not None:
        assert refusal.status == 403


@pytest.mark.parametrize(
    ("content_type", "ok"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON", True),
        ("application/merge-patch+json", True),
        ("text/plain", False),  # row 3: what a page may POST cross-origin unasked
        ("application/x-www-form-urlencoded", False),
        ("multipart/form-data; boundary=x", False),
        ("", False),
        (None, False),
    ],
)
def test_json_bodies_only(content_type: str | None, ok: bool) -> None:
    refusal = _policy().check_body(content_type, None)
    assert (refusal is None) == ok
    if refusal is not None:
        assert refusal.status == 415


def test_body_limit_and_order_of_checks() -> None:
    p = _policy()
    assert p.check_body("application/json", "1000") is None
    too_big = p.check_body("application/json", "1001")
    assert too_big is not None
    assert too_big.status == 413
    assert "1,000 bytes" in too_big.message
    ok = {"host": "127.0.0.1", "authorization": f"Bearer {TOKEN}"}
    assert p.check("GET", ok) is None
    assert p.check("POST", {**ok, "content-type": "application/json"}) is None
    refused = p.check("POST", {**ok, "content-type": "text/plain"})
    assert refused is not None
    assert refused.status == 415
    # Host first: a rebinding page learns nothing else, not even that a token is needed.
    first = p.check("POST", {"host": "evil.example", "origin": "null"})
    assert first is not None
    assert first.status == 421
