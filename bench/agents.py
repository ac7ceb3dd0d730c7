"""Many agents on one server (issue 37): what each keeps of its prompt when K agents'
calls interleave on one llama-server, and after the server restarts.

    .venv/bin/python bench/agents.py                                  # the full matrix
    .venv/bin/python bench/agents.py --models full --np 1 --modes default --restart-at 24
    .venv/bin/python bench/agents.py --table-only                     # kept runs only

K agents share one server: a main session and K-1 subagents, each with a system prompt
and tools of its own (a reviewer, a test runner, a searcher: different harness heads),
each a realistic generated session (:mod:`sakur4.demo.script`, the demo size with a
seed of its own) replayed by the scripted agent (:mod:`sakur4.demo.agent`). Their
calls interleave round-robin, one call of agent 1, one of agent 2, ..., each call
waiting for its answer as a harness does (:func:`interleave`). ``--restart-at N`` stops
the server before overall call N and starts it again with the same flags.

Judged on the server's own counts (``timings.prompt_n`` processed and ``cache_n``
reused of every answer): per agent its prompt tokens, reused, processed and reuse %.
Every strategy runs on a fresh server with the same flags:

- ``straight``: each agent talks to the server directly (no management);
- ``hearth``: the real hearth-llm 0.1.1 proxy (bench/hearth.py; skipped, with the
  reason, when its venv is absent);
- ``sakur4``: one gateway in this process for all agents, each agent its own session
  (``X-Sakur4-Session``); every answer's receipt must name the agent's session.

Server modes (``--modes``), each on ``-np 1`` and ``-np 2`` (``--np``; ``-c`` is the
window times the slots, so each slot has the window): ``advice``, the probe's advice for
a sliding-window model (``--swa-full -cram 0``), and ``default``, the server's own flags
with the RAM prompt cache (``-cram``) scaled to what a 7B's 8 GiB default holds
(:func:`ram_scaling`). Models (``--models``): ``swa``, the packaged Gemma 3 270M (a
sliding window of 512 on 15 of 18 layers), and ``full``, a tiny random-weight
full-attention ``llama`` with Gemma's tokenizer (scripts/build-full-attention-model.py,
built on first use: cache behaviour only, its text is noise); both get the chat template
the launcher gives the packaged model (:func:`model_path`), so the same prompts are the
same tokens.

Each run is kept in bench/out/agents/<plan>/<run>.json and not run again unless
``--rerun``; the tables (bench/out/agents-<plan>.md) are assembled from the kept runs.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import hearth  # bench/, beside this script
import httpx
from agents_figures import Call, Run, RunSpec, ceiling, goals, table, total  # bench/
from kv_bytes import gguf_metadata, kv_shape, ram_scaling  # bench/
from processes import stoppable  # bench/

from sakur4.anchors import pin_anchor
from sakur4.backends.kinds import open_backend, token_layouts
from sakur4.backends.launcher import (
    MODEL_FILE,
    LlamaServer,
    ServerFlags,
    ensure_model,
    find_llama_server,
)
from sakur4.backends.report import read_report
from sakur4.demo.agent import ScriptedAgent
from sakur4.demo.compare import CHAT
from sakur4.demo.scenario import Request, Session
from sakur4.demo.script import ScriptParams, generate, preset
from sakur4.demo.via_gateway import fold_refetch, running_gateway
from sakur4.errors import Sakur4Error
from sakur4.receipts import list_receipts
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

CHAT_PATH = "/v1/chat/completions"
OUT = Path(__file__).resolve().parent / "out"
ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ("straight", "hearth", "sakur4")
MiB = 1024 * 1024

# ---------------------------------------------------------------------------
# The agents


@dataclass(frozen=True)
class Role:
    name: str
    lead: str  # the first line of its system prompt ("" for the main session)
    tools: tuple[str, ...]  # the tools it is given (() for all)
    head_tokens: int  # its harness head


ROLES = (
    Role("main", "", (), 1000),
    Role(
        "reviewer",
        "You are a code-review subagent. Read the change and the code around it, and "
        "report defects with the file and line; do not edit files.",
        ("read_file", "grep", "git_diff", "list_dir"),
        600,
    ),
    Role(
        "tester",
        "You are a test-running subagent. Run the tests the main agent names, read the "
        "failures and report the smallest failing case.",
        ("run_tests", "read_file", "run_shell"),
        500,
    ),
    Role(
        "searcher",
        "You are a search subagent. Find where names are defined and used and answer "
        "with paths and line numbers only.",
        ("grep", "glob", "list_dir", "read_file"),
        400,
    ),
)


@dataclass(frozen=True)
class Agent:
    name: str  # also its Sakur4 session
    role: str
    params: ScriptParams
    session: Session


def make_agents(k: int, turns: int, size: str = "demo") -> list[Agent]:
    """K agents: the main session (the preset's head and seed) and K-1 subagents, each
    with its own system prompt, tools, head size and seed (ROLES, cycled)."""
    base = preset(size)
    out = []
    for i in range(k):
        role = ROLES[i % len(ROLES)]
        params = replace(
            base,
            name=f"{base.name}-{role.name}",
            turns=turns,
            seed=base.seed + i,
            head_tokens=role.head_tokens,
        )
        session = generate(params)
        if role.lead:
            tools = [t for t in session.tools if t["function"]["name"] in role.tools]
            session = replace(session, system=f"{role.lead}\n\n{session.system}", tools=tools)
        name = f"agent{i + 1}-{role.name}" + (f"-{i // len(ROLES) + 1}" if i >= len(ROLES) else "")
        out.append(Agent(name, role.name, params, session))
    return out


def plain(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages as sent: a tool call's null content as "" (what hearth's keys read,
    and what most harnesses send)."""
    return [{**m, "content": m.get("content") or ""} for m in messages]


def dry_requests(session: Session) -> list[list[dict[str, Any]]]:
    """The messages of every call an unmanaged agent sends (the server receives them as
    sent, so no need turn ever re-reads)."""
    gen = ScriptedAgent(session).calls()
    out: list[list[dict[str, Any]]] = []
    try:
        req = next(gen)
        while True:
            out.append(plain(req.messages))
            req = gen.send(req.messages)
    except StopIteration:
        return out


def next_said(requests: Sequence[Sequence[Mapping[str, Any]]], j: int) -> str:
    """What the agent sends back as its assistant message after call ``j`` ("" at the end)."""
    if j + 1 >= len(requests):
        return ""
    following = requests[j + 1][len(requests[j])]
    return str(following.get("content") or "") if following.get("role") == "assistant" else ""


# ---------------------------------------------------------------------------
# The interleaving


Send = Callable[[int, int, Request], Awaitable[Sequence[Mapping[str, Any]]]]
Before = Callable[[int], Awaitable[None]]


async def interleave(
    agents: Sequence[ScriptedAgent], send: Send, before: Before | None = None
) -> list[int]:
    """Run the agents round-robin, one call each in turn, every call awaited: ``send(agent,
    n, request)`` makes overall call ``n`` and returns the messages the server received;
    ``before(n)`` runs before it (a restart). Returns the agent of every call, in order."""
    gens = [a.calls() for a in agents]
    pending: dict[int, Request] = {}
    for i, g in enumerate(gens):
        try:
            pending[i] = next(g)
        except StopIteration:
            continue
    order: list[int] = []
    while pending:
        for i in sorted(pending):
            if before is not None:
                await before(len(order))
            sent = await send(i, len(order), pending[i])
            order.append(i)
            try:
                pending[i] = gens[i].send(sent)
            except StopIteration:
                del pending[i]
    return order


# ---------------------------------------------------------------------------
# Models and server modes


@dataclass(frozen=True)
class Model:
    key: str
    name: str


MODELS = {
    "swa": Model("swa", "Gemma 3 270M Q4_K_M (sliding window 512 on 15 of 18 layers)"),
    "full": Model(
        "full", "tiny llama, full attention, Gemma's tokenizer (RANDOM weights: cache only)"
    ),
}
FULL_MODEL_FILE = "llama-tiny-random.gguf"
BUILDER = ROOT / "scripts" / "build-full-attention-model.py"


def python_with_gguf(cache_dir: Path) -> Path | None:
    """A Python with the gguf package: vLLM's environment, else a small venv of its own."""
    for exe in [*sorted(cache_dir.glob("vllm/*/bin/python")), cache_dir / "gguf-venv/bin/python"]:
        if exe.is_file():
            done = subprocess.run([str(exe), "-c", "import gguf"], capture_output=True, check=False)
            if done.returncode == 0:
                return exe
    return None


def model_path(key: str, settings: Settings) -> Path:
    """The model file; the full-attention one is built on first use.

    The full-attention model is served under the packaged model's file name (a link in
    a folder of its own): the launcher gives that name the packaged model's chat
    template, so both models' servers render the same prompts into the same tokens
    (one tokenizer), whichever template the launcher picks."""
    packaged = ensure_model(settings)
    if key == "swa":
        return packaged
    built = settings.cache_dir / "models" / FULL_MODEL_FILE
    if not built.is_file():
        py = python_with_gguf(settings.cache_dir)
        if py is None:
            raise ValueError(
                f"{built} is missing and no Python with gguf was found: run scripts/setup-tests, "
                f"or `python -m venv {settings.cache_dir}/gguf-venv && "
                f"{settings.cache_dir}/gguf-venv/bin/pip install gguf==0.19.0`"
            )
        subprocess.run([str(py), str(BUILDER), str(packaged), str(built)], check=True)
    named = settings.cache_dir / "models" / "full-attention" / MODEL_FILE
    if not named.is_file():
        named.parent.mkdir(parents=True, exist_ok=True)
        named.symlink_to(built)
    return named


@dataclass(frozen=True)
class Mode:
    key: str  # advice | default
    name: str
    swa_full: bool
    cram: int | None  # None: scaled (ram_scaling)


MODES = {
    "advice": Mode("advice", "the probe's advice (--swa-full -cram 0)", True, 0),
    "default": Mode("default", "the server's defaults, -cram scaled", False, None),
}


def flags_for(mode: Mode, np_: int, window: int, cram: int, saves: Path) -> ServerFlags:
    return ServerFlags(
        ctx=window * np_,
        parallel=np_,
        swa_full=mode.swa_full,
        cache_ram=cram,
        slot_save_path=saves,
    )


# ---------------------------------------------------------------------------
# One strategy's run


def call_of(agent: int, n: int, req: Request, r: httpx.Response, session: str | None) -> Call:
    if r.status_code != 200:
        failed = f"{r.status_code}: {r.text[:160]}"
        return Call(agent, n, req.turn, req.step, 0, 0, 0, failed, session)
    rep = read_report(r.json())
    reused, processed = rep.reused or 0, rep.processed or 0
    return Call(agent, n, req.turn, req.step, reused + processed, reused, processed, None, session)


Restart = Callable[[], None]


def restarter(at: int | None, restart: Restart, say: Callable[[str], None]) -> Before:
    async def before(n: int) -> None:
        if n == at:
            say(f"restarting the server before call {n}")
            await asyncio.to_thread(restart)

    return before


async def run_direct(
    url: str,
    agents: Sequence[Agent],
    before: Before,
    said: bool,
    progress: Callable[[Call], None],
) -> list[Call]:
    """straight (``said`` False) or through hearth (True: each request carries the agent's
    next assistant content for hearth's relay)."""
    expected = [dry_requests(a.session) for a in agents]
    counts = [0] * len(agents)
    calls: list[Call] = []
    async with httpx.AsyncClient(base_url=url, timeout=1800.0) as c:

        async def send(i: int, n: int, req: Request) -> Sequence[Mapping[str, Any]]:
            j = counts[i]
            counts[i] += 1
            messages = plain(req.messages)
            if messages != expected[i][j]:
                raise RuntimeError(f"{agents[i].name}: call {j} is not the unmanaged script's")
            body = {**CHAT, "tools": agents[i].session.tools, "messages": messages}
            if said:
                body[hearth.SAID] = next_said(expected[i], j)
            r = await c.post(CHAT_PATH, json=body)
            calls.append(call_of(i, n, req, r, None))
            progress(calls[-1])
            return req.messages

        await interleave([ScriptedAgent(a.session) for a in agents], send, before)
    return calls


async def run_sakur4(
    url: str,
    agents: Sequence[Agent],
    before: Before,
    settings: Settings,
    workdir: Path,
    progress: Callable[[Call], None],
) -> list[Call]:
    """One gateway for all agents, each its own session; each call's receipt's session."""
    (workdir / "project").mkdir(parents=True, exist_ok=True)
    s = settings.model_copy(
        update={
            "store": workdir / "sakur4.db",
            "project": workdir / "project",
            "backend": url,
            "gateway_port": 0,
        }
    )
    calls: list[Call] = []
    receipt_of: list[int | None] = []
    with running_gateway(s) as gw:
        store = open_store(s.store)
        try:
            project = ensure_project(store, s.project_root())
            refetch = fold_refetch(store, project.id)
            async with httpx.AsyncClient(base_url=gw.url, timeout=1800.0) as c:

                async def send(i: int, n: int, req: Request) -> Sequence[Mapping[str, Any]]:
                    name = agents[i].name
                    if req.pin:  # as an agent pins it through the MCP tool
                        pin_anchor(store, project.id, req.pin, priority=10, session=name)
                    before_sent = len(gw.spy.sent)
                    body = {
                        **CHAT,
                        "tools": agents[i].session.tools,
                        "messages": plain(req.messages),
                    }
                    r = await c.post(CHAT_PATH, json=body, headers={"X-Sakur4-Session": name})
                    rid = r.headers.get("x-sakur4-receipt")
                    receipt_of.append(int(rid) if rid else None)
                    calls.append(call_of(i, n, req, r, None))
                    progress(calls[-1])
                    sent = gw.spy.sent[before_sent:]
                    return sent[-1]["messages"] if sent else req.messages

                await interleave([ScriptedAgent(a.session, refetch) for a in agents], send, before)
            receipts = {r.id: r for r in list_receipts(store, project.id, limit=100_000)}
        finally:
            store.close()
    return [
        replace(c, session=receipts[rid].session if rid in receipts else None)
        for c, rid in zip(calls, receipt_of, strict=True)
    ]


async def run_one(
    spec: RunSpec,
    agents: Sequence[Agent],
    settings: Settings,
    model: Path,
    say: Callable[[str], None],
) -> Run:
    """One strategy on a fresh server of the spec's model, mode and slots."""
    mode = MODES[spec.mode]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sakur4-agents-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        saves = work / "slots"
        saves.mkdir()
        flags = flags_for(mode, spec.np_, spec.window, spec.cram, saves)
        server = LlamaServer(
            find_llama_server(settings), model, flags, log_path=work / "server.log"
        )
        stack.enter_context(server)
        done = 0

        def progress(c: Call) -> None:
            nonlocal done
            done += 1
            if done % 10 == 0:
                say(f"{spec.strategy}: {done} calls, last {c.processed:,}/{c.prompt_tokens:,}")

        def restart() -> None:
            server.stop()
            server.start()

        before = restarter(spec.restart_at, restart, say)
        if spec.strategy == "sakur4":
            calls = await run_sakur4(server.url, agents, before, settings, work, progress)
        elif spec.strategy == "hearth":
            relay = stack.enter_context(hearth.answer_relay(server.url))
            via = stack.enter_context(
                hearth.proxy(settings.cache_dir, relay, saves, work / "hearth.log")
            )
            calls = await run_direct(via, agents, before, True, progress)
        else:
            calls = await run_direct(server.url, agents, before, False, progress)
        meta = {
            "flags": flags.args(model),
            "elapsed_s": round(time.monotonic() - started, 1),
            "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }
    return Run(spec, [a.name for a in agents], calls, meta)


async def prompt_sizes(
    url: str, agents: Sequence[Agent], settings: Settings, last_only: bool = True
) -> list[list[int]]:
    """Each agent's unmanaged prompts (its last only, or every call's), in tokens by the
    server's template and tokenizer."""
    client = open_backend("llama.cpp", url, settings, None)
    try:
        layouts = token_layouts(client)
        out = []
        for a in agents:
            requests = dry_requests(a.session)
            sizes = []
            for messages in requests[-1:] if last_only else requests:
                body = {**CHAT, "tools": a.session.tools, "messages": messages}
                sizes.append(len((await layouts.layout(body)).tokens))
            out.append(sizes)
        return out
    finally:
        await client.aclose()


async def print_ceiling(a: argparse.Namespace, settings: Settings) -> None:
    """The ceiling of the plan's agents (no run: the tokenizer only), for sessions
    longer than the runs': what a perfect cache would reuse of each agent's prompts."""
    agents = make_agents(a.agents, a.turns, a.size)
    with _measuring_server(settings, ensure_model(settings), a.window) as m:
        sizes = await prompt_sizes(m.url, agents, settings, last_only=False)
    calls = [Call(i, 0, 0, j, n, 0, n) for i, per in enumerate(sizes) for j, n in enumerate(per)]
    spec = RunSpec("-", "-", 1, "straight", a.window, 0, None)
    best = ceiling(Run(spec, [x.name for x in agents], calls))
    print(
        f"ceiling, {a.agents} agents x {a.turns} turns of {a.size} (last prompts "
        f"{', '.join(f'{per[-1]:,}' for per in sizes)} tokens): "
        + ", ".join(f"{x.name} {b.reuse:.1%}" for x, b in zip(agents, best, strict=True))
    )


# ---------------------------------------------------------------------------
# Kept runs


def plan_key(a: argparse.Namespace) -> str:
    blob = json.dumps(
        {"k": a.agents, "turns": a.turns, "size": a.size, "window": a.window, "v": 2},
        sort_keys=True,
    )
    digest = hashlib.sha256(blob.encode()).hexdigest()[:6]
    return f"k{a.agents}-t{a.turns}-{a.size}-w{a.window}-{digest}"


def run_file(plan: str, spec: RunSpec) -> Path:
    tail = f"-restart{spec.restart_at}" if spec.restart_at is not None else ""
    name = f"{spec.model}-{spec.mode}-np{spec.np_}-{spec.strategy}{tail}.json"
    return OUT / "agents" / plan / name


def save(path: Path, run: Run) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(run), indent=1))


def load(path: Path) -> Run:
    raw = json.loads(path.read_text())
    return Run(
        RunSpec(**raw["spec"]), raw["agents"], [Call(**c) for c in raw["calls"]], raw["meta"]
    )


def kept(plan: str) -> list[Run]:
    order = {s: i for i, s in enumerate(STRATEGIES)}
    runs = [load(p) for p in sorted((OUT / "agents" / plan).glob("*.json"))]
    return sorted(
        runs,
        key=lambda r: (
            r.spec.model, r.spec.restart_at or 0, r.spec.mode, r.spec.np_,
            order.get(r.spec.strategy, 9),
        ),
    )  # fmt: skip


# ---------------------------------------------------------------------------


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--agents", type=int, default=4, help="K: the main session and K-1 subagents")
    p.add_argument("--turns", type=int, default=8, help="turns of each agent's session")
    p.add_argument("--size", default="demo", help="the script preset the agents are drawn from")
    p.add_argument("--window", type=int, default=4096, help="each slot's window (-c / -np)")
    p.add_argument("--models", default="full,swa", help=", ".join(MODELS))
    p.add_argument("--modes", default="advice,default", help=", ".join(MODES))
    p.add_argument("--np", default="1,2", help="slot counts")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help=", ".join(STRATEGIES))
    p.add_argument("--restart-at", type=int, default=None, help="restart before this call")
    p.add_argument("--rerun", action="store_true", help="run again even if a kept run exists")
    p.add_argument("--table-only", action="store_true", help="run nothing; print the tables")
    p.add_argument("--ceiling", action="store_true", help="run nothing; print the agents' ceiling")
    return p.parse_args(argv)


def _split(text: str, known: Mapping[str, object] | Sequence[str]) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in known]
    if bad:
        raise ValueError(f"unknown {', '.join(bad)} (one of {', '.join(known)})")
    return out


@contextmanager
def _measuring_server(settings: Settings, model: Path, window: int) -> Iterator[LlamaServer]:
    flags = ServerFlags(ctx=max(window, 32768), cache_ram=0)
    with LlamaServer(find_llama_server(settings), model, flags) as server:
        yield server


async def run_missing(a: argparse.Namespace, plan: str, settings: Settings) -> list[str]:
    """Run every (model, mode, slots, strategy) not kept yet; returns the scaling lines."""
    started = time.monotonic()

    def say(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.0f}s] {msg}", flush=True)

    agents = make_agents(a.agents, a.turns, a.size)
    notes = []
    for model_key in _split(a.models, MODELS):
        model = model_path(model_key, settings)
        shape = kv_shape(gguf_metadata(model))
        with _measuring_server(settings, model, a.window) as m:
            sizes = [per[-1] for per in await prompt_sizes(m.url, agents, settings)]
        over = [f"{ag.name} {n:,}" for ag, n in zip(agents, sizes, strict=True) if n > a.window]
        notes.append(
            f"{model_key}: the agents' last prompts {', '.join(f'{n:,}' for n in sizes)} tokens; "
            f"KV {shape.per_token_full + shape.per_token_swa:,} bytes a token in all layers "
            f"(GGUF metadata, f16)"
            + (f"; past the {a.window:,} window: {', '.join(over)}" if over else "")
        )
        for mode_key in _split(a.modes, MODES):
            mode = MODES[mode_key]
            scaling = ram_scaling(shape, max(sizes), mode.swa_full)
            cram = scaling.cram_mib if mode.cram is None else mode.cram
            if mode.cram is None:
                notes.append(f"{model_key}, {mode_key}: {scaling.describe()}")
            for np_ in [int(x) for x in a.np.split(",") if x.strip()]:
                for strategy in _split(a.strategies, STRATEGIES):
                    spec = RunSpec(model_key, mode_key, np_, strategy, a.window, cram, a.restart_at)
                    path = run_file(plan, spec)
                    label = f"[{model_key} {mode_key} -np {np_} {strategy}]"
                    if strategy == "hearth" and (why := hearth.absent(settings.cache_dir)):
                        say(f"{label} skipped: {why}")
                        continue
                    if path.is_file() and not a.rerun:
                        say(f"{label} kept: {path.name}")
                        continue
                    say(f"{label} running")
                    run = await run_one(spec, agents, settings, model, say)
                    run.meta["session_tokens"] = sizes
                    run.meta["scaling"] = scaling.describe() if mode.cram is None else None
                    save(path, run)
                    t = total(run)
                    say(
                        f"{label} {t.processed:,} processed of {t.prompt:,} ({t.reuse:.1%} "
                        f"reused), {t.failed} failed, {run.meta['elapsed_s']} s"
                    )
    return notes


def document(plan: str, runs: Sequence[Run], notes: Sequence[str]) -> str:
    parts = [f"# Many agents on one server: {plan}", "", *[f"- {n}" for n in notes], ""]
    parts += [table(runs), "", *[f"- {g}" for g in goals(runs)]]
    return "\n".join(parts) + "\n"


async def main(argv: Sequence[str]) -> int:
    a = parse(argv)
    plan = plan_key(a)
    notes: list[str] = []
    try:
        settings = Settings.load()
        if a.ceiling:
            await print_ceiling(a, settings)
            return 0
        if not a.table_only:
            notes = await run_missing(a, plan, settings)
    except (ValueError, Sakur4Error, RuntimeError) as e:
        print(f"bench/agents.py: {e}", file=sys.stderr)
        return 2
    runs = kept(plan)
    if not runs:
        print(f"bench/agents.py: no kept runs for {plan}", file=sys.stderr)
        return 1
    if not notes:  # --table-only: the scaling each kept run was made with
        notes = sorted(
            {
                f"{r.spec.model}, {r.spec.mode}: {r.meta['scaling']}"
                for r in runs
                if r.meta.get("scaling")
            }
        )
    text = document(plan, runs, notes)
    print("\n" + text)
    out = OUT / f"agents-{plan}.md"
    out.write_text(text)
    print(f"table: {out}")
    return 0


if __name__ == "__main__":
    stoppable()
    try:
        sys.exit(asyncio.run(main(sys.argv[1:])))
    except KeyboardInterrupt:
        print("bench/agents.py: interrupted; the runs finished so far are kept", file=sys.stderr)
        sys.exit(130)
