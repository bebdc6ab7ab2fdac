"""One memory store in the database (`memory.backend: database`, what PostgreSQL uses).

The same store as the file (store.py), with the same entries, limits and text: the row
holds exactly the bytes MEMORY.md or USER.md would hold. A change is one transaction:
the row is read (on PostgreSQL locked, under the person's memory lock), the change decided,
its provenance recorded and the new text swapped in against the version read; so the
store and its record can never disagree, and there is nothing for a crash to leave
half done (the journal's intents are made and completed inside that transaction).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TypeVar

from hermes.memory import entries as fmt
from hermes.memory.store import (
    Store,
    StoreBusyError,
    StoreDamagedError,
    StoreError,
    StoreIOError,
    StoreState,
    Target,
)
from hermes.state.db import SessionDB
from hermes.state.memory_stores import StoredText
from hermes.state.models import utcnow
from hermes.state.retry import DatabaseBusyError, StateDBError

T = TypeVar("T")
# how long a consolidation may hold its claim (its model call has a shorter timeout); a
# claim left by a process that died lapses then
CLAIM_FOR = timedelta(minutes=15)


class _RacedError(Exception):
    """The version moved between the read and the swap (another writer came first)."""


class DatabaseStore(Store):
    atomic = True

    def __init__(self, db: SessionDB, user_id: str, target: Target, limit: int) -> None:
        super().__init__(target, limit)
        self.db, self.user_id = db, user_id
        self.where = f"{target.filename} of {user_id} (in the database)"

    def read(self) -> StoreState:
        return self._run(
            lambda: self._state_of(self.db.memory_stores.read(self.user_id, self.target))
        )

    def _state_of(self, stored: StoredText) -> StoreState:
        return self._state(stored.text, stored.pending)

    def mutate(
        self,
        decide: Callable[[StoreState], tuple[list[str] | None, T]],
        before_write: Callable[[T], None] | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> T:
        def work() -> T:
            seen = self.db.memory_stores.read(self.user_id, self.target, for_update=True)
            state = self._state_of(seen)
            if state.damage is not None:
                raise StoreDamagedError(_damage_message(self, state.damage))
            new_entries, result = decide(state)
            if new_entries is not None:
                if before_write is not None:
                    before_write(result)
                text = fmt.serialize(new_entries)
                self._swap(seen, text, seen.pending)
                self._parsed = (text, tuple(new_entries))
                if after_write is not None:
                    after_write()
            return result

        return self._change(work)

    def compare_and_swap(
        self,
        expected: str,
        text: str,
        pending: tuple[str, str] | None = None,
        *,
        before_check: Callable[[StoreState], None] | None = None,
        before_write: Callable[[], None] | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> bool:
        def work() -> bool:
            seen = self.db.memory_stores.read(self.user_id, self.target, for_update=True)
            if before_check is not None:
                before_check(self._state_of(seen))
            if seen.text != expected or (pending is not None and seen.pending != pending[0]):
                return False
            if before_write is not None:
                before_write()
            self._swap(seen, text, seen.pending if pending is None else pending[1])
            if after_write is not None:
                after_write()
            return True

        return self._change(work)

    def _swap(self, seen: StoredText, text: str, pending: str) -> None:
        if (text, pending) != (seen.text, seen.pending) and not self.db.memory_stores.swap(
            seen, text, pending
        ):
            raise _RacedError

    @contextmanager
    def consolidation_claim(self) -> Iterator[bool]:
        stores = self.db.memory_stores
        claimed = self._run(lambda: stores.claim(self.user_id, self.target, utcnow() + CLAIM_FOR))
        try:
            yield claimed
        finally:
            if claimed:
                self._run(lambda: stores.release(self.user_id, self.target))

    def _change(self, work: Callable[[], T]) -> T:
        """`work` as one transaction; a swap that lost a race (only possible when the
        row lock is not held, e.g. a future pooled setup) runs it again."""
        for _ in range(5):
            try:
                return self._run(lambda: self.db.memory_stores.change([self.user_id], work))
            except _RacedError:
                continue
        raise StoreBusyError(f"{self.where} kept changing while it was written; try again")

    def _run(self, work: Callable[[], T]) -> T:
        """The database's errors as the store's (busy, or cannot be written)."""
        try:
            return work()
        except DatabaseBusyError as exc:
            raise StoreBusyError(f"{self.where} is busy: {exc}") from None
        except StoreError:
            raise
        except StateDBError as exc:
            raise StoreIOError(f"cannot use {self.where}: {exc}. Nothing was changed.") from None


def _damage_message(store: DatabaseStore, damage: str) -> str:
    return (
        f"{store.where} can no longer be updated safely: {damage} (was the limit lowered "
        f"to {store.limit:,}?). Nothing was changed. To fix it, raise the limit again, or "
        "write it out with `hermes memory export --files DIR`, shorten that file and load "
        "it back with `hermes memory import DIR`."
    )
