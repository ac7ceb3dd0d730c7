"""``sakur4.mcp`` and ``tests/mcp`` must never stand in for the ``mcp`` SDK."""

from __future__ import annotations

from pathlib import Path

import mcp

import sakur4.mcp.stdio


def test_import_mcp_is_the_sdk() -> None:
    # tests/ is on sys.path: a tests/mcp/__init__.py would make `import mcp` this folder.
    assert not (Path(__file__).parent / "__init__.py").exists()
    sdk = Path(mcp.__file__).parent
    assert sdk.parent.name == "site-packages", sdk
    assert sakur4.mcp.stdio.stdio_server.__module__ == "mcp.server.stdio"
