"""Input normalisation: what the shell would see, minus the tricks that hide it from people.

NFKC folds fullwidth and other compatibility letters (``ｒｍ`` -> ``rm``); ANSI escape
sequences, NUL bytes, zero-width and other invisible format characters are removed, so
``r\\x1b[0mm`` or ``r\\u200bm`` cannot split a word the gate is looking for.
"""

from __future__ import annotations

import re
import unicodedata

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# C0 controls other than TAB/LF/CR, DEL, C1 controls, and the invisible format characters.
# tree-sitter-bash 0.25 can crash (SIGSEGV) on characters outside the BMP; after NFKC has
# folded the ones that look like letters, the rest cannot spell a command and become U+FFFD.
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_INVISIBLE = re.compile(
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\ufeff]"
)


def normalize(command: str | bytes) -> str:
    """The text the gate analyses. Never raises: invalid UTF-8 and lone surrogates are replaced."""
    if isinstance(command, bytes):
        command = command.decode("utf-8", errors="replace")
    elif not command.isascii():
        command = command.encode("utf-8", errors="replace").decode("utf-8", errors="replace")
    if command.isascii():
        text = command
    else:
        text = unicodedata.normalize("NFKC", command)
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    text = _INVISIBLE.sub("", text)
    if not text.isascii():
        text = _ASTRAL.sub("\ufffd", text)
    return text.replace("\r\n", "\n").replace("\r", "\n")
