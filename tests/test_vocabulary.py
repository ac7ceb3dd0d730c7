"""The shared vocabulary: one tier and one kind for the store, the engine and the surfaces."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from sakur4 import engine
from sakur4.errors import InputError
from sakur4.vocabulary import KINDS, Fact, Kind, Nature, Tier, estimate_tokens, natures_named


def test_tier_labels_and_visibility() -> None:
    assert [t.label for t in Tier] == ["live", "masked", "referenced", "archived", "dropped"]
    assert [t.shown for t in Tier] == [True, True, True, False, False]


def test_a_folded_tier_is_out_of_the_prompt_in_full_but_whole_in_the_store() -> None:
    assert [t.folded for t in Tier] == [False, True, True, True, False]


def test_a_label_names_its_tier_and_an_unknown_one_is_refused_in_these_words() -> None:
    assert [Tier.of(t.label) for t in Tier] == list(Tier)
    with pytest.raises(InputError) as caught:
        Tier.of("gone")
    assert str(caught.value) == (
        "unknown tier 'gone'; tiers are live, masked, referenced, archived, dropped"
    )


def test_a_kind_is_the_string_the_store_holds() -> None:
    assert [str(k) for k in KINDS] == ["message", "tool_call", "tool_result", "note"]
    assert Kind("tool_result") is Kind.TOOL_RESULT
    assert Kind.NOTE == "note"


def test_the_engine_plans_with_the_same_values_the_store_keeps() -> None:
    assert engine.Tier is Tier
    assert engine.Kind is Kind


def test_the_token_estimate_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


def test_a_fact_is_one_record_for_the_ledger_the_cli_and_the_mcp_tools() -> None:
    """Issue 18: `symbol --json` prints ``as_dict``; the MCP tools publish the record's own
    schema (pydantic reads it from the dataclass: its docstring, each field's description)."""
    f = Fact(7, "a.py", "a.f~2", "f", "function", "python", "def f()", 1, 2, "s", "h", False, "t")
    assert f.as_dict() == {
        "id": 7,
        "path": "a.py",
        "qualified_name": "a.f~2",
        "name": "f",
        "kind": "function",
        "language": "python",
        "signature": "def f()",
        "start_line": 1,
        "end_line": 2,
        "symbol_hash": "s",
        "file_hash": "h",
        "tombstone": False,
        "indexed_at": "t",
    }
    schema = TypeAdapter(Fact).json_schema(mode="serialization")
    assert list(schema["properties"]) == list(f.as_dict())
    assert schema["required"] == list(f.as_dict())
    assert schema["description"] == "One Ledger fact: a symbol as the parser saw it."
    described = {k: p["description"] for k, p in schema["properties"].items() if "description" in p}
    assert described == {
        "name": "the bare name: the qualified name's last part, less any ~N",
        "file_hash": "its file's content hash when written ('' if the file was gone)",
        "tombstone": "the symbol was removed from the code",
    }


def test_keep_text_names_natures_by_comma_with_spaces_and_empty_items_ignored() -> None:
    assert natures_named(" instruction, ,request ") == {Nature.INSTRUCTION, Nature.REQUEST}
    assert natures_named("tool_output,answer") == {Nature.TOOL_OUTPUT, Nature.ANSWER}
    assert natures_named("") == frozenset()


@pytest.mark.parametrize(("text", "bad"), [("bogus", "bogus"), ("request, bogus, worse", "bogus")])
def test_keep_text_refuses_the_first_unknown_name_in_these_words(text: str, bad: str) -> None:
    with pytest.raises(ValueError, match=r"is not one of") as caught:
        natures_named(text)
    assert str(caught.value) == (
        f"'{bad}' is not one of answer, instruction, request, tool_output, unclassified"
    )
