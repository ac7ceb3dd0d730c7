"""Issue 41, situation 8: ``sakur4 gateway --port`` on a taken port fails first, in one
line, before it prints its addresses (was: the addresses, then uvicorn's bind error)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def test_a_taken_port_is_one_line_and_no_addresses(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAKUR4_")}
    env["SAKUR4_STORE"] = str(tmp_path / "store.db")
    with socket.create_server(("127.0.0.1", 0)) as taken:  # a real listener holds it
        port = taken.getsockname()[1]
        argv = ["gateway", "--port", str(port), "--backend", "http://127.0.0.1:9"]
        done = subprocess.run(
            [sys.executable, "-m", "sakur4", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,  # a gateway that served anyway would be killed here, and fail
        )
    assert done.returncode != 0
    assert done.stderr.splitlines() == [
        f"sakur4: error: port {port} on 127.0.0.1 is in use (another gateway or program): "
        "stop it, or choose another with --port"
    ], done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "store.db").exists()  # refused before anything started
