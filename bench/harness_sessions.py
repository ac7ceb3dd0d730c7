"""Twelve scripted turns per harness through ``sakur4 wrap`` at an 8,192-token window
(issue 41's goals): every turn answered, no session stuck after an oversized
attachment, the harness's instructions and the turn-1 rule in every prompt, reuse.

A user's session, as a user runs it: the real llama-server (``-c 8192 --swa-full``,
the packaged Gemma 3 270M with the template Sakur4 gives it), a recording proxy in
front of it, and ``sakur4 wrap --backend PROXY`` with wrap's own defaults (the window
it tells each harness, MCP; ``--told`` and ``--no-mcp`` change them), so every wrap
starts its gateway as a user's would and the last one out stops it. The project is
a scratch git repository of ~20 files made in a temporary directory, with one file
(``docs/journal.md``, ~12k tokens) that cannot fit the window.

The twelve turns (:data:`TURNS`) are the same words for every harness, each tagged
``(turn N)``: turn 1 gives a rule for the whole session, five turns read a file
(Claude Code: an ``@path`` mention; OpenCode: ``run -f path``; aider: ``/read-only
path`` before the message), turn 6 attaches the oversized file (``@``, ``-f``, aider's
``/add``), and turn 12 asks for the rule back. Claude Code and OpenCode run one
harness process per turn (``claude -p … --continue``, ``opencode run -c …``); aider
one interactive session with the lines piped to its stdin.

From the proxy's records (every chat request llama-server received, with the answer's
``timings``):

- answered: a request of the turn (its newest ``(turn N)`` tag) that the server
  answered, and for Claude Code and OpenCode the harness's process said no error;
- stuck: turns after the oversized one that were not answered;
- instructions: of the harness's requests (side requests, a title or a summary, are
  counted apart), how many hold every paragraph of the harness's system prompt as
  its first request of turn 1 sent it, and how many hold the turn-1 rule;
- reuse: the server's ``cache_n`` / (``cache_n`` + ``prompt_n``) over all requests.

    nice -n 10 python bench/harness_sessions.py --harness claude-code --keep /tmp/h41
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from harness_window import env_for, llama, turn_failed
from processes import stoppable

from sakur4.backends.launcher import free_port
from sakur4.settings import Settings

HARNESSES = {"claude-code": "claude", "opencode": "opencode", "aider": "aider"}
AIDER_BIN = Settings.load().cache_dir / "aider" / "0.86.2" / "bin"
OUTPUT_CAP = 128  # the runs; answers are short or cut, either way an answer
TURN_LIMIT = 900.0  # seconds one harness process may take (Claude Code, OpenCode)
SESSION_LIMIT = 5400.0  # aider's one session
# The gateway sends a Claude Code turn to llama-server's own Messages API when it has one.
CHAT_PATHS = ("/v1/chat/completions", "/v1/messages", "/completion", "/v1/completions")
RULE = "Rule for the whole session: end every answer with the word KIWI."
BIG = "docs/journal.md"
TAG = re.compile(r"\(turn (\d+)\)")
SIDE_MARKERS = ("title", "summar")  # a title or a summary request's own instructions
GATEWAY_HEAD = "Context management (Sakur4)"


@dataclass(frozen=True)
class Turn:
    text: str
    reads: tuple[str, ...] = ()
    big: bool = False


TURNS = (
    Turn(f"{RULE} (turn 1) What is README.md about? One line.", ("README.md",)),
    Turn("(turn 2) Read src/ledger/accounts.py and say in one line what it does.",
         ("src/ledger/accounts.py",)),
    Turn("(turn 3) Which function in accounts.py opens an account? One line."),
    Turn("(turn 4) Read src/ledger/transfers.py and say in one line what it does.",
         ("src/ledger/transfers.py",)),
    Turn("(turn 5) How do accounts and transfers differ? One line."),
    Turn(f"(turn 6) Summarise {BIG} in one line.", (BIG,), big=True),
    Turn("(turn 7) Read src/ledger/rates.py and say in one line what it does.",
         ("src/ledger/rates.py",)),
    Turn("(turn 8) Which module would you change to add a currency? One line."),
    Turn("(turn 9) Read tests/test_accounts.py and name one test in it.",
         ("tests/test_accounts.py",)),
    Turn("(turn 10) Name one more test you would add. One line."),
    Turn("(turn 11) Read src/ledger/report.py and say in one line what it does.",
         ("src/ledger/report.py",)),
    Turn("(turn 12) What rule did I give you in turn 1? One line."),
)  # fmt: skip

MODULES = (
    "accounts", "transfers", "rates", "report", "ledger", "audit", "currency", "export",
    "imports", "limits", "fees", "schedule", "journal_io", "users", "cli",
)  # fmt: skip


def module_text(name: str, i: int) -> str:
    """A small module (~400 tokens): a class and four functions named for it."""
    lines = [f'"""ledger.{name}: the {name} part of the ledger (module {i})."""', ""]
    lines += [f"class {name.title().replace('_', '')}:", f'    """{name} rows."""', ""]
    lines += ["    def __init__(self, rows):", "        self.rows = list(rows)", ""]
    verbs = ("open_account", "post", "total", "close") if name == "accounts" else (
        "load", "check", "total", "flush")  # fmt: skip
    for verb in verbs:
        lines += [
            "",
            f"def {verb}_{name}(rows, limit={i + 3}, currency='EUR'):",
            f'    """{verb.replace("_", " ")} the {name} rows above the limit."""',
            "    kept = [r for r in rows if r.value >= limit and r.currency == currency]",
            f"    return sum(r.value for r in kept) * {i + 1}",
        ]
    return "\n".join(lines) + "\n"


def journal_text() -> str:
    """The oversized file: ~12k tokens of journal lines (over the 8,192 window alone),
    under OpenCode's and Claude Code's read limits (2,000 lines, 50 KB)."""
    rows = [f"# Journal\n\nJOURNAL_MARKER: every posting of the ledger, {900} lines.\n"]
    for n in range(900):
        rows.append(f"- {n:04d} posted {n * 37 % 1000:3d}.{n % 100:02d} EUR to acct {n % 97:02d}")
    return "\n".join(rows) + "\n"


def make_repo(root: Path) -> None:
    """~20 files: README, 15 modules, two tests, the journal; one commit (aider needs git)."""
    (root / "src/ledger").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "docs").mkdir()
    (root / "README.md").write_text(
        "# ledger\n\nA small double-entry ledger: accounts, transfers, rates and reports "
        "in src/ledger/, tests with pytest in tests/, the posting journal in docs/.\n"
    )
    (root / "src/ledger/__init__.py").write_text('"""A small double-entry ledger."""\n')
    for i, name in enumerate(MODULES, 1):
        (root / "src/ledger" / f"{name}.py").write_text(module_text(name, i))
    for name in ("accounts", "transfers"):
        (root / "tests" / f"test_{name}.py").write_text(
            f"from ledger.{name} import total_{name}\n\n\n"
            f"def test_total_{name}_of_nothing_is_zero():\n    assert total_{name}([]) == 0\n"
        )
    (root / BIG).write_text(journal_text())
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "."], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "ledger"], cwd=root, check=True)


def harness_argv(harness: str, n: int, turn: Turn) -> list[str]:
    """The harness's arguments (after ``wrap HARNESS --``) for turn ``n`` of a session
    run one process per turn."""
    if harness == "claude":
        prompt = turn.text
        for path in turn.reads:
            prompt = prompt.replace(path, f"@{path}")
        extra = ["--continue"] if n > 1 else []
        # --max-turns 2: one answer and one follow-up (after a tool call or the cap).
        return ["-p", prompt, *extra, "--max-turns", "2", "--output-format", "json"]
    extra = ["-c"] if n > 1 else []
    files = [a for path in turn.reads for a in ("-f", path)]
    return ["run", *extra, *files, "--", turn.text]


def aider_lines(turns: Sequence[Turn], read: str = "/read-only") -> list[str]:
    """aider's stdin: each turn's files (``/add`` for the oversized one, else ``read``),
    then its message."""
    out: list[str] = []
    for t in turns:
        out += [f"{'/add' if t.big else read} {p}" for p in t.reads]
        out.append(t.text)
    return out


# The proxy's records, and what is read from them.


@dataclass
class Exchange:
    path: str
    body: str
    status: int = 0
    answer: bytearray = field(default_factory=bytearray)  # grows as the answer streams
    seconds: float = 0.0
    error: str = ""  # what ended the exchange early, if anything did


def block_text(content: Any) -> str:
    """A message's text: a string, or its text and tool-result blocks joined (OpenAI
    parts and Anthropic blocks alike)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    out = []
    for part in content:
        if isinstance(part, dict):
            out.append(
                str(part.get("text", "")) if "text" in part else block_text(part.get("content"))
            )
    return "\n".join(out)


def message_texts(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of every message of a chat body: OpenAI's, or Anthropic's with its
    top-level ``system`` first."""
    out = [("system", block_text(body["system"]))] if body.get("system") else []
    for m in body.get("messages") or []:
        out.append((str(m.get("role", "")), block_text(m.get("content"))))
    return out


def turn_of(body: dict[str, Any]) -> int | None:
    """The request's turn: the newest ``(turn N)`` tag in its messages."""
    found = [int(n) for _, text in message_texts(body) for n in TAG.findall(text)]
    return max(found) if found else None


def system_text(body: dict[str, Any]) -> str:
    return "\n\n".join(
        text for role, text in message_texts(body) if role in ("system", "developer")
    )


def timings(answer: bytes | bytearray) -> tuple[int, int] | None:
    """(processed, reused) prompt tokens by the server's own count: llama-server's
    ``timings`` (``prompt_n``, ``cache_n``) in a JSON answer or the last event of a
    stream that carries them, or its Messages API's ``usage`` (``input_tokens``,
    ``cache_read_input_tokens``, in ``message_start`` when streamed)."""
    text = answer.decode("utf-8", "replace")
    events = [ln[5:].strip() for ln in reversed(text.splitlines()) if ln.startswith("data:")]
    for c in [text, *events]:
        try:
            got = json.loads(c)
        except ValueError:
            continue
        if not isinstance(got, dict):
            continue
        if isinstance(got.get("timings"), dict):
            t = got["timings"]
            return int(t.get("prompt_n", 0)), int(t.get("cache_n", 0))
        used = (got.get("message") or {}).get("usage") if "message" in got else got.get("usage")
        if isinstance(used, dict) and "cache_read_input_tokens" in used:
            return int(used.get("input_tokens", 0)), int(used["cache_read_input_tokens"])
    return None


def instruction_paragraphs(system: str) -> list[str]:
    """The harness's instructions as paragraphs of 40+ characters, the gateway's own
    head left out: what every later prompt must still hold."""
    out = []
    for p in system.split("\n\n"):
        p = p.strip()
        if len(p) >= 40 and not p.startswith(GATEWAY_HEAD):
            out.append(p)
    return out


@dataclass
class Request:
    turn: int | None
    side: bool
    answered: bool
    instructions: bool
    rule: bool
    prompt_n: int
    cache_n: int
    missing: str = ""  # the first instruction paragraph not found, cut short


def read_records(records: Sequence[Exchange]) -> list[Request]:
    """Each chat request the server received, judged (see the module docstring)."""
    bodies = []
    for r in records:
        try:
            bodies.append(json.loads(r.body))
        except ValueError:
            bodies.append({})
    first = [b for b in bodies if turn_of(b) == 1]
    harness_system = max((system_text(b) for b in first), key=len, default="")
    paragraphs = instruction_paragraphs(harness_system)
    head = paragraphs[0] if paragraphs else ""
    out = []
    for r, body in zip(records, bodies, strict=True):
        every = "\n\n".join(text for _, text in message_texts(body))
        system = system_text(body).lower()
        # Side: no turn's words (the gateway's probe), or a title or summary request.
        side = turn_of(body) is None or (
            head not in every and any(m in system for m in SIDE_MARKERS)
        )
        missing = next((p for p in paragraphs if p not in every), "")
        t = timings(r.answer) if r.status == 200 else None
        out.append(
            Request(
                turn=turn_of(body),
                side=side,
                answered=t is not None,
                instructions=bool(paragraphs) and not missing,
                rule=RULE in every,
                prompt_n=t[0] if t else 0,
                cache_n=t[1] if t else 0,
                missing=missing[:120],
            )
        )
    return out


@dataclass
class Result:
    harness: str
    turns: int = len(TURNS)
    answered: list[int] = field(default_factory=list)  # turn numbers
    harness_errors: dict[int, str] = field(default_factory=dict)
    stuck: list[int] = field(default_factory=list)  # turns after the big one not answered
    requests: int = 0
    side: int = 0
    instructions: int = 0
    rule: int = 0
    processed: int = 0
    reused: int = 0
    seconds: float = 0.0
    missing: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # wrap's own lines

    @property
    def main(self) -> int:
        return self.requests - self.side

    @property
    def reuse(self) -> float:
        total = self.processed + self.reused
        return round(100 * self.reused / total, 1) if total else 0.0


def judge(harness: str, requests: Sequence[Request], errors: dict[int, str]) -> Result:
    """The table's row from the judged requests and the harness's own per-turn errors."""
    res = Result(harness, harness_errors=dict(errors))
    served = {r.turn for r in requests if r.answered and not r.side and r.turn is not None}
    res.answered = [n for n in range(1, len(TURNS) + 1) if n in served and n not in errors]
    big = next(n for n, t in enumerate(TURNS, 1) if t.big)
    res.stuck = [n for n in range(big + 1, len(TURNS) + 1) if n not in res.answered]
    main = [r for r in requests if not r.side]
    res.requests, res.side = len(requests), len(requests) - len(main)
    res.instructions = sum(r.instructions for r in main)
    res.rule = sum(r.rule for r in main)
    res.missing = sorted({r.missing for r in main if r.missing})[:5]
    res.processed = sum(r.prompt_n for r in requests)
    res.reused = sum(r.cache_n for r in requests)
    return res


def table(results: Sequence[Result]) -> str:
    rows = [
        "| harness | turns answered | stuck (later turns refused) | instructions present | "
        "turn-1 rule present | reuse | time |",
        "|" + " --- |" * 7,
    ]
    for r in results:
        stuck = f"no (0 of {len(TURNS) - 6})" if not r.stuck else f"yes ({len(r.stuck)}: {r.stuck})"
        rows.append(
            f"| {r.harness} | {len(r.answered)} / {r.turns} | {stuck} | "
            f"{r.instructions} of {r.main} prompts | {r.rule} of {r.main} | "
            f"{r.reuse} % ({r.reused:,} of {r.reused + r.processed:,}) | "
            f"{r.seconds / 60:.1f} min |"
        )
    return "\n".join(rows)


# The recording proxy: a plain ASGI app passing everything through to llama-server.


class Proxy:
    """Every request to ``upstream``, passed through as it came and streamed back; the
    chat requests kept with their answers. Runs in a thread of its own."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.records: list[Exchange] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            self, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.client: httpx.AsyncClient | None = None

    def __enter__(self) -> Proxy:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the recording proxy did not start")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if self.client is None:
            self.client = httpx.AsyncClient(timeout=None)
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        query = scope.get("query_string", b"").decode()
        url = self.upstream + scope["path"] + (f"?{query}" if query else "")
        drop = {b"host", b"content-length", b"connection", b"transfer-encoding"}
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in drop]
        # Kept from the start and filled in as the answer streams: a record must not
        # depend on the exchange ending cleanly (a client that hangs up at [DONE]).
        record = Exchange(scope["path"], body.decode("utf-8", "replace"))
        if scope["path"] in CHAT_PATHS:
            self.records.append(record)
        started = time.monotonic()
        request = self.client.build_request(scope["method"], url, headers=headers, content=body)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as e:
            record.error = repr(e)
            await send({"type": "http.response.start", "status": 502, "headers": []})
            await send({"type": "http.response.body", "body": str(e).encode()})
            return
        record.status = response.status_code
        try:
            out = [(k, v) for k, v in response.headers.raw if k.lower() not in drop]
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": out})  # fmt: skip
            async for chunk in response.aiter_raw():
                record.answer += chunk
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except BaseException as e:
            record.error = repr(e)
            raise
        finally:
            record.seconds = round(time.monotonic() - started, 1)
            await response.aclose()


# One harness's session.


def wrap_cmd(harness: str, proxy: Proxy, port: int, told: int | None, mcp: bool) -> list[str]:
    cmd = [sys.executable, "-m", "sakur4", "wrap", "--backend", proxy.url, "--port", str(port)]
    cmd += ["--max-output", str(OUTPUT_CAP)]
    cmd += ["--window", str(told)] if told else []
    cmd += [] if mcp else ["--no-mcp"]
    return [*cmd, harness, "--"]


def per_turn(harness: str, base: list[str], project: Path, env: dict[str, str],
             proxy: Proxy, said: list[str]) -> dict[int, str]:  # fmt: skip
    """Claude Code and OpenCode: one wrap (one harness process) per turn; the turns the
    harness itself reported an error for."""
    errors: dict[int, str] = {}
    for n, turn in enumerate(TURNS, 1):
        before, t0 = len(proxy.records), time.monotonic()
        try:
            done = subprocess.run(
                [*base, *harness_argv(harness, n, turn)],
                cwd=project, env=env, capture_output=True, text=True,
                timeout=TURN_LIMIT, stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
            why = turn_failed(harness, done.returncode, done.stdout, done.stderr)
            said += [ln for ln in done.stderr.splitlines() if "sakur4" in ln]
        except subprocess.TimeoutExpired:
            why = f"no answer in {TURN_LIMIT:g} s"
        if why:
            errors[n] = why
        print(
            f"  turn {n:2d}: {time.monotonic() - t0:6.1f} s, "
            f"{len(proxy.records) - before} requests, {'ERROR ' + why if why else 'ok'}",
            flush=True,
        )
    return errors


def aider_session(
    base: list[str],
    project: Path,
    env: dict[str, str],
    said: list[str],
    extra: Sequence[str],
    read: str,
) -> None:
    flags = [*extra, "--yes-always", "--no-auto-commits", "--no-fancy-input", "--no-pretty"]
    flags += ["--no-show-model-warnings", "--no-check-update", "--no-analytics"]
    try:
        done = subprocess.run(
            [*base, *flags], cwd=project, env=env,
            input="\n".join(aider_lines(TURNS, read)) + "\n",
            capture_output=True, text=True, timeout=SESSION_LIMIT, check=False,
        )  # fmt: skip
        said += [ln for ln in done.stderr.splitlines() if "sakur4" in ln]
        (project.parent / "aider-output.txt").write_text(done.stdout + "\n---\n" + done.stderr)
        print(f"  aider exited {done.returncode}", flush=True)
    except subprocess.TimeoutExpired:
        print(f"  aider: no end in {SESSION_LIMIT:g} s", flush=True)


def run_harness(
    name: str,
    backend: str,
    work: Path,
    told: int | None,
    mcp: bool,
    aider_flags: Sequence[str],
    aider_read: str = "/read-only",
) -> tuple[Result, list[Exchange]]:
    harness = HARNESSES[name]
    project = work / "project"
    make_repo(project)
    env = env_for(work / "home", work / "store.db")
    env["PATH"] = f"{AIDER_BIN}:{env['PATH']}"
    said: list[str] = []
    started = time.monotonic()
    with Proxy(backend) as proxy:
        base = wrap_cmd(harness, proxy, free_port(), told, mcp)
        if harness == "aider":
            aider_session(base, project, env, said, aider_flags, aider_read)
            errors: dict[int, str] = {}
        else:
            errors = per_turn(harness, base, project, env, proxy, said)
        records = list(proxy.records)
    result = judge(name, read_records(records), errors)
    result.seconds = round(time.monotonic() - started, 1)
    result.said = sorted(set(said))
    return result, records


def keep(where: Path, result: Result, records: Sequence[Exchange], work: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    (where / "result.json").write_text(json.dumps(asdict(result), indent=1))
    (where / "records.json").write_text(
        json.dumps(
            [
                asdict(r)
                | {"answer": bytes(r.answer).decode("utf-8", "replace")[-4000:]}
                | {"timings": timings(r.answer)}
                for r in records
            ],
            indent=1,
        )
    )
    for name in ("wrap-gateway.log", "aider-output.txt"):
        src = work / name
        if src.exists():
            (where / name).write_bytes(src.read_bytes())
    for name in ("store.db", "store.db-wal"):
        if (work / name).exists():
            (where / name).write_bytes((work / name).read_bytes())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--harness", choices=(*HARNESSES, "all"), default="all")
    ap.add_argument("--told", type=int, help="wrap --window (default: wrap's own choice)")
    ap.add_argument("--no-mcp", action="store_true")
    ap.add_argument("--aider-flag", action="append", default=[], help="an extra aider flag")
    ap.add_argument(
        "--aider-read",
        choices=("/read-only", "/add"),
        default="/read-only",
        help="how aider is given the files the turns read",
    )
    ap.add_argument("--keep", type=Path, help="keep each run's records, log and store here")
    args = ap.parse_args()
    stoppable()
    names = list(HARNESSES) if args.harness == "all" else [args.harness]
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="harness-sessions-") as tmp:
        work = Path(tmp)
        with llama(work) as server:
            for name in names:
                print(f"{name}: {len(TURNS)} turns through sakur4 wrap", flush=True)
                where = work / name
                mcp, flags = not args.no_mcp, args.aider_flag
                result, records = run_harness(
                    name, server.url, where, args.told, mcp, flags, args.aider_read
                )
                results.append(result)
                print(table([result]), flush=True)
                for line in (*result.said, *result.missing):
                    print(f"    {line}", flush=True)
                for n, why in result.harness_errors.items():
                    print(f"    turn {n}: {why}", flush=True)
                if args.keep:
                    keep(args.keep / name, result, records, where)
    print(table(results))


if __name__ == "__main__":
    main()
