"""BERT's uncased WordPiece tokenizer, as all-MiniLM-L6-v2's ``tokenizer.json`` specifies it.

BertNormalizer (clean text, space out CJK, strip accents, lowercase), then
BertPreTokenizer (split on whitespace and punctuation), then greedy
longest-match WordPiece with ``##`` continuations. Written out here rather than
taken from the ``tokenizers`` package, whose dependency chain is larger than the
model; ``tests/embedders/test_wordpiece.py`` compares the two on a corpus.
"""

from __future__ import annotations

import re
import string
import unicodedata
from pathlib import Path

CLS, SEP, UNK = "[CLS]", "[SEP]", "[UNK]"
# Special tokens written literally in the text are matched before normalisation,
# as the reference tokenizer does (its added tokens are not normalised).
_SPECIAL = re.compile(r"(\[PAD\]|\[UNK\]|\[CLS\]|\[SEP\]|\[MASK\])")
MAX_WORD_CHARS = 100
_ASCII_PUNCT = frozenset(string.punctuation)
_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK)


def normalize(text: str) -> str:
    out: list[str] = []
    for c in text:
        if c in "\t\n\r":
            out.append(" ")
        elif c in "\0\ufffd" or unicodedata.category(c).startswith("C"):
            continue
        elif c.isspace():
            out.append(" ")
        elif _is_cjk(ord(c)):
            out.append(f" {c} ")
        else:
            out.append(c)
    decomposed = unicodedata.normalize("NFD", "".join(out))
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn").lower()


def pre_tokenize(text: str) -> list[str]:
    words: list[str] = []
    for chunk in text.split():
        buf = ""
        for c in chunk:
            if c in _ASCII_PUNCT or unicodedata.category(c).startswith("P"):
                if buf:
                    words.append(buf)
                    buf = ""
                words.append(c)
            else:
                buf += c
        if buf:
            words.append(buf)
    return words


class WordPiece:
    """Token ids for text, from a BERT ``vocab.txt`` (one token per line, id = line number)."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self.cls, self.sep, self.unk = vocab[CLS], vocab[SEP], vocab[UNK]

    @classmethod
    def from_file(cls, path: Path) -> WordPiece:
        lines = path.read_text(encoding="utf-8").splitlines()
        return cls({tok: i for i, tok in enumerate(lines)})

    def _word(self, word: str) -> list[int]:
        if len(word) > MAX_WORD_CHARS:
            return [self.unk]
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = self.vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return [self.unk]  # as BERT does: the whole word becomes [UNK]
            ids.append(found)
            start = end
        return ids

    def encode(self, text: str, max_len: int) -> list[int]:
        """``[CLS] pieces… [SEP]``, the pieces cut so the whole fits ``max_len``."""
        ids: list[int] = []
        for part in _SPECIAL.split(text):
            if part in self.vocab and _SPECIAL.fullmatch(part):
                ids.append(self.vocab[part])
                continue
            for word in pre_tokenize(normalize(part)):
                ids.extend(self._word(word))
            if len(ids) >= max_len - 2:
                break
        return [self.cls, *ids[: max_len - 2], self.sep]
