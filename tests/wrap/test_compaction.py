"""OpenCode's own compaction request, recognised and rewritten onto the session's cached
conversation (issue 28 item 4). The requests are the real OpenCode 1.18.33's, recorded
by tests/wrap/fixtures/record_opencode_compaction.py: its title request, the main
turn, the compaction, and the turn after it."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from sakur4.backends.launcher import LlamaServer
from sakur4.demo.via_gateway import running_gateway
from sakur4.harnesses.compaction import (
    as_served,
    extends_cached,
    recognise,
    serve_from_cache,
)
from sakur4.harnesses.opencode import HARNESS as OPENCODE
from sakur4.harnesses.recipes import Target, harness, launch
from sakur4.receipts import Receipt, list_receipts
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import ensure_project
from wrapped import INSTALL, OPENCODE_DIR, wrap_env

RECORDED = Path(__file__).resolve().parent / "fixtures" / "opencode_compaction.json"
HARNESSES = Path(__file__).resolve().parents[1] / "fixtures" / "harnesses"


def receipts(store: Path, project: Path) -> list[Receipt]:
    s = open_store(store)
    try:
        return list_receipts(s, ensure_project(s, project).id, limit=1000)
    finally:
        s.close()


def served_model(server: LlamaServer) -> str:
    return str(httpx.get(f"{server.url}/v1/models", timeout=30).json()["data"][0]["id"])


def recorded() -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = json.loads(RECORDED.read_text())
    return requests


def test_the_real_opencode_compaction_is_recognised_and_nothing_else() -> None:
    title, main, compaction, after, second = recorded()
    found = recognise(compaction)
    assert found is not None
    assert found.harness == "opencode"
    assert found.answer == "ok"
    assert found.conversation.startswith('[User]: "Read README.md"')
    # The summariser's system prompt and the instruction travel; the conversation does not.
    assert "You are a context summarization agent" in found.instruction
    assert "Create a new anchored summary" in found.instruction
    assert found.conversation not in found.instruction
    for other in (title, main, after, second):
        assert recognise(other) is None
    # Tags in a user's own message, or a request with tools, are not OpenCode's compaction.
    system, user = compaction["messages"]
    pasted = {**user, "content": "Please tidy this: " + user["content"]}
    assert recognise({**compaction, "messages": [system, pasted]}) is None
    assert recognise({**compaction, "tools": main["tools"]}) is None


def test_it_is_rewritten_as_the_session_s_last_request_plus_the_instruction() -> None:
    _, main, compaction, _, _ = recorded()
    served = serve_from_cache(compaction, [("s1", main["messages"], main["tools"])])
    assert served is not None
    assert served.session == "s1"
    body = served.body
    # The last request as the harness sent it (the prompt the server cached), its tools.
    assert body["messages"][: len(main["messages"])] == main["messages"]
    assert body["tools"] == main["tools"]
    assert body["messages"][-2] == {"role": "assistant", "content": "ok"}
    last = body["messages"][-1]
    assert last["role"] == "user"
    assert last["content"].startswith("You are a context summarization agent")
    assert OPENCODE.compaction is not None
    assert OPENCODE.compaction.preface in last["content"]
    # The harness's own sampling settings stay.
    assert body["max_tokens"] == compaction["max_tokens"]
    assert body["stream"] is True
    assert served.receipt()["harness"] == "opencode"


def test_a_compaction_that_quotes_no_known_session_is_left_alone() -> None:
    _, main, compaction, _, _ = recorded()
    other = [{"role": "system", "content": "x"}, {"role": "user", "content": "Something else"}]
    assert serve_from_cache(compaction, [("s2", other, None)]) is None
    assert serve_from_cache(compaction, []) is None
    # The newest session that it quotes wins.
    served = serve_from_cache(compaction, [("s2", other, None), ("s1", main["messages"], None)])
    assert served is not None
    assert served.session == "s1"
    assert "tools" not in served.body


def test_claude_code_s_compaction_is_named_and_left_as_it_is() -> None:
    """Claude Code 2.1.332's /compact (recorded by tests/fixtures/harnesses/
    record_claude_code.py --compact): the conversation as it stands plus the
    summariser's instruction in the last user message — already the cached prompt's
    continuation, so it is named for the receipt, never rewritten."""
    recorded_cc = json.loads((HARNESSES / "claude_code_compact.json").read_text())
    before, compaction = recorded_cc["requests"]
    said = extends_cached(compaction)
    assert said is not None
    assert said["harness"] == "claude-code"
    assert compaction["system"] == before["system"]
    assert compaction["tools"] == before["tools"]
    assert serve_from_cache(compaction, [("s1", before["messages"], before["tools"])]) is None
    turns = json.loads((HARNESSES / "claude_code_p_continue.json").read_text())["requests"]
    for other in [before, *turns, *recorded()]:
        assert extends_cached(other) is None
    # The instruction pasted without tools is no compaction of a coding session.
    assert extends_cached({k: v for k, v in compaction.items() if k != "tools"}) is None


def test_the_pipeline_asks_once_how_a_compaction_is_served() -> None:
    """``as_served``: OpenCode's rewritten onto the session it quotes, Claude Code's as it
    came under the session the request names, any other request not at all."""
    title, main, compaction, _, _ = recorded()
    sessions = [("s1", main["messages"], main["tools"])]
    opencode = as_served(compaction, sessions)
    rewritten = serve_from_cache(compaction, sessions)
    assert opencode is not None
    assert rewritten is not None
    assert (opencode.session, opencode.body) == ("s1", rewritten.body)
    assert opencode.receipt == rewritten.receipt()
    cc = json.loads((HARNESSES / "claude_code_compact.json").read_text())["requests"][1]
    claude = as_served(cc, sessions)
    assert claude is not None
    assert (claude.session, claude.body, claude.receipt) == (None, cc, extends_cached(cc))
    assert as_served(title, sessions) is None
    assert as_served(main, sessions) is None


class Recording(BaseHTTPRequestHandler):
    """Passes each request on to the gateway as it is (the answer streamed back) and
    keeps the chat bodies, so the test has the compaction request the harness sent."""

    upstream = ""
    seen: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._forward(None)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.endswith("/chat/completions"):
            self.seen.append(json.loads(raw))
        self._forward(raw)

    def _forward(self, raw: bytes | None) -> None:
        skip = {"host", "content-length", "connection", "accept-encoding"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        method = "GET" if raw is None else "POST"
        with (
            httpx.Client(timeout=900) as http,
            http.stream(method, self.upstream + self.path, content=raw, headers=headers) as got,
        ):
            self.send_response(got.status_code)
            for k, v in got.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            for data in got.iter_raw():
                self.wfile.write(data)
                self.wfile.flush()
        self.close_connection = True


@pytest.mark.backend
def test_the_real_opencode_compaction_through_the_gateway_reuses_the_cached_prompt(
    llama_swa_full: LlamaServer, tmp_path: Path
) -> None:
    if not OPENCODE_DIR.is_dir():
        pytest.skip(f"OpenCode not installed: {INSTALL['opencode'][1]}")
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# ledger\n\nReconciles ledger batches every night.\n")
    rows = [
        f"def batch_{i}(rows):\n    return sum(r.value * {i} for r in rows)\n" for i in range(90)
    ]
    (project / "ledger.py").write_text("\n".join(rows))  # ~1,500 tokens
    store = tmp_path / "store.db"
    settings = Settings.load(store=store, project=project, backend=llama_swa_full.url)
    with running_gateway(settings) as gateway:
        Recording.upstream = gateway.url
        Recording.seen.clear()
        proxy = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            # Told a window of 3,000, OpenCode compacts after its first answer (its
            # prompt and the attached file, ~3,800 tokens, are over it) and not again
            # (its prompt after the compaction is ~2,400).
            target = Target(
                f"http://127.0.0.1:{proxy.server_address[1]}",
                served_model(llama_swa_full),
                16,
                project,
                None,
                window=3000,
            )
            run = launch(
                harness("opencode"),
                target,
                ["run", "-f", "ledger.py", "--", "What does ledger.py do?"],
                tmp_path,
            )
            env = wrap_env(tmp_path / "home", store, OPENCODE_DIR) | dict(run.env)
            done = subprocess.run(
                [str(OPENCODE_DIR / "opencode"), *run.argv[1:]],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                timeout=1500,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        finally:
            proxy.shutdown()
            proxy.server_close()
    assert done.returncode == 0, done.stderr[-1500:]
    asked = [b for b in Recording.seen if recognise(b) is not None]
    assert asked, [b["messages"][-1]["content"][:80] for b in Recording.seen]
    served = [r for r in receipts(store, project) if "compaction" in r.detail]
    assert len(served) == len(asked), [r.detail.get("compaction") for r in served]
    r = served[0]
    assert r.server_processed is not None
    assert r.server_cached is not None
    # The session's prompt came from the server's cache: only the instruction (and
    # the template's few tokens around it) was processed.
    assert r.server_cached > 0
    assert r.server_processed <= r.prompt_tokens * 0.25, (r.server_processed, r.prompt_tokens)
    # Straight to the server, the harness's own request processes all of it.
    straight = httpx.post(
        f"{llama_swa_full.url}/v1/chat/completions",
        json={**asked[0], "stream": False, "max_tokens": 1, "cache_prompt": True},
        timeout=900,
    ).json()["timings"]
    print(
        f"compaction via the gateway: {r.server_processed} of {r.prompt_tokens} tokens "
        f"processed ({r.server_cached} reused); straight: {straight['prompt_n']} processed "
        f"of {straight['prompt_n'] + straight.get('cache_n', 0)}"
    )
    assert straight["prompt_n"] > r.server_processed
