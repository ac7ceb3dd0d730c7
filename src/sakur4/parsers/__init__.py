"""Parsers adapter: tree-sitter grammars and tag queries → symbols and references.

Only the standard library, ``tree_sitter`` and the grammar packages below this
line; the Ledger service (``sakur4.ledger``) decides what becomes a fact.
"""

from sakur4.parsers.registry import (
    LANGUAGES,
    LanguageSpec,
    QueryFile,
    language_for_path,
    language_named,
    module_name,
)
from sakur4.parsers.tags import (
    GrammarStatus,
    ParsedFile,
    Reference,
    Symbol,
    grammar_status,
    load_grammar,
    parse_source,
)

__all__ = [
    "LANGUAGES",
    "GrammarStatus",
    "LanguageSpec",
    "ParsedFile",
    "QueryFile",
    "Reference",
    "Symbol",
    "grammar_status",
    "language_for_path",
    "language_named",
    "load_grammar",
    "module_name",
    "parse_source",
]
