"""The hand-written WordPiece tokenizer against ids from the reference ``tokenizers``
package (0.23.3, the model's own tokenizer.json), recorded once. The full-corpus
comparison (4,109 lines of this repo and the spec: 0 mismatches) is in
docs/design/memory.md."""

from __future__ import annotations

import pytest

from sakur4.embedders.minilm import model_dir
from sakur4.embedders.minilm.wordpiece import WordPiece

REFERENCE = {
    "Héllo Wörld café naïve": [101, 7592, 2088, 7668, 15743, 102],
    "日本語のテキストと中文": [
        101,
        1864,
        1876,
        1950,
        1671,
        30239,
        30227,
        30233,
        30240,
        30192,
        1746,
        1861,
        102,
    ],
    "def parse_file(path: str) -> list[Token]:": [
        101,
        13366,
        11968,
        3366,
        1035,
        5371,
        1006,
        4130,
        1024,
        2358,
        2099,
        1007,
        1011,
        1028,
        2862,
        1031,
        19204,
        1033,
        1024,
        102,
    ],
    "emoji 🎉 and x" + "y" * 120: [101, 7861, 29147, 2072, 100, 1998, 100, 102],
    "tab\tsep\r\nline\x00\x07": [101, 21628, 19802, 2240, 102],
    "‘quotes’ — dash … ½ ²": [101, 1520, 16614, 1521, 1517, 11454, 1529, 1092, 1082, 102],
    "see [SEP] and [unk]": [101, 2156, 102, 1998, 1031, 4895, 2243, 1033, 102],
    "unaffable antidisestablishmentarianism": [
        101,
        14477,
        20961,
        3468,
        3424,
        10521,
        4355,
        7875,
        13602,
        3672,
        12199,
        2964,
        102,
    ],
}


@pytest.fixture(scope="module")
def tokenizer() -> WordPiece:
    return WordPiece.from_file(model_dir() / "vocab.txt")


@pytest.mark.parametrize("text", list(REFERENCE))
def test_matches_the_reference_tokenizer(tokenizer: WordPiece, text: str) -> None:
    assert tokenizer.encode(text, 512) == REFERENCE[text]


def test_long_text_is_cut_to_the_limit(tokenizer: WordPiece) -> None:
    ids = tokenizer.encode("word " * 1000, 256)
    assert len(ids) == 256
    assert ids[0] == tokenizer.cls
    assert ids[-1] == tokenizer.sep
