"""Text that every store and wire takes: valid Unicode.

A Python string can hold a lone surrogate (half of a UTF-16 pair: a platform's JSON
with a broken escape such as "\\ud83d", an emoji cut in half, bytes that were not
UTF-8 read with surrogateescape). SQLite, PostgreSQL, the model's endpoint and the
platforms take UTF-8 only, and encoding such a string raises; so text is made valid
where it enters (a platform's event, a model's reply, a message stored): two halves
that belong together are joined into their character, a half alone becomes U+FFFD.
"""

from __future__ import annotations


def valid_text(text: str) -> str:
    """`text` as valid Unicode (the same object when it already is: the usual case)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


__all__ = ["valid_text"]
