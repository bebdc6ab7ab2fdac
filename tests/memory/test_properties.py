"""Property test: any sequence of operations keeps the store file parseable, within its
limit, free of duplicates and identical to a simple in-memory model."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from hermes.config import MemoryConfig
from hermes.identity import new_user_id
from hermes.memory import entries as fmt
from hermes.memory.store import Target
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory

LIMIT = 120
texts = st.text(alphabet="ab c§\n\r", max_size=30)
needles = st.text(alphabet="ab c§", min_size=0, max_size=3)


class Model:
    """The documented semantics, written independently of the implementation."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    @staticmethod
    def clean(content: str) -> str | None:
        content = content.replace("\r\n", "\n").replace("\r", "\n").strip()
        if not content or any(line.strip() == "§" for line in content.split("\n")):
            return None
        return content

    @staticmethod
    def size(entries: list[str]) -> int:
        return sum(map(len, entries)) + 3 * max(len(entries) - 1, 0)

    def add(self, content: str) -> None:
        c = self.clean(content)
        if c is not None and c not in self.entries and self.size([*self.entries, c]) <= LIMIT:
            self.entries.append(c)

    def _only_match(self, needle: str) -> int | None:
        needle = needle.strip()
        hits = [i for i, e in enumerate(self.entries) if needle and needle in e]
        return hits[0] if len(hits) == 1 else None

    def replace(self, needle: str, content: str) -> None:
        c, i = self.clean(content), self._only_match(needle)
        if c is None or i is None:
            return
        new = list(self.entries)
        new[i] = c
        new = [e for k, e in enumerate(new) if e not in new[:k]]
        if self.size(new) <= LIMIT:
            self.entries = new

    def remove(self, needle: str) -> None:
        i = self._only_match(needle)
        if i is not None:
            del self.entries[i]


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.home = Path(tempfile.mkdtemp(prefix="hermes-prop-"))
        config = MemoryConfig(memory_char_limit=LIMIT)
        self.memory = UserMemory(self.home, new_user_id(), config)
        self.tool = MemoryTool(self.memory)
        self.model = Model()

    @rule(content=texts)
    def add(self, content: str) -> None:
        self.tool.run({"action": "add", "target": "memory", "content": content})
        self.model.add(content)

    @rule(needle=needles, content=texts)
    def replace(self, needle: str, content: str) -> None:
        self.tool.run(
            {"action": "replace", "target": "memory", "old_text": needle, "content": content}
        )
        self.model.replace(needle, content)

    @rule(needle=needles)
    def remove(self, needle: str) -> None:
        self.tool.run({"action": "remove", "target": "memory", "old_text": needle})
        self.model.remove(needle)

    @invariant()
    def file_matches_model(self) -> None:
        path = self.memory.folder / "MEMORY.md"
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        parsed = fmt.parse(text)
        assert text == fmt.serialize(parsed)  # canonical: nothing else in the file
        assert parsed == self.model.entries
        assert len(text) <= LIMIT
        assert len(set(parsed)) == len(parsed)
        # the store's own read (which keeps the parse of what it last wrote) agrees
        assert list(self.memory.store(Target.MEMORY).read().entries) == parsed

    def teardown(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


TestStoreMachine = StoreMachine.TestCase
