"""Text from outside (a link's value, a cell or a file name from an upload) shown by Streamlit as it is.

Streamlit draws markdown in notes, alerts and captions; text that came from a link or a file must not: no link, no
emphasis, no icon or colour shortcode, no HTML. Every markdown character gets a backslash, and the places where
markdown would still turn plain text into a link (`https://...`, `www.`, an e-mail address) get an invisible word
joiner that breaks the pattern without changing what a reader sees.
"""

from __future__ import annotations

import re

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:@])")
_AUTOLINK = re.compile(r"(?i)(?<=:)(?=//)|(?<=www)(?=\\\.)|(?<=\\@)")
WORD_JOINER = "\u2060"


def literal(text: str) -> str:
    """`text` on one line, as Streamlit's markdown shows it literally."""
    escaped = _MARKDOWN.sub(r"\\\1", " ".join(str(text).split()))
    return _AUTOLINK.sub(WORD_JOINER, escaped)
