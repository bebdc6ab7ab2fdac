"""What the memory tests need to put into a store and see in it, wherever it is: the
file (memory.backend: files, with SQLite) or the database row (memory.backend:
database, with PostgreSQL). Nothing here records provenance: it stands for a store
as found, as a hand edit or an earlier version left it."""

from __future__ import annotations

from hermes.memory import entries as fmt
from hermes.memory.store import Target
from hermes.memory.user_memory import UserMemory


def backend_of(database: str) -> str:
    """The memory backend each state backend is tested with (what config implies)."""
    return "database" if database == "postgresql" else "files"


def seed(memory: UserMemory, target: Target, content: list[str] | str, pending: str = "") -> None:
    """The store holds `content` (entries, or the exact text) and `pending` waits."""
    text = content if isinstance(content, str) else fmt.serialize(content)
    if memory.db is not None:
        rows = memory.db.memory_stores
        assert rows.swap(rows.read(memory.user_id, target.value), text, pending)
        return
    memory.folder.mkdir(parents=True, exist_ok=True)
    (memory.folder / target.filename).write_text(text, encoding="utf-8")
    if pending:
        (memory.folder / f"{target.filename}.pending").write_text(pending, encoding="utf-8")


def stored(memory: UserMemory, target: Target = Target.MEMORY) -> str | None:
    """The store's exact text; None when it was never written."""
    if memory.db is not None:
        row = memory.db.memory_stores.read(memory.user_id, target.value)
        return row.text if row.version else None
    path = memory.folder / target.filename
    return path.read_text(encoding="utf-8") if path.exists() else None


def stored_entries(memory: UserMemory, target: Target = Target.MEMORY) -> list[str]:
    text = stored(memory, target)
    return fmt.parse(text) if text else []


def write_mark(memory: UserMemory, target: Target = Target.MEMORY) -> int:
    """What changes whenever the store is written (the file's mtime, the row's version)."""
    if memory.db is not None:
        return memory.db.memory_stores.read(memory.user_id, target.value).version
    return (memory.folder / target.filename).stat().st_mtime_ns
