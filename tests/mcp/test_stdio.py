"""Garbage, half-written JSON and malformed JSON-RPC on stdin do not kill the server."""

from __future__ import annotations

from typing import Any

INVALID_REQUEST = -32600
PARSE_ERROR = -32700
METHOD_NOT_FOUND = -32601


def test_garbage_on_stdin_gets_protocol_errors_and_serving_goes_on(raw_stdio: Any) -> None:
    raw_stdio.initialize()
    bad: list[tuple[bytes, int, int | None]] = [
        (b"garbage\n", PARSE_ERROR, None),
        (b'{"jsonrpc": "2.0", "id": 5, "meth\n', PARSE_ERROR, None),  # half-written
        (b"\xff\xfe\x00\x01\x80\n", PARSE_ERROR, None),  # not UTF-8
        (b"\x00" * 10_000 + b"\n", PARSE_ERROR, None),
        (b"[1, 2, 3]\n", INVALID_REQUEST, None),  # a batch: not in MCP
        (b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": 3}\n', INVALID_REQUEST, 6),
        (b'{"jsonrpc": "1.0", "id": 7, "method": "ping"}\n', INVALID_REQUEST, 7),
        (raw_stdio.request(8, "no/such/method"), METHOD_NOT_FOUND, 8),
    ]
    for line, code, rid in bad:
        raw_stdio.send(line)
        answer = raw_stdio.receive()
        assert answer["id"] == rid, (line[:40], answer)
        assert answer["error"]["code"] == code, (line[:40], answer)
        assert answer["error"]["message"]
    raw_stdio.send(raw_stdio.call(9, "status", {}))
    answer = raw_stdio.receive()
    assert answer["id"] == 9
    assert answer["result"]["structuredContent"]["episodes"] == 0
    # A request already sent is answered; then EOF in the middle of the next message.
    raw_stdio.send(raw_stdio.call(10, "remember", {"text": "written just before EOF"}))
    assert "result" in raw_stdio.receive()
    raw_stdio.send(b'{"jsonrpc": "2.0", "id": 11, "method": "tools/ca')
    code, err = raw_stdio.close()
    assert code == 0
    assert "Traceback" not in err
    assert "malformed message on stdin" in err
