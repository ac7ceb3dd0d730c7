from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sakur4.cli import cli
from sakur4.receipts import Receipt, cache_verdict, list_receipts, reprefilled_tokens, write_receipt
from sakur4.store import Store
from sakur4.store.projects import Project


def make(project: Project, turn: int, **kw: object) -> Receipt:
    base: dict[str, object] = dict(
        project_id=project.id,
        session="s1",
        turn=turn,
        context_window=32768,
        prompt_tokens=12446,
        profile="cache-first",
        profile_reason="probe: checkpoint-ring",
        verdict="fits",
        cache_verdict="reused",
        server_cached=12000,
        server_processed=446,
    )
    base.update(kw)
    return Receipt(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cached", "processed", "verdict"),
    [
        (None, None, "unverifiable"),
        (None, 10, "unverifiable"),
        (5, None, "unverifiable"),
        (0, 900, "full-re-prefill"),
        (1, 899, "reused"),
        (8871, 46, "reused"),
    ],
)
def test_cache_verdict_comes_only_from_the_server(
    cached: int | None, processed: int | None, verdict: str
) -> None:
    assert cache_verdict(cached, processed) == verdict


def test_unverifiable_counts_as_full_re_prefill(project: Project) -> None:
    r = make(project, 1, cache_verdict="unverifiable", server_cached=None, server_processed=None)
    assert reprefilled_tokens(r) == r.prompt_tokens
    assert "unverifiable" in r.summary()
    assert reprefilled_tokens(make(project, 2)) == 446


def test_receipt_records_its_window(store: Store, project: Project) -> None:
    r = write_receipt(store, make(project, 1))
    assert r.id is not None
    got = list_receipts(store, project.id)[0]
    assert got.context_window == 32768
    assert got.pressure == pytest.approx(12446 / 32768)
    assert "12,446 of 32,768" in got.summary()


def test_a_receipt_without_a_window_is_refused(store: Store, project: Project) -> None:
    from sakur4.errors import InputError, StoreError

    with pytest.raises(InputError, match="context window"):
        make(project, 1, context_window=0)
    # The schema refuses it too, for any writer that bypasses the dataclass.
    with pytest.raises(StoreError, match=r"(?i)CHECK"), store.tx() as c:
        c.execute(
            "INSERT INTO receipt (session, turn, context_window, prompt_tokens, pressure, "
            "profile, profile_reason, verdict, cache_verdict) "
            "VALUES ('s', 1, 0, 5, 0, 'p', 'r', 'fits', 'reused')"
        )


def test_list_is_scoped_and_ordered(store: Store, project: Project, tmp_path: Path) -> None:
    from sakur4.store.projects import add_project

    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = add_project(store, other_dir)
    for t in (1, 2, 3):
        write_receipt(store, make(project, t))
    write_receipt(store, make(other, 1, session="elsewhere"))
    write_receipt(store, make(project, 1, session="s2"))
    assert [r.turn for r in list_receipts(store, project.id, session="s1")] == [1, 2, 3]
    assert {r.session for r in list_receipts(store, project.id)} == {"s1", "s2"}
    assert [r.turn for r in list_receipts(store, project.id, session="s1", limit=2)] == [2, 3]


def test_cli_table_and_json(store: Store, project: Project, store_path: Path) -> None:
    write_receipt(store, make(project, 1, requested_cut=9000, chosen_cut=8700, verdict="reclaimed"))
    write_receipt(
        store,
        make(project, 2, cache_verdict="unverifiable", server_cached=None, server_processed=None),
    )
    args = ["--store", str(store_path), "--project", str(project.root), "receipts"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert "12,446 of 32,768" in out.output
    assert "8,700 (asked 9,000)" in out.output
    assert "unverifiable" in out.output
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    assert [d["turn"] for d in data] == [1, 2]
    assert data[1]["reprefilled"] == 12446


def test_session_accepts_the_shortened_name_the_table_prints(
    store: Store, project: Project, store_path: Path
) -> None:
    # Issue 31, item 6: the table prints 12 characters, `--session` must take them back.
    long = "conv-4d5b6d9a1f2e3c4b5a69"
    write_receipt(store, make(project, 1, session=long))
    write_receipt(store, make(project, 1, session="conv-4d5b6d9zz-other"))
    write_receipt(store, make(project, 1, session="100%_literal"))
    args = ["--store", str(store_path), "--project", str(project.root), "receipts"]
    table = CliRunner().invoke(cli, args)
    assert long[:12] in table.output
    assert long not in table.output
    shown = CliRunner().invoke(cli, [*args, "--session", "conv-4d5b6d9a", "--json"])
    assert shown.exit_code == 0, shown.output
    assert [d["session"] for d in json.loads(shown.output)] == [long]
    # The exact name of a session that is also another's prefix is that session.
    write_receipt(store, make(project, 1, session="conv-4d5b6d9a"))
    exact = CliRunner().invoke(cli, [*args, "--session", "conv-4d5b6d9a", "--json"])
    assert {d["session"] for d in json.loads(exact.output)} == {"conv-4d5b6d9a"}
    ambiguous = CliRunner().invoke(cli, [*args, "--session", "conv-4d5b6d9"])
    assert ambiguous.exit_code == 1
    assert "'conv-4d5b6d9' starts more than one session" in ambiguous.output
    assert "Traceback" not in ambiguous.output
    unknown = CliRunner().invoke(cli, [*args, "--session", "conv-ffff"])
    assert unknown.exit_code == 1
    assert "no session of this project starts with 'conv-ffff'" in unknown.output
    # LIKE's wildcards are plain characters in a prefix.
    wild = CliRunner().invoke(cli, [*args, "--session", "100%", "--json"])
    assert [d["session"] for d in json.loads(wild.output)] == ["100%_literal"]
    assert CliRunner().invoke(cli, [*args, "--session", "1_0"]).exit_code == 1


def test_the_table_says_failed_in_flight_and_refused(
    store: Store, project: Project, store_path: Path
) -> None:
    unanswered = {"cache_verdict": "unverifiable", "server_cached": None, "server_processed": None}
    write_receipt(store, make(project, 1, **unanswered, detail={"failed": True}))
    write_receipt(store, make(project, 2, **unanswered), completed=False)
    write_receipt(store, make(project, 3, **unanswered, verdict="refused"))
    write_receipt(store, make(project, 4, **unanswered))
    args = ["--store", str(store_path), "--project", str(project.root), "receipts"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    head, *lines = out.output.splitlines()
    at, end = head.index("cache"), head.index("reused of prompt")
    cache = [line[at:end].strip() for line in lines]
    assert cache == ["failed", "in flight", "refused", "unverifiable"], out.output
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    assert [d["outcome"] for d in data] == ["failed", "in flight", "refused", "unverifiable"]
    assert [d["in_flight"] for d in data] == [False, True, False, False]


def test_a_receipt_read_back_from_its_dict_is_the_same(project: Project) -> None:
    """The demo reads its receipts back from the run's JSON: every figure ``as_dict`` adds
    (pressure, reprefilled, outcome) is derived, and reading must not trip on it."""
    r = make(project, 3, detail={"failed": True})
    assert Receipt.from_dict(json.loads(json.dumps(r.as_dict()))) == r


def test_the_detail_reads_back_typed(store: Store, project: Project) -> None:
    repair = {"kind": "billing-header", "saved_predicted": 40, "saved_confirmed": None}
    detail = {
        "reason": "fits",
        "repairs": [repair],
        "churn": [{"kind": "timestamp"}],
        "failed": True,
        "first_token_ms": 12.5,
        "slot": 0,
        "harness_shape": "claude-code",
        "upstream": "messages",
        "retry_of": 7,
    }
    stored = write_receipt(store, make(project, 1, detail=detail))
    (back,) = list_receipts(store, project.id, session="s1")
    typed = back.turn_detail
    assert back.id == stored.id
    assert (typed.reason, typed.repairs, typed.churn) == (
        "fits",
        (repair,),
        ({"kind": "timestamp"},),
    )
    assert (typed.failed, typed.first_token_ms, typed.slot) == (True, 12.5, 0)
    assert (typed.harness_shape, typed.upstream, typed.retry_of) == ("claude-code", "messages", 7)
    # A refusal's receipt holds its reason alone: every other field reads as empty.
    bare = make(project, 2, detail={"reason": "too long"}).turn_detail
    assert (bare.repairs, bare.churn, bare.failed, bare.first_token_ms) == ((), (), False, None)
    assert (bare.slot, bare.harness_shape, bare.upstream, bare.retry_of) == (None,) * 4
