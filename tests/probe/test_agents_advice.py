"""The advice for several agents on one server (issue 37 item 5), per model kind, for
1, 2 and 4 agents: probe results built by hand (the model kinds the real probe found,
docs/design/backends.md), the real llama-server's own probe printed by `sakur4 probe
--agents 4`, and what `sakur4 wrap` says from the store."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from probe_results import probe_result
from sakur4.backends.agents_advice import SLOT_DIR, for_agents, model_of
from sakur4.backends.experiment import ExperimentStep
from sakur4.backends.launcher import LlamaServer
from sakur4.cli import cli
from sakur4.probe import ProbeResult, _with_stored, latest_probe, save_probe, with_advice
from sakur4.store import open_store
from sakur4.wrap.agents import SUBAGENTS_COUNT, agents_notes

WINDOW = 8192
# The probe's restore step on Gemma 3 270M under --swa-full: 392 tokens saved.
SAVED = ExperimentStep("restore", 408, 392, 392, 16, 1.0, None, saved_bytes=4_312_000)
STEPS = (SAVED,)

FULL = probe_result(
    n_ctx=WINDOW,
    checkpoint_source="exact-prefix",
    sources=("exact-prefix", "slot-restore"),
    slot_actions="supported",
    experiment=STEPS,
)
RING = probe_result(n_ctx=WINDOW, checkpoint_source="checkpoint-ring", sources=("checkpoint-ring",))
RECURRENT = replace(
    RING,
    recurrent_memory=True,
    slot_actions="supported",
    sources=("checkpoint-ring", "slot-restore"),
    experiment=(replace(SAVED, saved_bytes=1_600_000),),
)
NONE = probe_result(n_ctx=WINDOW, checkpoint_source="none", sources=())
UNKNOWN = probe_result(n_ctx=WINDOW, checkpoint_source="uncertain", sources=())
KINDS = {"full": FULL, "ring": RING, "recurrent": RECURRENT, "none": NONE, "unknown": UNKNOWN}


def advised(r: ProbeResult, agents: int) -> str:
    return "\n".join(with_advice(r, agents).advice)


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_model_kind_is_read_as_measured(kind: str) -> None:
    assert model_of(KINDS[kind]) == kind


@pytest.mark.parametrize("kind", list(KINDS))
def test_one_agent_gets_no_several_agent_lines(kind: str) -> None:
    r = with_advice(KINDS[kind], 1)
    assert r.agents == 1
    assert for_agents(r) == ()
    assert "-np " not in "\n".join(r.advice)


def test_one_agent_on_the_ring_is_told_its_advice_is_for_one_agent_alone() -> None:
    """The issue: `--swa-full -cram 0` for one agent made two interleaved agents on one
    slot re-process their whole prompt at every switch."""
    text = advised(RING, 1)
    assert "`--swa-full -cram 0`" in text
    assert "for one agent alone" in text
    assert "subagents" in text
    assert "`sakur4 probe --agents N`" in text


@pytest.mark.parametrize("agents", [2, 4])
def test_full_attention_gets_a_slot_each_or_parking_and_a_ram_cache_sized_for_all(
    agents: int,
) -> None:
    text = advised(FULL, agents)
    fewer = agents // 2
    assert f"`-np {agents} -c {WINDOW * agents} --slot-save-path {SLOT_DIR} -cram 0`" in text
    assert "a restarted server resumes it from disk" in text
    assert f"`-np {fewer} -c {WINDOW * fewer} --slot-save-path {SLOT_DIR} -cram 0`" in text
    assert "resumes at any divergence" in text
    assert "slot save/restore is on and the probe's restored state resumed)" in text
    # Disk from the probe's own saved state: 4,312,000 / 392 = 11 kB a token.
    assert "up to 11.0 kB a token" in text
    assert "90.1 MB at most at the full window" in text
    assert "plaintext transcript" in text
    assert f"mkdir -m 700 {SLOT_DIR}" in text
    # The RAM cache: only if it holds them all, with the figure.
    need = 4_312_000 / 392 * WINDOW * agents / 1e6
    assert f"{agents} × 8,192 tokens × 11.0 kB = {need:.1f} MB at most" in text
    assert "misses at every" in text
    # Slot actions off: said once, in the agents' lines, not as the one-agent line too.
    off = advised(replace(FULL, slot_actions="unsupported", sources=("exact-prefix",)), agents)
    assert "; slot save/restore is off on this server now)" in off
    assert "start with `--slot-save-path DIR`" not in off


@pytest.mark.parametrize("agents", [2, 4])
def test_the_ring_gets_a_slot_each_and_is_told_slot_files_do_not_help(agents: int) -> None:
    text = advised(RING, agents)
    assert f"`-np {agents} -c {WINDOW * agents} -cms 512 -cram 0`" in text
    assert "`--slot-save-path` does not help here" in text
    fewer = agents // 2
    assert f"`-np {fewer} -c {WINDOW * fewer} --swa-full --slot-save-path {SLOT_DIR} -cram 0`" in (
        text
    )
    # The one-agent line's alternative is not repeated against the agents' lines.
    assert "`--swa-full -cram 0`" not in text
    assert "not a loss here" not in text
    assert "57 kB a token" in text  # no saved state of this model: the rule of thumb


@pytest.mark.parametrize("agents", [2, 4])
def test_a_recurrent_model_gets_a_slot_each_and_slot_files_for_exact_ends_only(
    agents: int,
) -> None:
    text = advised(RECURRENT, agents)
    assert f"`-np {agents} -c {WINDOW * agents} -cms 512 -cram 0`" in text
    assert "#22942" in text
    assert "resumes at its exact end" in text
    assert "1.6 MB for 392 tokens" in text
    assert "sliding-window model on its checkpoint ring" not in text


@pytest.mark.parametrize("agents", [2, 4])
def test_no_resume_and_not_measured_get_a_slot_each(agents: int) -> None:
    assert f"`-np {agents} -c {WINDOW * agents}`" in advised(NONE, agents)
    unknown = advised(UNKNOWN, agents)
    assert f"`-np {agents} -c {WINDOW * agents}`" in unknown
    assert f"`sakur4 probe --agents {agents}` without --quick" in unknown


def test_the_servers_own_slots_are_weighed_against_the_agents() -> None:
    assert "this server has 1 slot: the agents take turns on it" in advised(FULL, 2)
    four = replace(FULL, total_slots=4)
    assert "this server's 4 slots already give each agent one" in advised(four, 4)
    assert "this server has 4 slots: the agents take turns on them" in advised(four, 8)


def test_an_unknown_window_is_named_not_invented() -> None:
    text = advised(replace(RING, n_ctx=None), 4)
    assert "`-np 4 -c 4×WINDOW -cms 512 -cram 0`" in text


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("vllm", "GPU KV cache size"),
        ("sglang", "--mem-fraction-static"),
        ("ollama", "OLLAMA_NUM_PARALLEL=4 OLLAMA_CONTEXT_LENGTH=8192"),
        ("lmstudio", "Max Concurrent Predictions 4"),
        ("tabbyapi", "4 sequences at once, 4 × 8,192 = 32,768 tokens"),
    ],
)
def test_other_server_kinds_are_advised_by_their_own_setting(kind: str, said: str) -> None:
    r = replace(NONE, kind=kind, slot_actions="unknown")
    assert for_agents(replace(r, agents=1)) == ()
    lines = for_agents(replace(r, agents=4))
    assert any(said in line for line in lines), lines
    assert not any("-np " in line for line in lines)


def test_the_agents_and_their_advice_are_stored_and_kept_by_a_stored_probe() -> None:
    four = with_advice(FULL, 4)
    back = ProbeResult.from_dict(json.loads(json.dumps(four.as_dict())))
    assert back.agents == 4
    assert back.advice == four.advice
    assert back.experiment[0].saved_bytes == 4_312_000
    # A gateway planning with a stored probe advises for its own count (one).
    quick = replace(FULL, checkpoint_source="uncertain", sources=(), experiment=())
    assert _with_stored(quick, four).agents == 1


def test_wrap_says_subagents_count_and_advises_from_the_stored_probe(store_path: Path) -> None:
    assert agents_notes(store_path, FULL.url, 1) == [SUBAGENTS_COUNT]
    missing = agents_notes(store_path, FULL.url, 4)
    assert missing == [
        f"for 4 agents: no probe of {FULL.url} is stored yet: run "
        f"`sakur4 probe {FULL.url} --agents 4` when it is quiet"
    ]
    store = open_store(store_path)
    try:
        save_probe(store, with_advice(FULL, 1))
    finally:
        store.close()
    notes = agents_notes(store_path, FULL.url + "/v1/", 4)  # the URL as a gateway has it
    assert notes == list(for_agents(replace(FULL, agents=4)))
    assert any(f"`-np 4 -c 32768 --slot-save-path {SLOT_DIR} -cram 0`" in n for n in notes)


def test_agents_out_of_range_is_one_line_refusal() -> None:
    for command in (["probe", "--agents", "0"], ["wrap", "--agents", "0", "claude"]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 2
        assert "--agents" in result.output
        assert "Traceback" not in result.output


@pytest.mark.backend
def test_cli_probe_for_four_agents_on_the_real_server(
    llama_swa_full: LlamaServer, store_path: Path
) -> None:
    """`sakur4 probe --agents 4` on the real llama-server (Gemma 3 270M, --swa-full,
    --slot-save-path, -c 8192 -np 1): the several-agent advice, its disk figure from the
    state the probe itself saved."""
    result = CliRunner().invoke(
        cli, ["--store", str(store_path), "probe", llama_swa_full.url, "--agents", "4"]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "advice: for 4 agents (every subagent and every terminal" in out
    assert f"`-np 4 -c 32768 --slot-save-path {SLOT_DIR} -cram 0`" in out
    assert f"`-np 2 -c 16384 --slot-save-path {SLOT_DIR} -cram 0`" in out
    assert "this server has 1 slot: the agents take turns on it" in out
    assert "slot save/restore is on and the probe's restored state resumed)" in out
    assert "kB a token for each session's file" in out  # measured, not the rule of thumb
    assert "the probe's saved state: 392 tokens" in out
    store = open_store(store_path)
    try:
        stored = latest_probe(store, llama_swa_full.url)
    finally:
        store.close()
    assert stored is not None
    assert stored.agents == 4
    restore = next(s for s in stored.experiment if s.name == "restore")
    assert restore.saved_bytes
    assert restore.saved_bytes > restore.divergence * 1000
