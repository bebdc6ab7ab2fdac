"""The `send_file` tool: the assistant writes a file (text it composes: a table as CSV,
notes as Markdown, an event as .ics, a script) and sends it to the chat it is talking
in, as a file the person can save or open (on the terminal: saved in the current
directory).

What a file may be is decided here, once, for every platform: a plain name (no folder,
no control characters, at most 120 characters) whose extension is a text format; the
formats a browser or a desktop would run when opened (HTML, SVG, JavaScript, Windows
scripts) are refused, so a page the assistant read cannot make it hand the person something active.
The content is valid Unicode sent as UTF-8, no larger than `media.max_sent_file_kb` nor
the platform's own upload limit. Who may use it: the `files` capability (everyone by
default). The gateway's side (gateway/pipeline/files_out.py) sends it through the
platform adapter with the delivery path's retries; the tool call and its result stay
in the conversation, so the assistant knows what it sent.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Protocol

from hermes.places import Surface
from hermes.text import valid_text

MAX_NAME = 120
MAX_CAPTION = 1_000  # Telegram's caption is 1,024 characters: one rule everywhere

# The text formats sent, by extension, and their types: one table, the same on every
# system (the system's mime.types is never read: no file I/O in a turn, no surprises).
# Left out on purpose: formats a browser or a desktop runs or renders as active content
# when the file is opened (HTML, SVG, JavaScript, Windows scripts: bat, cmd, vbs, wsf,
# hta, ps1), and every binary format (the model writes text).
_PLAIN = (
    "txt text log ini cfg conf properties env srt diff patch "
    "py rb go rs java kt kts scala c h cc cpp hpp cs swift lua pl r m dart sh bash zsh fish "
    "css scss less sass graphql proto dockerfile makefile tf hcl gradle"
)
_TYPES: dict[str, str] = {
    **dict.fromkeys(_PLAIN.split(), "text/plain"),
    **dict.fromkeys(("md", "markdown"), "text/markdown"),
    **dict.fromkeys(("yaml", "yml"), "application/yaml"),
    "rst": "text/x-rst",
    "csv": "text/csv",
    "tsv": "text/tab-separated-values",
    "json": "application/json",
    "jsonl": "application/jsonl",
    "ndjson": "application/x-ndjson",
    "geojson": "application/geo+json",
    "toml": "application/toml",
    "xml": "application/xml",
    "sql": "application/sql",
    "ics": "text/calendar",
    "vcf": "text/vcard",
    "vtt": "text/vtt",
    "tex": "text/x-tex",
    "bib": "text/x-bibtex",
    "ts": "text/plain",  # TypeScript (not an MPEG stream: the model writes text)
    "tsx": "text/plain",
    "jsx": "text/plain",
}
_UNSAFE_NAME = re.compile(r"[\\/:*?\"<>|]")

SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "send_file",
        "description": (
            "Send the user a file you write, in this chat: when they ask for a file, or "
            "for something better kept as one (a table as .csv, notes as .md, a calendar "
            "event as .ics, a script, a config). Write the whole content; text formats "
            "only (not HTML, SVG or JavaScript). Then say in your reply what you sent."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "description": "The file's name with its extension, e.g. budget.csv.",
                },
                "content": {"type": "string", "description": "The file's whole text."},
                "caption": {
                    "type": "string",
                    "description": "Optional: a short line shown with the file.",
                },
            },
            "required": ["name", "content"],
        },
    },
}


class FileRefusedError(ValueError):
    """A file the tool does not send; the message says why, for the model."""


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A file the assistant wrote, checked: what a platform uploads."""

    name: str
    mime: str
    data: bytes
    caption: str = ""

    @property
    def size_text(self) -> str:
        return size_text(len(self.data))


def size_text(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / 1024 / 1024:.1f} MB"


def mime_of(name: str) -> str | None:
    """The MIME type of a text format by `name`'s extension; None when it is not one
    the tool sends (unknown, binary, or active content)."""
    extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return _TYPES.get(extension)


def check_name(raw: object) -> str:
    """`raw` as a file name the platforms take; FileRefusedError (in words) otherwise."""
    if not isinstance(raw, str):
        raise FileRefusedError("Give the file a name, with its extension (e.g. notes.md).")
    name = unicodedata.normalize("NFC", valid_text(raw)).strip()
    if _UNSAFE_NAME.search(name) or any(unicodedata.category(c)[0] == "C" for c in name):
        raise FileRefusedError(
            f"{name!r} is not a plain file name: no folders or / \\ : * ? < > |."
        )
    if not name or name.startswith(".") or name.endswith("."):
        raise FileRefusedError(f"{name!r} is not a file name: e.g. notes.md.")
    if len(name) > MAX_NAME:
        raise FileRefusedError(f"The file name is too long (at most {MAX_NAME} characters).")
    if mime_of(name) is None:
        raise FileRefusedError(
            f"{name!r} is not a text format I send: use a text extension such as .txt, "
            ".md, .csv, .json, .ics or .py (not .html, .svg or .js)."
        )
    return name


def written_file(args: dict[str, Any], limit: int) -> WrittenFile:
    """The tool's arguments as a file of at most `limit` bytes; FileRefusedError otherwise."""
    name = check_name(args.get("name"))
    content = args.get("content")
    if not isinstance(content, str) or not content.strip():
        raise FileRefusedError("The file is empty: write its content.")
    data = valid_text(content).encode()
    if len(data) > limit:
        raise FileRefusedError(
            f"The file is too large ({size_text(len(data))}; at most {size_text(limit)} "
            "here). Make it shorter or split it."
        )
    caption = args.get("caption")
    caption = valid_text(caption).strip() if isinstance(caption, str) else ""
    if len(caption) > MAX_CAPTION:
        caption = caption[: MAX_CAPTION - 1].rstrip() + "…"
    return WrittenFile(name, mime_of(name) or "text/plain", data, caption)


class Filer(Protocol):
    """The gateway's side of `send_file`."""

    def limit(self, surface: Surface) -> int | None:
        """The largest file that can be sent in the chat of `surface` (bytes); None when
        no file can be sent there (the platform cannot, or is not running here)."""

    async def send(
        self, surface: Surface, file: WrittenFile, reply_to: str | None = None
    ) -> dict[str, Any]:
        """Send `file` to the chat of `surface` (in reply to the platform message
        `reply_to`, where the platform threads replies): the tool's result."""


__all__ = [
    "SCHEMA",
    "FileRefusedError",
    "Filer",
    "WrittenFile",
    "check_name",
    "mime_of",
    "written_file",
]
