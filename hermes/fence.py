"""Untrusted text in a prompt, fenced so that it cannot close its own fence.

Everything that reaches the model from outside the conversation's own turns (a memory
service's recall, a document's or a PDF's text, a voice note's transcript, the note the
memory guard's judge is shown) is wrapped in a pair of tags named with a random boundary
made for that one fence:

    <recalled-memory-5f0c2a9e41d7b3c8 note="...">
    ...the text, byte for byte...
    </recalled-memory-5f0c2a9e41d7b3c8>

The text is never "cleaned" of a known spelling of the closing tag (whatever spelling is
removed, another passes: a case, a nesting, a look-alike letter, an invisible character).
Instead the boundary is one the text cannot contain: 64 random bits, drawn again in the
vanishing case that the text already holds them. So the only closing tag is the fence's
own, and the text between the tags is exactly the text given.
"""

from __future__ import annotations

import re
import secrets

_KIND = re.compile(r"[a-z][a-z-]{0,30}")


def fence(kind: str, text: str, note: str) -> str:
    """`text` between tags `kind`-BOUNDARY, with `note` (what it is and that it gives
    no orders) on the opening tag."""
    if not _KIND.fullmatch(kind) or '"' in note:
        raise ValueError(f"a fence's kind is a lowercase word and its note has no quote: {kind!r}")
    while True:
        boundary = secrets.token_hex(8)
        if boundary not in text:
            break
    tag = f"{kind}-{boundary}"
    return f'<{tag} note="{note}">\n{text}\n</{tag}>'


def fenced(fenced_text: str) -> tuple[str, str] | None:
    """(tag, text) of a fence made by `fence` (its first line names the tag; its last
    line closes it), or None: for checks and tests."""
    found = re.fullmatch(
        r'<([a-z][a-z-]*-[0-9a-f]{16}) note="[^"]*">\n(.*)\n</\1>', fenced_text, re.S
    )
    return (found.group(1), found.group(2)) if found else None
