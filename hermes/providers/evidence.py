"""`evidence`: a local-first memory of evidence, not summaries (built in; no model, no
network). Every claim it recalls can be checked against the source it cites.

Sources are files (`hermes evidence index PATH...`), conversations (each turn, by
`sync_turn`), URLs and notes; their chunks are the evidence. Facts cite chunks and are
drafts until reviewed (`hermes evidence review ID verified`); model output enters only
as a draft. `prefetch` returns the person's verified facts and best chunks for the
question, each with its citation; tools: `evidence_search`, `evidence_add_fact` (must
cite chunk ids), `evidence_context_pack`. The rules (no fact without a live chunk,
re-indexing never cuts provenance) live in hermes/state/evidence.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes.memory.scanner import find_secret
from hermes.providers.base import BaseProvider, ConfigField
from hermes.state.cjk import query_terms
from hermes.state.cjk import runs as cjk_runs
from hermes.state.evidence import Chunk, EvidenceError, EvidenceStore, FactRow
from hermes.state.search import STOPWORDS

logger = logging.getLogger(__name__)

CHUNK_LINES, CHUNK_CHARS = 40, 1_500
MAX_FILE_BYTES = 2 * 1024 * 1024
PREFETCH_CHUNKS, PREFETCH_FACTS = 3, 5
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv"})
# files never indexed, whatever they hold: their keys would become searchable
SECRET_NAMES = frozenset({
    "env", ".netrc", ".pgpass", ".npmrc", ".pypirc", ".git-credentials", ".htpasswd",
    "credentials", "credentials.json", "secrets.json", "secrets.yaml", "secrets.yml",
    "service-account.json", ".dockercfg", "config.json.secret",
})  # fmt: skip
SECRET_SUFFIXES = (".env", ".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx", ".asc")
_WORD = re.compile(r"[^\W_]{2,}", re.UNICODE)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "evidence_search",
            "description": (
                "Search this user's evidence (indexed files, past conversations, notes) and "
                "the facts drawn from it. Every result has a chunk id and where it comes from."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 20},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "evidence_add_fact",
            "description": (
                "Record a fact drawn from evidence. It must cite the chunk ids it rests on "
                "(from evidence_search); it is saved as a draft until the user reviews it."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "chunk_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                },
                "required": ["text", "chunk_ids"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "evidence_context_pack",
            "description": (
                "Build (or read back) a named bundle of the verified facts and chunks for a "
                "task, to work from the same evidence later."
            ),
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "query": {"type": "string"}},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
    },
]


def terms(text: str) -> list[str]:
    """The words and CJK terms to look up for `text`."""
    normal = unicodedata.normalize("NFKC", text)
    found = [w.casefold() for w in _WORD.findall(normal) if not cjk_runs(w)]
    found = [w for w in found if w not in STOPWORDS]
    for run in cjk_runs(normal):
        found += query_terms(run)
    return list(dict.fromkeys(found))


def chunk_text(text: str) -> list[tuple[str, int, int]]:
    """(text, first line, last line) pieces: at most CHUNK_LINES lines / CHUNK_CHARS."""
    segments = [  # a line longer than a chunk is cut into pieces of its own
        (number, line[i : i + CHUNK_CHARS])
        for number, line in enumerate(text.splitlines(), 1)
        for i in range(0, max(len(line), 1), CHUNK_CHARS)
    ]
    pieces: list[tuple[str, int, int]] = []
    buffer: list[tuple[int, str]] = []
    size = 0
    for number, segment in segments:
        if buffer and (len(buffer) >= CHUNK_LINES or size + len(segment) > CHUNK_CHARS):
            pieces.append(_piece(buffer))
            buffer, size = [], 0
        buffer.append((number, segment))
        size += len(segment) + 1
    if buffer:
        pieces.append(_piece(buffer))
    return [p for p in pieces if p[0].strip()]


def _piece(lines: list[tuple[int, str]]) -> tuple[str, int, int]:
    return "\n".join(text for _, text in lines), lines[0][0], lines[-1][0]


@dataclass
class IndexReport:
    files: int = 0  # looked at
    indexed: int = 0  # new or changed, (re)chunked
    unchanged: int = 0
    skipped: int = 0  # binary, too big, unreadable, a secrets file, a name not UTF-8
    skipped_files: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    vanished: int = 0
    inserted: int = 0
    staled: int = 0
    deleted: int = 0


def index_paths(
    store: EvidenceStore,
    user_id: str,
    paths: Iterable[Path],
    *,
    max_bytes: int = MAX_FILE_BYTES,
    progress: Callable[[int, int], None] | None = None,
) -> IndexReport:
    """Index files and folders for `user_id`: new and changed text files are chunked,
    unchanged ones (same size, time and hash) touched no further, binaries and files
    over `max_bytes` skipped; a file indexed before under a given folder that is gone
    now (deleted or renamed) is marked stale, provenance kept."""
    report = IndexReport()
    roots = []
    for given in paths:
        try:
            roots.append(Path(given).resolve())
        except (OSError, RuntimeError) as exc:  # a symlink loop, a folder gone
            _skip(report, Path(given), f"cannot be followed ({exc})")
    files = [f for root in roots for f in _walk(root, report)]
    for done, path in enumerate(files, 1):
        report.files += 1
        try:
            _index_file(store, user_id, path, max_bytes, report)
        except Exception as exc:  # one file never ends the run
            _skip(report, path, f"failed: {type(exc).__name__}: {exc}")
        if progress is not None:
            progress(done, len(files))
    seen = {str(f) for f in files}
    for root in roots:
        if root.is_dir() or not root.exists():
            prefix = str(root) + (os.sep if root.is_dir() else "")
            gone = [loc for loc in store.locators(user_id, "file", prefix) if loc not in seen]
            gone = [loc for loc in gone if loc == str(root) or loc.startswith(prefix)]
            report.vanished += store.vanished(user_id, "file", gone)
    return report


def _walk(root: Path, report: IndexReport) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    if not root.is_dir():
        return
    for folder, dirs, names in os.walk(root, onerror=lambda exc: _skip(report, Path(
            exc.filename or root), f"unreadable ({exc.strerror})")):  # fmt: skip
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(names):
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                yield path


def _skip(report: IndexReport, path: Path, why: str) -> None:
    report.skipped += 1
    report.skipped_files.append((_shown_path(path), why))


def _shown_path(path: Path) -> str:
    return os.fsencode(path).decode("utf-8", errors="replace")


def secrets_file(path: Path) -> bool:
    """A file that holds credentials by its name: env files, keys, password stores."""
    name = path.name.lower()
    return (
        name in SECRET_NAMES
        or name.startswith(".env")
        or name.endswith(SECRET_SUFFIXES)
        or (
            name.startswith(("id_rsa", "id_ed25519", "id_ecdsa", "id_dsa"))
            and not name.endswith(".pub")
        )
    )


def _unnamed(path: Path) -> str | None:
    """Why a file is not indexed by its name alone (None: it may be)."""
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return "its name is not valid UTF-8"
    return "a secrets file (by its name)" if secrets_file(path) else None


def _index_file(
    store: EvidenceStore, user_id: str, path: Path, max_bytes: int, report: IndexReport
) -> None:
    if (why := _unnamed(path)) is not None:
        _skip(report, path, why)
        return
    try:
        stat = path.stat()
        if stat.st_size > max_bytes:
            report.skipped += 1
            return
        known = store.source(user_id, "file", str(path))
        if known is not None and known[2] == stat.st_size and known[3] == stat.st_mtime:
            report.unchanged += 1  # same size and time: not even read
            return
        data = path.read_bytes()
    except OSError:
        report.skipped += 1
        return
    text = _text(data)
    if text is None:
        report.skipped += 1
        return
    if (found := find_secret(text)) is not None:
        _skip(report, path, f"holds a secret ({found.reason})")
        return
    digest = hashlib.sha256(data).hexdigest()
    result = store.index(
        user_id,
        "file",
        str(path),
        chunk_text(text),
        content_hash=digest,
        size=stat.st_size,
        mtime=stat.st_mtime,
    )
    if result.changed:
        report.indexed += 1
    else:
        report.unchanged += 1
    report.inserted += result.inserted
    report.staled += result.staled
    report.deleted += result.deleted


def _text(data: bytes) -> str | None:
    """The file's text, or None for a binary (a NUL byte, or not UTF-8)."""
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


class EvidenceProvider(BaseProvider):
    name = "evidence"
    needs = ()

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        super().__init__(settings)
        self._store: EvidenceStore | None = None

    def initialize(self, session_id: str, **kw: Any) -> None:
        super().initialize(session_id, **kw)
        self._store = EvidenceStore.at(Path(kw["hermes_home"]))

    def merge_people(self, keep: str, gone: str, hermes_home: Path) -> None:
        if EvidenceStore.exists(hermes_home):
            moved = EvidenceStore.at(hermes_home).merge_people(keep, gone)
            logger.info("evidence: %d chunks of %s are now %s's", moved, gone, keep)

    @property
    def store(self) -> EvidenceStore:
        if self._store is None or not self.user_id:
            raise RuntimeError("the evidence provider is used before initialize")
        return self._store

    def get_config_schema(self) -> list[ConfigField]:
        return [
            ConfigField(
                "record_conversations",
                "Record each conversation turn as evidence (yes/no)",
                default="yes",
                choices=("yes", "no"),
            )
        ]

    def system_prompt_block(self) -> str:
        return (
            "## Evidence\nBeside your memory you have this user's evidence: indexed files, "
            "past conversations, notes (`evidence_search`). A fact you draw from it must "
            "cite its chunk ids (`evidence_add_fact`; saved as a draft until reviewed). "
            "Recalled evidence shows where it comes from; when it and your memory disagree, "
            "the source wins."
        )

    async def prefetch(self, query: str, *, session_id: str) -> str:
        chunks, facts = self.search(query, PREFETCH_CHUNKS)
        lines = [f"- fact #{f.id}: {f.text} (cites {', '.join(f.chunk_ids)})" for f in facts]
        lines += [f"- [{c.id} {_where(c)}] {_clip(c.text, 300)}" for c in chunks]
        return "\n".join(lines)

    async def sync_turn(
        self, user_text: str, assistant_text: str, *, session_id: str, messages: list[Any]
    ) -> None:
        if str(self.settings.get("record_conversations", "yes")) != "yes" or not session_id:
            return
        turn = f"user: {user_text}\nassistant: {assistant_text}"
        digest = hashlib.sha256(turn.encode()).hexdigest()
        self.store.index(
            self.user_id,
            "session",
            session_id,
            [(_clip(turn, CHUNK_CHARS * 4), 1, turn.count("\n") + 1)],
            content_hash=digest,
            size=len(turn),
            append=True,
        )

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return TOOLS

    async def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        try:
            result = self._tool(name, args)
        except EvidenceError as exc:
            result = {"success": False, "error": str(exc)}
        except (TypeError, ValueError) as exc:
            result = {"success": False, "error": f"bad arguments: {exc}"}
        return json.dumps(result, ensure_ascii=False)

    def _tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name == "evidence_search":
            limit = max(1, min(int(args.get("limit") or 5), 20))
            chunks, facts = self.search(str(args.get("query", "")), limit)
            return {
                "success": True,
                "facts": [_fact(f) for f in facts],
                "chunks": [_chunk(c) for c in chunks],
            }
        if name == "evidence_add_fact":
            cites = args.get("chunk_ids")
            if not isinstance(cites, list) or not all(isinstance(c, str) for c in cites):
                raise ValueError("chunk_ids must be a list of chunk ids")
            confidence = float(args.get("confidence", 0.5))
            fact_id = self.store.add_fact(
                self.user_id,
                str(args.get("text", "")),
                cites,
                status="draft",
                confidence=confidence,
            )
            return {"success": True, "fact_id": fact_id, "status": "draft"}
        if name == "evidence_context_pack":
            return self.context_pack(str(args.get("name", "")), args.get("query"))
        return {"success": False, "error": f"unknown tool {name}"}

    # -- what the tools and the CLI share ------------------------------------------------

    def search(self, query: str, limit: int = 5) -> tuple[list[Chunk], list[FactRow]]:
        """The best live chunks for `query`, and the verified facts citing them."""
        chunks = self.store.search_chunks(self.user_id, terms(query), limit)
        facts = self.store.facts(self.user_id, status="verified", citing=[c.id for c in chunks])
        return chunks, facts[:PREFETCH_FACTS]

    def context_pack(self, name: str, query: Any = None) -> dict[str, Any]:
        if not name.strip():
            raise ValueError("a pack needs a name")
        if query:
            chunks, facts = self.search(str(query), 10)
            self.store.save_pack(
                self.user_id, name, str(query), [f.id for f in facts], [c.id for c in chunks]
            )
        saved = self.store.pack(self.user_id, name)
        if saved is None:
            return {"success": False, "error": f"no pack {name!r}: give a query to build it"}
        question, fact_ids, chunk_ids = saved
        chunks = self.store.chunks(self.user_id, chunk_ids)
        facts = self.store.facts(self.user_id, ids=fact_ids)
        return {
            "success": True,
            "name": name,
            "query": question,
            "facts": [_fact(f) for f in facts],
            "chunks": [_chunk(c) for c in chunks],
        }


def _where(chunk: Chunk) -> str:
    if chunk.kind == "file":
        return f"{chunk.locator}:{chunk.line_start}-{chunk.line_end}"
    return f"{chunk.kind} {chunk.locator}"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split()) if limit <= 300 else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fact(fact: FactRow) -> dict[str, Any]:
    return {
        "fact_id": fact.id,
        "text": fact.text,
        "status": fact.status,
        "confidence": fact.confidence,
        "flagged": fact.flagged,
        "cites": list(fact.chunk_ids),
    }


def _chunk(chunk: Chunk) -> dict[str, Any]:
    return {
        "chunk_id": chunk.id,
        "where": _where(chunk),
        "stale": chunk.stale,
        "text": _clip(chunk.text, 600),
    }


__all__ = ["EvidenceProvider", "IndexReport", "chunk_text", "index_paths", "terms"]
