"""``sakur4 serve``: flags that do not apply are refused in one line."""

from __future__ import annotations

import subprocess


def test_host_and_port_need_http(serve_cmd: list[str], serve_env: dict[str, str]) -> None:
    done = subprocess.run(
        [*serve_cmd, "--port", "9999"], env=serve_env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stderr.decode().strip() == (
        "sakur4: error: --host and --port apply only with --http (see `sakur4 serve --help`)"
    )
