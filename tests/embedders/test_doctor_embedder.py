"""doctor tries the configured embedder for real and reports what happened."""

from __future__ import annotations

import socket

import pytest

from sakur4.doctor import diagnose


def _check(report_checks: list, name: str) -> dict:  # type: ignore[type-arg]
    (found,) = [c for c in report_checks if c["name"] == name]
    return found  # type: ignore[no-any-return]


def test_none_is_a_warning_saying_lexical_only() -> None:
    c = _check(diagnose().as_dict()["checks"], "embedder")
    assert c["level"] == "warn"
    assert "lexical" in c["detail"]


def test_local_embeds_a_sentence() -> None:
    c = _check(diagnose(embedder="local").as_dict()["checks"], "embedder")
    assert c["level"] == "ok"
    assert "all-MiniLM-L6-v2: 384 dimensions" in c["detail"]


def test_a_server_that_is_down_fails_with_its_url() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    report = diagnose(embedder=f"http://127.0.0.1:{port}")
    c = _check(report.as_dict()["checks"], "embedder")
    assert c["level"] == "fail"
    assert f"127.0.0.1:{port}" in c["detail"]
    assert not report.ok


@pytest.mark.backend
def test_a_real_embedding_server_is_ok(embedding_server: str) -> None:
    c = _check(diagnose(embedder=embedding_server).as_dict()["checks"], "embedder")
    assert c["level"] == "ok", c
    assert "openai-compat:" in c["detail"]
