"""The gateway the demo and the bench run in-process: it is handed over only once its
backend is probed (a session started before that lost its first call to a 503)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sakur4.demo.via_gateway import running_gateway
from sakur4.errors import BackendUnavailable
from sakur4.settings import Settings


def test_running_gateway_waits_for_its_backend_probe_fake_backend_absent(tmp_path: Path) -> None:
    # No server listens on the backend's port (a fault, so no real server): the gateway
    # itself starts at once, but it is never ready, so it is not handed over.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings.load(
        store=tmp_path / "store.db",
        project=tmp_path,
        backend=f"http://127.0.0.1:{port}",
        gateway_port=0,  # any free port
    )
    with (
        pytest.raises(BackendUnavailable, match="never became ready"),
        running_gateway(settings, startup_timeout=3.0),
    ):
        pytest.fail("handed over before its backend was probed")
