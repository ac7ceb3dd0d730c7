"""The gateway is as closed as the MCP server (issue 15, rows 1-4): one exposure policy,
checked on a real uvicorn-served gateway in front of the real llama-server."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner

from sakur4.backends.launcher import LlamaServer
from sakur4.cli import cli
from sakur4.store import open_store

TOKEN = "t0ken-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHAT = "/v1/chat/completions"
BODY = b'{"max_tokens": 1, "messages": [{"role": "user", "content": "Say ok."}]}'


def test_cli_gateway_on_every_interface_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    # Row 1: `--host ""` listened on 0.0.0.0 and [::] with no token (is_loopback("") was true).
    import uvicorn

    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: served.append(k))
    for host in ("", "0.0.0.0", "::"):
        r = CliRunner().invoke(cli, ["gateway", "--host", host, "--backend", "http://127.0.0.1:9"])
        assert r.exit_code != 0, r.output
        assert "off loopback, without a bearer token" in r.output, r.output
        assert "Traceback" not in r.output
    assert not served


@pytest.fixture(scope="module")
def gw(llama_ring: LlamaServer, module_gateways: Any) -> Any:
    return module_gateways.start(llama_ring.url, http_token=TOKEN)


def _episodes(gw: Any) -> int:
    store = open_store(gw.store)
    try:
        return int(store.query("SELECT count(*) FROM episodic_stream")[0][0])
    finally:
        store.close()


def _is_openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert isinstance(error["message"], str)
    assert isinstance(error["type"], str)
    return dict(error)


@pytest.mark.backend
def test_a_foreign_host_gets_421(gw: Any) -> None:
    # Row 2: DNS rebinding read any fold and receipt (200 with the stored tool result).
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=TOKEN, max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="m", max_tokens=1, messages=[{"role": "user", "content": "Say ok."}]
        )
    assert raw.http_response.status_code == 200
    port = gw.url.rsplit(":", 1)[1]
    fold = f"{gw.url}/sakur4/folds/1"
    assert httpx.get(fold, headers=AUTH).status_code == 200
    for path in ("/sakur4/folds/1", "/sakur4/receipts", "/v1/models", "/health"):
        r = httpx.get(gw.url + path, headers={**AUTH, "Host": f"evil.example:{port}"})
        assert "evil.example" in _is_openai_error(r, 421)["message"]
    r = httpx.post(gw.url + CHAT, content=BODY, headers={**AUTH, "Host": "evil.example"})
    _is_openai_error(r, 421)
    assert httpx.get(fold, headers={**AUTH, "Host": f"localhost:{port}"}).status_code == 200


@pytest.mark.backend
@pytest.mark.parametrize("origin", ["null", "file://", "%%%", "http://evil.example"])
@pytest.mark.parametrize("content_type", ["text/plain", "application/json"])
def test_a_foreign_origin_gets_403_and_stores_nothing(
    gw: Any, origin: str, content_type: str
) -> None:
    # Row 3: a sandboxed iframe's text/plain POST was served and its message stored.
    before = _episodes(gw)
    headers = {**AUTH, "Origin": origin, "Content-Type": content_type}
    r = httpx.post(gw.url + CHAT, content=BODY, headers=headers, timeout=120)
    assert "Origin" in _is_openai_error(r, 403)["message"]
    assert _episodes(gw) == before


@pytest.mark.backend
@pytest.mark.parametrize("content_type", ["text/plain", "", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_declared_json_gets_415(gw: Any, content_type: str) -> None:
    before = _episodes(gw)
    r = httpx.post(
        gw.url + CHAT, content=BODY, headers={**AUTH, "Content-Type": content_type}, timeout=120
    )
    assert "application/json" in _is_openai_error(r, 415)["message"]
    assert _episodes(gw) == before


@pytest.mark.backend
def test_token_rules_match_the_mcp_server(gw: Any) -> None:
    # Row 4: the lower-case scheme was refused (and a 1-character token accepted: see
    # tests/exposure for the start-up refusal).
    models = gw.url + "/v1/models"
    assert httpx.get(models, headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200
    assert httpx.get(models, headers={"Authorization": f"BEARER {TOKEN}"}).status_code == 200
    for given in ({}, {"Authorization": "Bearer x"}, {"Authorization": f"Basic {TOKEN}"}):
        r = httpx.get(models, headers=given)
        _is_openai_error(r, 401)
        assert r.headers["www-authenticate"].startswith("Bearer")
    # The openai SDK sees the gateway's refusals as its own typed errors.
    nobody = openai.OpenAI(base_url=gw.url + "/v1", api_key="wrong-token-wrong", max_retries=0)
    with nobody, pytest.raises(openai.AuthenticationError):
        nobody.models.list()
    framed = openai.OpenAI(
        base_url=gw.url + "/v1", api_key=TOKEN, max_retries=0, default_headers={"Origin": "null"}
    )
    with framed, pytest.raises(openai.PermissionDeniedError):
        framed.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
