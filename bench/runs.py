"""Per-strategy result files: one JSON per (script + seed, server mode, strategy, figures).

    bench/out/runs/<script key>/<mode>/<real|sim>/<strategy>[@<engine>].json

The script key names the generator's parameters, the seed and the Python whose
standard library the text comes from (:attr:`ScriptParams.key`). A Sakur4 run also
carries the engine's version: the git tree ids of ``src/sakur4/engine``, the turn
pipeline ``src/sakur4/turns`` and ``src/sakur4/gateway`` (with a hash of uncommitted
changes to them), so a planner or pipeline change makes new Sakur4 runs while the
simple policies' runs stay valid. A peer's run (the harnesses' own policies) carries
the version of ``src/sakur4/demo/peers.py`` the same way: a peer read again from a
newer release is a new policy, and its old runs were shown beside the new ones as if
current (OpenCode 1.18's ring and KV-shifting rows kept an earlier reading's 19
compactions where the current one makes 8). Tables are assembled from whatever runs
exist for a script and mode.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sakur4.demo.records import StrategyRun

ROOT = Path(__file__).resolve().parent.parent
RUNS = Path(__file__).resolve().parent / "out" / "runs"
ENGINE_DIRS = ("src/sakur4/engine", "src/sakur4/turns", "src/sakur4/gateway")
PEERS_FILES = ("src/sakur4/demo/peers.py",)
# The strategies whose policy is src/sakur4/demo/peers.py (bench/strategies.py).
PEER_KINDS = frozenset({"opencode", "opencode-1.18", "claude-code", "claude-code-2.1"})


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def _version(paths: tuple[str, ...]) -> str:
    """``paths`` as committed (git object ids), plus a hash of any uncommitted change."""
    trees = [_git("rev-parse", f"HEAD:{d}")[:8] or "nogit" for d in paths]
    diff = _git("diff", "HEAD", "--", *paths)
    dirty = f"+{hashlib.sha256(diff.encode()).hexdigest()[:6]}" if diff else ""
    return "-".join(trees) + dirty


def engine_version() -> str:
    """The engine and gateway as committed (tree ids), plus any uncommitted change."""
    return _version(ENGINE_DIRS)


def policy_version(kind: str) -> str | None:
    """The version a run of a strategy of ``kind`` is kept under: the engine's for
    Sakur4, the peers' file's for a peer, None for the simple policies and the
    baseline (their code is taken as settled: change it, and run them with --rerun)."""
    if kind == "sakur4":
        return engine_version()
    if kind in PEER_KINDS:
        return "peers-" + _version(PEERS_FILES)
    return None


def is_current(key: RunKey) -> bool:
    """Whether a kept run is of the policy as it is now (a Sakur4 run of this engine, a
    peer's of this peers file; the simple policies' runs always are)."""
    if key.strategy in PEER_KINDS:
        return key.engine == policy_version(key.strategy)
    return key.engine is None or key.engine == engine_version()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "_", text)


@dataclass(frozen=True, slots=True)
class RunKey:
    script: str
    mode: str
    strategy: str  # Strategy.key
    simulated: bool
    engine: str | None = None  # the policy's version (policy_version): Sakur4, peers

    def path(self, root: Path = RUNS) -> Path:
        tail = f"@{self.engine}" if self.engine else ""
        kind = "sim" if self.simulated else "real"
        return root / self.script / self.mode / kind / f"{_slug(self.strategy)}{tail}.json"


def save(key: RunKey, run: StrategyRun, meta: Mapping[str, Any], root: Path = RUNS) -> Path:
    path = key.path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "key": {
            "script": key.script,
            "mode": key.mode,
            "strategy": key.strategy,
            "simulated": key.simulated,
            "engine": key.engine,
        },
        "meta": dict(meta),
        "run": run.as_dict(),
    }
    tmp = path.with_suffix(".partial")
    tmp.write_text(json.dumps(body, indent=1))
    tmp.replace(path)
    return path


@dataclass(frozen=True, slots=True)
class Stored:
    key: RunKey
    meta: Mapping[str, Any]
    run: StrategyRun
    path: Path


def load(path: Path) -> Stored:
    body = json.loads(path.read_text())
    k = body["key"]
    key = RunKey(k["script"], k["mode"], k["strategy"], k["simulated"], k.get("engine"))
    return Stored(key, body.get("meta", {}), StrategyRun.from_dict(body["run"]), path)


def stored(script: str, mode: str, root: Path = RUNS) -> list[Stored]:
    """Every run kept for ``script`` in ``mode``, oldest file first."""
    where = root / script / mode
    files = sorted(where.glob("*/*.json"), key=lambda p: p.stat().st_mtime)
    return [load(p) for p in files]


def find(key: RunKey, root: Path = RUNS) -> Stored | None:
    path = key.path(root)
    return load(path) if path.is_file() else None
