"""Bad input, fuzzed with hypothesis: no crash, no hang, a clear error each time.

    PYTHONPATH=bench nice -n 10 .venv/bin/python -m reliability.fuzz \
        [--examples 2000] [--targets stdio http gateway exposure indexer doctor]

Targets (each a long-lived real process or the real function, one store per target):

- ``stdio``: lines on ``sakur4 serve``'s stdin — random bytes, invalid UTF-8, JSON that
  is not JSON-RPC, JSON-RPC with wrong types, unknown methods and tools, random tool
  arguments, truncated messages, deep nesting, lone surrogates. Each line is followed
  by a ``ping``; the ping must be answered within :data:`HANG_SECONDS`, every answer
  must be a well-formed JSON-RPC response, and a line that is a request (or not JSON
  at all) must get its own answer before the ping's.
- ``http``: the same payloads as ``sakur4 serve --http`` request bodies, with and
  without a session, with odd content types: an answer within the limit, never 5xx.
- ``gateway``: ``/v1/chat/completions`` bodies — wrong types, huge fields, invalid
  UTF-8, truncated and deeply nested JSON — and odd session/project headers, on a
  gateway in front of a real llama-server (a transport caps ``max_tokens`` at 4 so a
  valid body costs one short generation): 200, or an OpenAI-shaped JSON error with a
  4xx status (503 if the server itself failed); never a bare 500.
- ``exposure``: the gateway's Host, Origin, Authorization and Content-Type space on
  every route (a gateway with a token, in front of a real llama-server): each value
  has a known verdict, and the answer is the first refusal in the policy's order —
  421 (Host), 403 (Origin), 401 (token), 415 (content type) — or 200; every answer is
  OpenAI-shaped JSON, and a refused request stores nothing.
- ``indexer``: ``index_project`` on random and mangled source files (the fixtures
  truncated, bytes flipped, chunks spliced, nesting and line lengths blown up): never
  raises, and each file's facts are exactly what it parses to.
- ``doctor``: ``diagnose`` (and ``open_store``) on random bytes, a SQLite header over
  garbage, and a real store with flipped bytes, cut short, or with a garbage WAL:
  doctor returns a report and never raises; opening raises only StoreError.

Every example counts towards the iterations printed at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from reliability.invariants import ledger_agreement
from reliability.procs import StdioPeer, sakur4_env, start_http_serve
from reliability.projectfiles import EXTENSIONS, ProjectFiles, content_hash
from sakur4.errors import StoreError
from sakur4.store.db import connect

HANG_SECONDS = 30.0
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "lang"
TOOLS = [
    "remember",
    "recall",
    "open_fold",
    "status",
    "receipts",
    "anchor_pin",
    "anchor_unpin",
    "anchor_list",
    "ledger_symbol",
    "repo_map",
    "impact",
    "atlas_read",
    "atlas_write",
    "ledger_index",
    "probe",
    "no_such_tool",
]
METHODS = [
    "tools/call",
    "tools/list",
    "ping",
    "initialize",
    "resources/list",
    "prompts/list",
    "notifications/initialized",
    "notifications/cancelled",
    "logging/setLevel",
    "completion/complete",
    "",
    "tools/call/extra",
]
COUNTS: Counter[str] = Counter()


# The bounded CI runs (bench/tests/reliability/test_fuzz.py) set this: the same examples every
# run, and no shrinking. Shrinking a stdio finding waits HANG_SECONDS per attempt, so a
# CI run that found one sat for tens of minutes; the long run explores and shrinks.
BOUNDED = False


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        derandomize=BOUNDED,
        phases=[Phase.explicit, Phase.reuse, Phase.generate] if BOUNDED else list(Phase),
    )


# -- strategies ---------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=20,
)
huge_text = st.integers(min_value=10_000, max_value=300_000).map(lambda n: "x" * n)
odd_text = st.sampled_from(
    ["", " ", "\x00", "\ud800", "\udfff", "é" * 3, "\u202e", "../../etc/passwd", "/", "NaN"]
)
any_text = st.text(max_size=60) | odd_text | huge_text


def _tool_arguments() -> st.SearchStrategy[Any]:
    keys = st.sampled_from(
        [
            "text",
            "query",
            "k",
            "episode_id",
            "anchor_id",
            "priority",
            "session",
            "name",
            "path",
            "summary",
            "depth",
            "budget",
            "history",
            "max_chars",
            "since",
            "kind",
            "refresh",
            "project",
            "focus",
            "include_unpinned",
            "limit",
            "zzz",
        ]
    )
    values = json_values | any_text | st.integers() | st.lists(any_text, max_size=3)
    return st.dictionaries(keys, values, max_size=5) | json_values


def jsonrpc_messages() -> st.SearchStrategy[Any]:
    """JSON-RPC-shaped values, mostly wrong in one or two places."""
    ids = (
        st.integers(-5, 10**6)
        | st.text(max_size=8)
        | st.none()
        | st.floats(allow_nan=False)
        | st.booleans()
        | st.lists(st.integers(), max_size=2)
    )
    call_params = st.fixed_dictionaries(
        {"name": st.sampled_from(TOOLS) | any_text, "arguments": _tool_arguments()}
    )
    params = call_params | json_values
    base = st.fixed_dictionaries(
        {"jsonrpc": st.sampled_from(["2.0", "2.0", "1.0", 2, None])},
        optional={
            "id": ids,
            "method": st.sampled_from(METHODS) | any_text,
            "params": params,
            "result": json_values,
            "error": json_values,
        },
    )
    return base | st.lists(base, max_size=3)


def tool_calls() -> st.SearchStrategy[Any]:
    """Well-formed ``tools/call`` requests whose arguments are fuzzed."""
    return st.builds(
        lambda rid, name, args: {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "tools/call",
            "params": {"name": name, "arguments": args},
        },
        st.integers(1, 10**9),
        st.sampled_from(TOOLS),
        _tool_arguments(),
    )


def _encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def wire_payloads(draw: st.DrawFn, structured: st.SearchStrategy[Any]) -> bytes:
    """Bytes for one message: random, mangled, truncated, nested, or structured JSON."""
    kind = draw(
        st.sampled_from(
            [
                "structured",
                "structured",
                "structured",
                "bytes",
                "truncated",
                "nested",
                "utf8",
                "escapes",
            ]
        )
    )
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "nested":
        depth = draw(st.integers(1, 200_000))
        opener = draw(st.sampled_from(["[", '{"a":', '{"jsonrpc":"2.0","id":1,"params":']))
        return (opener * depth).encode()
    data = _encode(draw(structured))
    if kind == "truncated" and len(data) > 1:
        return data[: draw(st.integers(0, len(data) - 1))]
    if kind == "utf8":
        at = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x00"]))
        return data[:at] + junk + data[at:]
    if kind == "escapes":
        return data.replace(b'"2.0"', b'"2\\u002e0"').replace(b"a", b"\\ud800", 1)
    return data


# -- stdio ----------------------------------------------------------------------------


@dataclass
class Finding:
    target: str
    what: str
    payload: bytes


def describe(e: BaseException) -> str:
    """One line per failure hypothesis found, with where it was raised."""
    if isinstance(e, BaseExceptionGroup):
        return "\n".join(describe(x) for x in e.exceptions)
    tb = e.__traceback__
    where = ""
    while tb is not None:
        where = f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"
        tb = tb.tb_next
    notes = " | ".join(getattr(e, "__notes__", []))[:1500]
    return f"{type(e).__name__} at {where}: {str(e)[:1500]} {notes}"


def _well_formed(answer: dict[str, Any]) -> bool:
    if answer.get("jsonrpc") != "2.0" or ("result" in answer) == ("error" in answer):
        return False
    err = answer.get("error")
    return err is None or (isinstance(err.get("code"), int) and isinstance(err.get("message"), str))


def _expects_answer(line: bytes) -> Any:
    """The id an answer must carry, ``None`` for a null-id error, or ``...`` for no duty."""
    try:
        # The SDK reads stdin as UTF-8 with errors replaced, then parses.
        value = json.loads(line.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None  # not JSON: a parse error, id null
    if not isinstance(value, dict):
        return None  # a batch or a bare value: invalid request
    rid = value.get("id")
    valid_id = isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))
    if value.get("jsonrpc") == "2.0" and isinstance(value.get("method"), str) and valid_id:
        return rid
    return ...


def _project_guard(payload: bytes) -> bool:
    """Keep the fuzzer from asking a stdio server (which registers any root) to index
    the whole machine: a request naming ``project: "/"`` or another existing directory."""
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError):
        return True
    for msg in value if isinstance(value, list) else [value]:
        params = msg.get("params") if isinstance(msg, dict) else None
        args = params.get("arguments") if isinstance(params, dict) else None
        if isinstance(args, dict) and isinstance(args.get("project"), str):
            p = args["project"]
            if p.startswith("/") and os.path.isdir(p.replace("\x00", "")):
                return False
    return True


def fuzz_stdio(examples: int, work: Path) -> list[Finding]:
    """Fuzz ``sakur4 serve``'s stdin; returns what went wrong (empty: nothing)."""
    project = work / "stdio-project"
    project.mkdir(parents=True, exist_ok=True)
    peer = StdioPeer(sakur4_env(work / "stdio.db", project), work)
    findings: list[Finding] = []
    if not peer.initialize():
        peer.child.kill()
        return [Finding("stdio", "no answer to initialize", b"")]
    pings = 0

    @_settings(examples)
    @given(wire_payloads(jsonrpc_messages() | tool_calls()))
    def one(payload: bytes) -> None:
        nonlocal pings
        line = payload.replace(b"\n", b" ").replace(b"\r", b" ")
        assume(_project_guard(line))
        COUNTS["stdio"] += 1
        pings += 1
        ping_id = f"ping-{pings}"
        if not peer.send(line + b"\n") or not peer.send(
            {"jsonrpc": "2.0", "id": ping_id, "method": "ping"}
        ):
            raise AssertionError("sakur4 serve closed its stdin")
        expected = _expects_answer(line)
        seen_own = expected is ...
        pinged = False
        deadline = time.monotonic() + HANG_SECONDS
        # Effects are ordered (the turnstile), answers need not be: a slow tool call may
        # be answered after the ping sent behind it (seen under load), so wait for both.
        while not (pinged and seen_own):
            answer = peer.next(deadline - time.monotonic())
            if answer is None:
                if pinged:
                    break
                raise AssertionError(
                    f"no answer to ping within {HANG_SECONDS:g} s (hang or "
                    f"exit): {peer.child.stderr[-5:]}"
                )
            if not _well_formed(answer):
                raise AssertionError(f"malformed answer {str(answer)[:300]}")
            if answer.get("id") == ping_id:
                pinged = True
                continue
            # Not JSON-RPC: any error answers it (the id is recovered when it can be, and
            # invalid UTF-8 is read as U+FFFD, so a request under it may keep its id).
            if (
                (expected is None and "error" in answer)
                or answer.get("id") == expected
                or answer.get("id") is None
            ):
                seen_own = True
        if not seen_own:
            raise AssertionError(
                f"no answer within {HANG_SECONDS:g} s for a request that needs one "
                f"(id {expected!r})"
            )
        if peer.raw:
            raise AssertionError(f"non-JSON on stdout: {peer.raw[:2]}")

    try:
        one()
    except Exception as e:  # hypothesis has printed the falsifying example
        findings.append(Finding("stdio", describe(e), b""))
    finally:
        code = peer.close()
        if code != 0:
            findings.append(Finding("stdio", f"exit code {code} at EOF", b""))
        findings += [Finding("stdio", t, b"") for t in peer.child.tracebacks()]
    return findings


# -- MCP over HTTP -------------------------------------------------------------------


def fuzz_http(examples: int, work: Path) -> list[Finding]:
    project = work / "http-project"
    project.mkdir(parents=True, exist_ok=True)
    child, url = start_http_serve(sakur4_env(work / "http.db", project), work)
    findings: list[Finding] = []
    accept = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=HANG_SECONDS) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "0"},
            },
        }
        sid = http.post(url, json=init, headers=accept).headers.get("mcp-session-id", "")
        http.post(
            url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**accept, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"},
        )

        @_settings(examples)
        @given(
            wire_payloads(jsonrpc_messages() | tool_calls()),
            st.sampled_from(["session", "none", "bogus"]),
            st.sampled_from(["application/json", "text/plain", "", "application/json; x=1"]),
        )
        def one(payload: bytes, session: str, ctype: str) -> None:
            COUNTS["http"] += 1
            headers = {**accept, "Content-Type": ctype, "mcp-protocol-version": "2025-06-18"}
            if session == "session":
                headers["mcp-session-id"] = sid
            elif session == "bogus":
                headers["mcp-session-id"] = "not-a-session"
            try:
                r = http.post(url, content=payload, headers=headers)
            except httpx.TimeoutException as e:
                raise AssertionError(f"no answer within {HANG_SECONDS:g} s") from e
            assert r.status_code < 500, f"{r.status_code}: {r.text[:300]}"
            assert child.alive(), "sakur4 serve --http died"

        try:
            one()
        except Exception as e:
            findings.append(Finding("http", describe(e), b""))
    child.stop()
    findings += [Finding("http", t, b"") for t in child.tracebacks()]
    return findings


# -- gateway --------------------------------------------------------------------------


class CappedTransport(httpx.AsyncBaseTransport):
    """The real server behind a cap on generation: a fuzzed valid body costs ≤ 4 tokens."""

    def __init__(self) -> None:
        self.real = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            body = json.loads(request.content)
            body["max_tokens"] = 4
            body.pop("n", None)
            body.pop("max_completion_tokens", None)
            request = httpx.Request(
                request.method, request.url, json=body, headers={"content-type": "application/json"}
            )
        return await self.real.handle_async_request(request)

    async def aclose(self) -> None:
        await self.real.aclose()


def chat_messages() -> st.SearchStrategy[Any]:
    role = st.sampled_from(["system", "user", "assistant", "tool"]) | json_values
    content = (
        any_text
        | st.none()
        | json_values
        | st.lists(
            st.fixed_dictionaries({"type": st.just("text"), "text": any_text}) | json_values,
            max_size=3,
        )
    )
    call = (
        st.fixed_dictionaries(
            {
                "id": any_text | json_values,
                "type": st.just("function"),
                "function": st.fixed_dictionaries(
                    {"name": any_text, "arguments": any_text | json_values}
                )
                | json_values,
            }
        )
        | json_values
    )
    message = st.fixed_dictionaries(
        {"role": role},
        optional={
            "content": content,
            "tool_calls": st.lists(call, max_size=2) | json_values,
            "tool_call_id": any_text | json_values,
            "name": any_text | json_values,
        },
    )
    good = st.just([{"role": "user", "content": "Say ok."}])
    return good | st.lists(message | json_values, max_size=4)


def chat_bodies() -> st.SearchStrategy[Any]:
    return (
        st.fixed_dictionaries(
            {},
            optional={
                "messages": chat_messages(),
                "stream": st.booleans() | json_values,
                "max_tokens": st.integers(-5, 10**9) | json_values,
                "model": any_text | json_values,
                "tools": json_values,
                "stream_options": json_values,
                "temperature": json_values,
            },
        )
        | json_values
    )


class Tracebacks(logging.Handler):
    """Collects every log record that carries a traceback (an in-process server's crash)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback" in record.getMessage():
            self.seen.append(f"{record.name}: {record.getMessage()} {record.exc_info!r}"[:1500])

    def __enter__(self) -> Tracebacks:
        for name in ("", "uvicorn", "uvicorn.error", "sakur4"):
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in ("", "uvicorn", "uvicorn.error", "sakur4"):
            logging.getLogger(name).removeHandler(self)


def hang_up(url: str, payload: bytes, headers: dict[str, Any]) -> None:
    """Promise more body than is sent, then close the connection."""
    parts = urlsplit(url)
    lines = [
        f"POST {parts.path} HTTP/1.1",
        f"Host: {parts.netloc}",
        f"Content-Length: {len(payload) + 100}",
    ]
    head = "\r\n".join(lines).encode() + b"".join(
        b"\r\n" + k.encode() + b": " + (v if isinstance(v, bytes) else v.encode())
        for k, v in headers.items()
    )
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head + b"\r\n\r\n" + payload)


def fuzz_gateway(examples: int, work: Path, backend: str) -> list[Finding]:
    from reliability.load import _run_gateway
    from sakur4.backends.launcher import free_port
    from sakur4.settings import Settings

    project = work / "gw-project"
    project.mkdir(parents=True, exist_ok=True)
    s = Settings.load(
        store=work / "gw.db",
        project=project,
        backend=backend,
        gateway_port=free_port(),
        max_request_bytes=512 * 1024,
        backend_timeout=120,
    )
    server, thread = _run_gateway(s, CappedTransport(), [])  # type: ignore[arg-type]
    url = f"http://127.0.0.1:{s.gateway_port}/v1/chat/completions"
    findings: list[Finding] = []
    # Header values an HTTP client can send (no control characters; uvicorn bounds the
    # header block itself at 16 KiB, below anything Sakur4 sees).
    header_text = st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=300).map(
        lambda t: t.strip(" \t")
    )
    session = st.none() | header_text | st.sampled_from(["fuzz", "", "x" * 201, "é" * 5])
    headers_project = st.none() | st.sampled_from(
        [str(project), "relative/dir", "/no/such/dir", str(project / "..")]
    )
    try:
        with Tracebacks() as crashes, httpx.Client(timeout=HANG_SECONDS * 4) as http:

            @_settings(examples)
            @given(wire_payloads(chat_bodies()), session, headers_project, st.booleans())
            def one(payload: bytes, sess: str | None, proj: str | None, cut: bool) -> None:
                COUNTS["gateway"] += 1
                crashes.seen.clear()
                headers: dict[str, Any] = {"content-type": "application/json"}
                if sess is not None:
                    headers["x-sakur4-session"] = sess.encode("utf-8", "replace")
                if proj is not None:
                    headers["x-sakur4-project"] = proj.encode()
                if cut and len(payload) < 100_000:
                    hang_up(url, payload, headers)  # a truncated body: the client went away
                    payload = b'{"messages": [{"role": "user", "content": "still there?"}]}'
                try:
                    r = http.post(url, content=payload, headers=headers)
                except httpx.TimeoutException as e:
                    raise AssertionError("the gateway did not answer in time") from e
                except httpx.TransportError as e:
                    raise AssertionError(
                        f"{type(e).__name__} {e} on a {len(payload):,}-byte body "
                        f"{payload[:60]!r}, headers {headers}"
                    ) from e
                assert not crashes.seen, crashes.seen[:2]
                if r.status_code == 200:
                    return
                said = f"{r.status_code}: {r.text[:300]}"
                assert r.status_code < 500 or r.status_code in (502, 503), said
                try:
                    error = r.json().get("error")
                except ValueError:
                    error = None
                assert isinstance(error, dict), said
                assert isinstance(error.get("message"), str), said

            one()
    except Exception as e:
        findings.append(Finding("gateway", describe(e), b""))
    finally:
        server.should_exit = True
        thread.join(60)
    return findings


# -- the gateway's exposure policy ------------------------------------------------------

TOKEN = "fuzz-token-0123456789abcdef"
_ASCII = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)


def _episodes(store: Path) -> int:
    conn = connect(store)
    try:
        return int(conn.execute("SELECT count(*) FROM episodic_stream").fetchone()[0])
    finally:
        conn.close()


def fuzz_exposure(examples: int, work: Path, backend: str) -> list[Finding]:
    from reliability.load import _run_gateway
    from sakur4.backends.launcher import free_port
    from sakur4.settings import Settings

    project = work / "exposure-project"
    project.mkdir(parents=True, exist_ok=True)
    s = Settings.load(
        store=work / "exposure.db",
        project=project,
        backend=backend,
        gateway_port=free_port(),
        http_token=TOKEN,
        backend_timeout=120,
    )
    server, thread = _run_gateway(s, CappedTransport(), [])  # type: ignore[arg-type]
    base = f"http://127.0.0.1:{s.gateway_port}"
    port = s.gateway_port
    # (value, allowed): None leaves the header out (httpx sends its own Host).
    hosts = st.sampled_from(
        [
            (None, True),
            (f"127.0.0.1:{port}", True),
            (f"localhost:{port}", True),
            ("LocalHost", True),
            (f"[::1]:{port}", True),
            (f"evil.example:{port}", False),
            ("localhost.evil.example", False),
            (f"127.0.0.1.nip.io:{port}", False),
            (f"127.0.0.1:{port}@evil.example", False),
            ("127.0.0.1:port", False),
        ]
    ) | _ASCII.map(lambda t: (f"x-{t}.example", False))
    origins = st.sampled_from(
        [
            (None, True),
            ("http://localhost:3000", True),
            (f"https://127.0.0.1:{port}", True),
            ("http://[::1]", True),
            ("null", False),
            ("file://", False),
            ("file:///home/user/page.html", False),
            ("%%%", False),
            ("http://evil.example", False),
            ("ws://localhost", False),
            (f"http://localhost:{port}/path", False),
        ]
    ) | _ASCII.map(lambda t: (f"~{t}", False))
    tokens = st.sampled_from(
        [
            (f"Bearer {TOKEN}", True),
            (f"bearer {TOKEN}", True),
            (f"BEARER   {TOKEN}", True),  # h11 refuses trailing blanks itself
            (None, False),
            (f"Basic {TOKEN}", False),
            ("Bearer wrong-wrong-wrong-wrong", False),
            (TOKEN, False),
        ]
    )
    types = st.sampled_from(
        [
            ("application/json", True),
            ("application/json; charset=utf-8", True),
            ("APPLICATION/JSON", True),
            ("application/vnd.api+json", True),
            (None, False),
            ("text/plain", False),
            ("text/plain;charset=UTF-8", False),
            ("application/x-www-form-urlencoded", False),
            ("multipart/form-data; boundary=x", False),
        ]
    ) | _ASCII.map(lambda t: (f"x/{t}", False))
    routes = st.sampled_from(
        [
            ("POST", "/v1/chat/completions"),
            ("POST", "/chat/completions"),
            ("GET", "/v1/models"),
            ("GET", "/health"),
            ("GET", "/sakur4/receipts"),
            ("GET", "/sakur4/folds/1"),
        ]
    )
    body = json.dumps({"messages": [{"role": "user", "content": "Say ok."}]}).encode()
    findings: list[Finding] = []
    try:
        with Tracebacks() as crashes, httpx.Client(timeout=HANG_SECONDS * 4) as http:
            # Episode 1 exists, so an allowed GET of a fold is a 200.
            first = http.post(
                f"{base}/v1/chat/completions",
                content=body,
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            )
            if first.status_code != 200:
                return [Finding("exposure", f"no first turn: {first.text[:200]}", b"")]

            @_settings(examples)
            @given(routes, hosts, origins, tokens, types)
            def one(
                route: tuple[str, str],
                host: tuple[str | None, bool],
                origin: tuple[str | None, bool],
                token: tuple[str | None, bool],
                ctype: tuple[str | None, bool],
            ) -> None:
                COUNTS["exposure"] += 1
                crashes.seen.clear()
                method, path = route
                headers = {
                    name: value
                    for name, (value, _) in (
                        ("Host", host),
                        ("Origin", origin),
                        ("Authorization", token),
                        ("Content-Type", ctype),
                    )
                    if value is not None
                }
                expected = 200
                for status, (_, ok) in ((421, host), (403, origin), (401, token), (415, ctype)):
                    if status == 415 and method != "POST":
                        continue
                    if not ok:
                        expected = status
                        break
                before = _episodes(s.store)
                r = http.request(
                    method, base + path, headers=headers, content=body if method == "POST" else None
                )
                said = f"{method} {path} {headers}: {r.status_code} {r.text[:300]}"
                assert not crashes.seen, crashes.seen[:2]
                if expected == 200 and r.status_code in (502, 503):
                    return  # the server itself failed (overloaded machine): not the policy
                assert r.status_code == expected, said
                if expected != 200 or method != "POST":
                    assert _episodes(s.store) == before, f"a refused request stored: {said}"
                if r.status_code != 200:
                    error = r.json().get("error")
                    assert isinstance(error, dict), said
                    assert isinstance(error.get("message"), str), said

            one()
    except Exception as e:
        findings.append(Finding("exposure", describe(e), b""))
    finally:
        server.should_exit = True
        thread.join(60)
    return findings


# -- indexer -------------------------------------------------------------------------


def _fixtures() -> list[bytes]:
    return [p.read_bytes() for p in sorted(FIXTURES.iterdir()) if p.is_file()]


@st.composite
def source_files(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["fixture", "fixture", "text", "bytes", "blowup"]))
    if kind == "bytes":
        return draw(st.binary(max_size=4000))
    if kind == "text":
        return draw(st.text(max_size=2000)).encode("utf-8", "surrogatepass")
    if kind == "blowup":
        unit = draw(
            st.sampled_from(
                [
                    "(",
                    "{",
                    "[",
                    "def f(",
                    "fn a() {",
                    "a" * 1000,
                    "\\",
                    "'",
                    '"""',
                    "/*",
                    "class A:\n  ",
                    "\t",
                ]
            )
        )
        return (unit * draw(st.integers(1, 20_000))).encode()
    data = bytearray(draw(st.sampled_from(_fixtures())))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["cut", "flip", "splice", "dup", "crlf", "bom"]))
        at = draw(st.integers(0, len(data)))
        if op == "cut":
            del data[at:]
        elif op == "flip" and data:
            i = min(at, len(data) - 1)
            data[i] = draw(st.integers(0, 255))
        elif op == "splice":
            data[at:at] = draw(st.binary(max_size=50))
        elif op == "dup":
            data[at:at] = data[: draw(st.integers(0, len(data)))]
        elif op == "crlf":
            data = bytearray(bytes(data).replace(b"\n", b"\r\n"))
        else:
            data[0:0] = b"\xef\xbb\xbf"
    return bytes(data)


def fuzz_indexer(examples: int, work: Path) -> list[Finding]:
    from sakur4.ledger import index_project
    from sakur4.store import open_store
    from sakur4.store.projects import add_project

    root = work / "index-project"
    root.mkdir(parents=True, exist_ok=True)
    store = open_store(work / "index.db")
    project = add_project(store, root)
    files = ProjectFiles(root, random.Random(0))
    names = st.sampled_from(["a", "pkg/b", "deep/er/c", "ünï cödé", "x y", "__init__", "mod.d"])
    findings: list[Finding] = []

    @_settings(examples)
    @given(
        st.lists(
            st.tuples(names, st.sampled_from([*EXTENSIONS, ".tsx"]), source_files()),
            min_size=1,
            max_size=3,
        )
    )
    def one(batch: list[tuple[str, str, bytes]]) -> None:
        COUNTS["indexer"] += 1
        for name, ext, data in batch:
            path = root / f"{name}{ext}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            files.versions[content_hash(data)] = data
        started = time.monotonic()
        report = index_project(store, project)
        took = time.monotonic() - started
        assert took < HANG_SECONDS, f"index took {took:.1f} s"
        assert report.files_seen >= 0
        conn = connect(store.path)
        try:
            problems = ledger_agreement(conn, files)
        finally:
            conn.close()
        assert not problems, problems

    try:
        one()
    except Exception as e:
        findings.append(Finding("indexer", describe(e), b""))
    finally:
        store.close()
    return findings


# -- doctor --------------------------------------------------------------------------


def _seed_store(path: Path) -> bytes:
    """A real store with some of everything in it, as bytes (WAL checkpointed)."""
    from sakur4.episodes import record_episodes, remember
    from sakur4.store import open_store
    from sakur4.store.projects import add_project

    root = path.parent / "seed-project"
    root.mkdir(parents=True, exist_ok=True)
    s = open_store(path)
    p = add_project(s, root)
    for i in range(30):
        remember(s, p.id, f"note {i} " + "word " * i)
    record_episodes(s, p.id, "sess", 1, [{"role": "user", "content": "hi " * 50}])
    s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    return path.read_bytes()


@st.composite
def store_bytes(draw: st.DrawFn, seed: bytes) -> tuple[bytes, bytes | None]:
    """(store file, WAL file or None)."""
    kind = draw(st.sampled_from(["random", "header", "flip", "flip", "cut", "pages", "wal"]))
    wal = None
    if kind == "random":
        data = draw(st.binary(max_size=20_000))
    elif kind == "header":
        data = b"SQLite format 3\x00" + draw(st.binary(max_size=20_000))
    elif kind == "cut":
        data = seed[: draw(st.integers(0, len(seed)))]
    elif kind == "pages":
        buf = bytearray(seed)
        page = 4096
        n = len(buf) // page
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        buf[i * page : (i + 1) * page], buf[j * page : (j + 1) * page] = (
            buf[j * page : (j + 1) * page],
            bytes(page) if i == j else buf[i * page : (i + 1) * page],
        )
        data = bytes(buf)
    else:
        buf = bytearray(seed)
        for _ in range(draw(st.integers(1, 40))):
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
        data = bytes(buf)
        if kind == "wal":
            data = seed
            wal = draw(st.binary(min_size=32, max_size=9000))
    return data, wal


def fuzz_doctor(examples: int, work: Path) -> list[Finding]:
    from sakur4.doctor import diagnose
    from sakur4.store import open_store

    seed = _seed_store(work / "seed" / "sakur4.db")
    target = work / "doctor" / "sakur4.db"
    target.parent.mkdir(parents=True, exist_ok=True)
    findings: list[Finding] = []
    levels: Counter[str] = Counter()

    @_settings(examples)
    @given(store_bytes(seed))
    def one(case: tuple[bytes, bytes | None]) -> None:
        COUNTS["doctor"] += 1
        data, wal = case
        for suffix in ("", "-wal", "-shm"):
            Path(str(target) + suffix).unlink(missing_ok=True)
        target.write_bytes(data)
        if wal is not None:
            Path(str(target) + "-wal").write_bytes(wal)
        started = time.monotonic()
        report = _within(lambda: diagnose(store=target), HANG_SECONDS)
        assert time.monotonic() - started < HANG_SECONDS
        for c in report.checks:
            if c.name in ("store", "integrity", "schema"):
                levels[f"{c.name}:{c.level}"] += 1
        try:
            s = _within(lambda: open_store(target), HANG_SECONDS)
            s.close()
        except StoreError:
            pass

    try:
        one()
    except Exception as e:
        findings.append(Finding("doctor", describe(e), b""))
    COUNTS.update({f"doctor {k}": v for k, v in levels.items()})
    return findings


def _within(fn: Callable[[], Any], seconds: float) -> Any:
    """Run ``fn`` on a thread; a hang is an AssertionError, an exception is re-raised."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise AssertionError(f"did not return within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


FUZZERS = ("stdio", "http", "gateway", "exposure", "indexer", "doctor")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=2000, help="examples per target")
    p.add_argument("--targets", nargs="+", choices=FUZZERS, default=list(FUZZERS))
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sakur4-fuzz-"))
    findings: list[Finding] = []
    for target in args.targets:
        started = time.monotonic()
        if target in ("gateway", "exposure"):
            from reliability.procs import llama_server

            run = fuzz_gateway if target == "gateway" else fuzz_exposure
            with llama_server(ctx=8192, log=work / "llama.log") as server:
                findings += run(args.examples, work, server.url)
        else:
            findings += {
                "stdio": fuzz_stdio,
                "http": fuzz_http,
                "indexer": fuzz_indexer,
                "doctor": fuzz_doctor,
            }[target](args.examples, work)
        print(
            f"{target:<8} {COUNTS[target]:>6} inputs in {time.monotonic() - started:6.0f} s, "
            f"findings {sum(1 for f in findings if f.target == target)}",
            flush=True,
        )
    extra = {k: v for k, v in COUNTS.items() if k.startswith("doctor ")}
    if extra:
        print("doctor verdicts:", ", ".join(f"{k[7:]} {v}" for k, v in sorted(extra.items())))
    for f in findings:
        print(f"FINDING {f.target}: {f.what}")
    if not findings:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
