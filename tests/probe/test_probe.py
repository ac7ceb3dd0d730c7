"""The probe against real llama-servers: the issue's done-when, one mode per test."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sakur4.backends.launcher import LlamaServer, free_port
from sakur4.backends.ring import FULL_ATTENTION
from sakur4.cli import cli
from sakur4.probe import ProbeResult, latest_probe, probe, save_probe
from sakur4.settings import Settings
from sakur4.store import Store, open_store


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert "Traceback" not in result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.mark.backend
def test_cli_probe_of_the_ring_server_is_recorded(
    llama_ring: LlamaServer, store_path: Path
) -> None:
    code, out = invoke("--store", str(store_path), "probe", llama_ring.url, "--json")
    assert code == 0
    got = json.loads(out)
    assert got["kind"] == "llama.cpp"
    assert got["version"].startswith("b11434")
    assert got["n_ctx"] == 8192
    assert got["total_slots"] == 1
    assert got["slot_actions"] == "unsupported"  # no --slot-save-path
    assert got["exact_tokenization"] is True
    assert got["reuse_verifiable"] is True
    assert got["reuse_field"] == "timings.cache_n"
    assert got["checkpoint_source"] == "checkpoint-ring"
    assert got["source_class"] == "detected"
    middle = next(s for s in got["experiment"] if s["name"] == "middle")
    assert middle["reused"] < middle["divergence"]  # snapped back
    assert middle["reused"] == middle["ring_predicted"]
    assert any("-cms" in a for a in got["advice"])

    store = open_store(store_path)
    try:
        stored = latest_probe(store, llama_ring.url + "/v1/")  # same server, OpenAI-style URL
    finally:
        store.close()
    assert stored is not None
    assert json.loads(json.dumps(stored.as_dict())) == got
    assert stored.probed_at.endswith("Z")


@pytest.mark.backend
def test_swa_full_reuses_exact_prefixes_and_restored_slots(llama_swa_full: LlamaServer) -> None:
    r: ProbeResult = run(probe(llama_swa_full.url, Settings.load()))
    assert r.checkpoint_source == "exact-prefix"
    assert r.source_class == "detected"
    assert r.n_ctx == 8192
    assert r.reuse_verifiable
    middle = next(s for s in r.experiment if s.name == "middle")
    assert middle.reused == middle.divergence
    assert r.checkpoint_rules() == FULL_ATTENTION
    # With a full-size SWA cache a restored slot state does resume: tested, not assumed.
    assert r.slot_actions == "supported"
    assert r.sources == ("exact-prefix", "slot-restore")
    restore = next(s for s in r.experiment if s.name == "restore")
    assert restore.reused == restore.divergence


@pytest.mark.backend
def test_slot_save_path_enables_slot_actions_but_a_restore_does_not_resume(
    llama_slots: LlamaServer,
) -> None:
    r: ProbeResult = run(probe(llama_slots.url, Settings.load()))
    assert r.slot_actions == "supported"
    assert r.checkpoint_source == "checkpoint-ring"
    assert "slot-restore" not in r.sources
    restore = next(s for s in r.experiment if s.name == "restore")
    assert restore.reused == 0  # a restored sliding-window state re-prefills in full
    assert "did not resume" in r.reason


@pytest.mark.backend
def test_quick_probe_reads_reuse_from_a_tiny_chat(llama_ring: LlamaServer) -> None:
    r: ProbeResult = run(probe(llama_ring.url, Settings.load(), experiment=False))
    assert r.experiment == ()
    assert r.checkpoint_source == "uncertain"
    assert r.source_class == "uncertain"
    assert r.reuse_verifiable
    assert r.reuse_field == "timings.cache_n"


def test_probe_results_round_trip_and_the_newest_wins(store: Store) -> None:
    first = ProbeResult.from_dict(
        {
            "url": "http://127.0.0.1:8080",
            "probed_at": "2026-11-30T10:00:00.000000Z",
            "kind": "llama.cpp",
            "version": "b11434-unknown",
            "model": "m.gguf",
            "n_ctx": 8192,
            "n_ctx_train": 32768,
            "total_slots": 1,
            "slot_actions": "unsupported",
            "exact_tokenization": True,
            "reuse_verifiable": True,
            "reuse_field": "timings.cache_n",
            "checkpoint_source": "checkpoint-ring",
            "sources": ["checkpoint-ring"],
            "reason": "r",
            "experiment": [
                {
                    "name": "cold",
                    "prompt_tokens": 64,
                    "divergence": 0,
                    "reused": 0,
                    "processed": 64,
                    "prompt_ms": 5.0,
                    "ring_predicted": 0,
                }
            ],
            "prefill_tokens_per_s": 250.0,
            "advice": ["a"],
            "source_class": "detected",
        }
    )
    save_probe(store, first)
    second = ProbeResult.from_dict({**first.as_dict(), "checkpoint_source": "exact-prefix"})
    save_probe(store, second)
    got = latest_probe(store, "http://127.0.0.1:8080/")
    assert got == second
    assert latest_probe(store, "http://127.0.0.1:9999") is None
    rows = store.query("SELECT count(*) FROM backend_probe")
    assert rows[0][0] == 2  # history is kept


def test_probe_without_a_url_is_one_line_and_exit_1(store_path: Path) -> None:
    code, out = invoke("--store", str(store_path), "probe")
    assert code == 1
    assert "SAKUR4_BACKEND" in out


def test_probe_of_a_dead_server_is_one_line_and_exit_1(store_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out = invoke("--store", str(store_path), "probe", url)
    assert code == 1
    assert out.startswith("sakur4: error: backend http://127.0.0.1")
    assert "cannot connect" in out


# -- doctor -----------------------------------------------------------------------------


def doctor(store_path: Path, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    code, out = invoke("--store", str(store_path), "doctor", "--json", env=env)
    return code, json.loads(out)


def lines(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [c for c in report["checks"] if c["name"] == name]


def test_doctor_without_a_backend_says_so(store_path: Path) -> None:
    _, report = doctor(store_path, {})
    (line,) = lines(report, "backend")
    assert line["level"] == "warn"
    assert "SAKUR4_BACKEND not set" in line["detail"]


def test_doctor_with_a_dead_backend_fails_cleanly(store_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, report = doctor(store_path, {"SAKUR4_BACKEND": url})
    assert code == 1
    (line,) = lines(report, "backend")
    assert line["level"] == "fail"
    assert url in line["detail"]


@pytest.mark.backend
def test_doctor_reports_the_backend_and_its_last_probe(
    llama_ring: LlamaServer, store: Store, store_path: Path
) -> None:
    measured = ProbeResult.from_dict(
        {
            **run(probe(llama_ring.url, Settings.load(), experiment=False)).as_dict(),
            "checkpoint_source": "checkpoint-ring",
            "reason": "reuse snapped back to earlier checkpoints",
            "advice": ["start with -cms 512"],
        }
    )
    save_probe(store, measured)
    code, report = doctor(store_path, {"SAKUR4_BACKEND": llama_ring.url})
    # The failing checks in the message: a full CI run once saw 1 here and nothing else.
    assert code == 0, [c for c in report.checks if c.level == "fail"]
    (line,) = lines(report, "backend")
    assert line["level"] == "ok"
    assert "llama.cpp" in line["detail"]
    assert "n_ctx 8192" in line["detail"]
    (ck,) = lines(report, "checkpoints")
    assert ck["level"] == "ok"
    assert "checkpoint-ring (detected" in ck["detail"]
    assert [a["detail"] for a in lines(report, "advice")] == ["start with -cms 512"]
