"""Text from outside the worker's operator (an MCP server's tool descriptions, a run's goal in a
notification) as people and models are shown it: without the characters a reader cannot see.

Bidi controls (U+202E RIGHT-TO-LEFT OVERRIDE and its kin) make a reviewer read text in another
order than a model does; zero-width characters and Unicode tags (U+E0000-U+E007F) carry words a
model reads and a person never sees; control characters rewrite a terminal. None of them is
needed to say what a tool does.
"""

from __future__ import annotations

import re
import unicodedata

# Control (Cc), format (Cf: bidi controls, zero-width characters, tags, U+FEFF) and lone
# surrogates (Cs); a newline and a tab stay.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
_KEPT = frozenset("\n\t")
# Invisible without being in those categories: variation selectors (which can carry a byte each
# after any character) and the Hangul fillers, which render as blank letters.
_INVISIBLE = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef\u115f\u1160\u3164\uffa0]")
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def visible(text: str) -> str:
    """`text` without control, format and other invisible characters, newlines and tabs kept."""
    if text.isascii():
        return _ASCII_CONTROL.sub("", text)
    text = _INVISIBLE.sub("", text)
    return "".join(c for c in text if c in _KEPT or unicodedata.category(c) not in _HIDDEN_CATEGORIES)


# What moves a terminal's cursor, colours it or reorders text, in a terminal or a browser: C0/C1
# controls (ESC starts ANSI sequences, CR overwrites a line), the bidirectional overrides and
# isolates, and the line separators.
_REORDERING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def written_out(text: str) -> str:
    """`text` with every such character written out (`\\x1b`, `\\u202e`), so a reader sees it
    rather than obeys it: a payee `\\u202e1111-2222-3333` read 3333-2222-1111 in a browser."""
    return _REORDERING.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
