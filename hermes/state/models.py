"""SQLModel tables, with their keys, foreign keys (and what a delete does to them),
checks and indexes: the whole schema. On SQLite it is built by the versioned migrations
in `schema.py` (an older state.db upgrades in place); on PostgreSQL from these models
(`hermes/state/postgres.py`). `tests/state/test_schema.py` checks, on both, that the
database agrees with the models column by column, constraint by constraint."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, CheckConstraint, Index, UniqueConstraint, text
from sqlmodel import Field, SQLModel


def _one_of(column: str, *values: str) -> CheckConstraint:
    allowed = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({allowed})", name=f"ck_{column}")


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """A stored time as an aware UTC one (SQLite hands them back without their zone)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class User(SQLModel, table=True):
    __tablename__ = "users"
    __table_args__ = (
        _one_of("role", "owner", "admin", "user"),
        _one_of("status", "active", "pending", "blocked"),
        _one_of("kind", "person", "chat"),
    )

    id: str = Field(primary_key=True)
    display_name: str = ""
    role: str = "user"  # owner | admin | user
    status: str = "active"  # active | pending | blocked
    kind: str = "person"  # person | chat (the owner of a group chat's shared sessions)
    created_at: datetime = Field(default_factory=utcnow)
    timezone: str | None = None  # IANA name, set by the person (/timezone); never guessed


class UserAlias(SQLModel, table=True):
    """A user id merged into another (linking): `old_id` now means `user_id`."""

    __tablename__ = "user_aliases"
    __table_args__ = (Index("ix_user_aliases_user", "user_id"),)

    old_id: str = Field(primary_key=True)
    user_id: str
    merged_at: datetime = Field(default_factory=utcnow)


class Identity(SQLModel, table=True):
    __tablename__ = "identities"
    __table_args__ = (
        UniqueConstraint("platform", "platform_user_id"),
        Index("ix_identities_user", "user_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    platform: str
    platform_user_id: str
    user_id: str = Field(foreign_key="users.id", ondelete="CASCADE")
    display_name: str = ""
    first_seen: datetime = Field(default_factory=utcnow)
    last_seen: datetime = Field(default_factory=utcnow)


class ChatSession(SQLModel, table=True):
    __tablename__ = "sessions"
    __table_args__ = (
        _one_of("chat_type", "dm", "group", "channel", "thread"),
        Index("ix_sessions_user_active", "user_id", "last_active_at"),
        Index("ix_sessions_key", "session_key", "ended_at"),
    )

    id: str = Field(primary_key=True)
    session_key: str
    user_id: str = Field(foreign_key="users.id", ondelete="CASCADE")
    platform: str
    chat_type: str = "dm"  # dm | group | channel | thread
    chat_id: str = ""
    thread_id: str | None = None
    shared: bool = False  # a group chat's one conversation (its user is the chat's owner)
    title: str = ""
    started_at: datetime = Field(default_factory=utcnow)
    last_active_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None
    end_reason: str | None = None
    parent_session_id: str | None = Field(
        default=None, foreign_key="sessions.id", ondelete="SET NULL"
    )
    system_prompt_hash: str | None = None
    message_count: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Message(SQLModel, table=True):
    __tablename__ = "messages"
    __table_args__ = (
        _one_of("role", "system", "user", "assistant", "tool"),
        Index("ix_messages_session", "session_id", "id"),
        Index("ix_messages_user", "user_id", "created_at"),
        Index(
            "ux_messages_platform_message",
            "platform",
            "platform_message_id",
            unique=True,
            sqlite_where=text("platform_message_id IS NOT NULL"),
            postgresql_where=text("platform_message_id IS NOT NULL"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(foreign_key="sessions.id", ondelete="CASCADE")
    user_id: str  # the session's user, denormalized for scoped search
    platform: str  # the session's platform, for the redelivery-unique index
    role: str  # system | user | assistant | tool
    content: str = ""
    tool_calls: str | None = None  # JSON, OpenAI shape
    tool_call_id: str | None = None
    tool_name: str | None = None
    platform_message_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    token_count: int = 0
    # a reply to a platform message, on its way to the chat: stored (not sent yet: whoever
    # holds the session next sends it), sending (its outcome unknown if nothing follows:
    # never sent twice), sent, unknown, failed; None for everything else
    delivery: str | None = None


class MemoryEvent(SQLModel, table=True):
    __tablename__ = "memory_events"
    __table_args__ = (
        _one_of("actor", "agent", "user", "admin", "consolidator"),
        Index("ix_memory_events_user", "user_id", "created_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(foreign_key="users.id", ondelete="CASCADE")
    target: str  # memory | user
    action: str  # add | replace | remove | consolidate | undo | merge
    entry_before: str | None = None
    entry_after: str | None = None
    actor: str  # agent | user | admin | consolidator
    session_id: str | None = Field(default=None, foreign_key="sessions.id", ondelete="SET NULL")
    message_id: int | None = Field(default=None, foreign_key="messages.id", ondelete="SET NULL")
    created_at: datetime = Field(default_factory=utcnow)


class MemoryIntent(SQLModel, table=True):
    """A store change about to be written: completed into events and a version once the
    file holds `text_after`, dropped if it never got there (a crash in between)."""

    __tablename__ = "memory_intents"
    __table_args__ = (Index("ix_memory_intents_store", "user_id", "target", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    user_id: str
    target: str
    text_before: str
    text_after: str
    planned: str  # JSON: {"events": [...], "version": {...}}
    created_at: datetime = Field(default_factory=utcnow)


class MemoryVersion(SQLModel, table=True):
    """A store's whole text before and after one change, so undo restores it exactly."""

    __tablename__ = "memory_versions"
    __table_args__ = (Index("ix_memory_versions_user", "user_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(foreign_key="users.id", ondelete="CASCADE")
    target: str
    text_before: str
    text_after: str
    actor: str
    reason: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    undone_at: datetime | None = None
    pending_before: str | None = None  # merged entries waiting for consolidation
    pending_after: str | None = None


class MemoryPending(SQLModel, table=True):
    """A memory write the guard's model could not judge yet: in no prompt until it has."""

    __tablename__ = "memory_pending"
    __table_args__ = (Index("ix_memory_pending_user", "user_id"),)

    id: int | None = Field(default=None, primary_key=True)
    user_id: str
    args: str  # JSON: the memory tool's arguments
    actor: str
    session_id: str | None = None
    message_id: int | None = None
    reason: str = ""  # why the model could not judge it, the last time
    attempts: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    last_tried_at: datetime | None = None


class MemoryStoreRow(SQLModel, table=True):
    """One store of one person with `memory.backend: database`: the text its MEMORY.md
    or USER.md would hold, the merged entries waiting for consolidation (its `.pending`
    file), and a version that every write compares and swaps."""

    __tablename__ = "memory_stores"
    __table_args__ = (_one_of("target", "memory", "user"),)

    user_id: str = Field(primary_key=True, foreign_key="users.id", ondelete="CASCADE")
    target: str = Field(primary_key=True)
    text: str = ""
    pending: str = ""
    version: int = 0
    updated_at: datetime = Field(default_factory=utcnow)
    # a consolidation's claim on the store (it calls a model: no lock is held that long)
    consolidating_until: datetime | None = None


class MemoryArchive(SQLModel, table=True):
    """The stores of a person merged into another by a link, kept as they were (the
    database's `memories/.merged/`); the person's row is gone, so no foreign key."""

    __tablename__ = "memory_archive"

    id: int | None = Field(default=None, primary_key=True)
    user_id: str
    merged_into: str
    target: str
    text: str
    pending: str = ""
    archived_at: datetime = Field(default_factory=utcnow)


class ConsolidationState(SQLModel, table=True):
    __tablename__ = "consolidation_state"

    user_id: str = Field(primary_key=True, foreign_key="users.id", ondelete="CASCADE")
    target: str = Field(primary_key=True)
    needs_consolidation: bool = False
    attempts: int = 0
    last_attempt_at: datetime | None = None
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    last_consolidated_at: datetime | None = None
    last_summary: str | None = None
    notice_pending: str | None = None


class ConsolidationRun(SQLModel, table=True):
    """One consolidation of a store that got as far as a proposal (or a model to ask):
    applied, or rejected / failed with the reason, for the dashboard's history."""

    __tablename__ = "consolidation_runs"
    __table_args__ = (Index("ix_consolidation_runs_user", "user_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    user_id: str  # a record, like the audit log's: no key to users (stores may precede them)
    target: str
    at: datetime = Field(default_factory=utcnow)
    status: str  # applied | no_model | rejected | failed | raced
    detail: str = ""
    entries_before: int = 0
    entries_after: int = 0
    used_before: int = 0
    used_after: int = 0
    version_id: int | None = None  # the memory_versions row an applied run wrote


class JobRun(SQLModel, table=True):
    __tablename__ = "job_runs"

    job_id: str = Field(primary_key=True)
    last_run_at: datetime = Field(default_factory=utcnow)
    ok: bool = True
    summary: str = ""


class JobSchedule(SQLModel, table=True):
    """When a job was first scheduled: a job never run is first due an interval after
    it, whichever gateway starts and however often (its timers live in memory). An
    operator's controls live here too, for every gateway on the database to see: a
    paused job skips its runs; a run asked for is run once, soon, by whichever gateway's
    turn it is (gateway/scheduler.py)."""

    __tablename__ = "job_schedules"

    job_id: str = Field(primary_key=True)
    since: datetime = Field(default_factory=utcnow)
    paused_at: datetime | None = None
    paused_by: str = ""  # who paused it (a user id, or "cli")
    run_asked_at: datetime | None = None
    run_asked_by: str = ""


class JobHistory(SQLModel, table=True):
    """One run of a scheduled job: when, how long, its result, where it ran and whether
    an operator asked for it (the last HISTORY_KEPT runs of each job are kept)."""

    __tablename__ = "job_history"
    __table_args__ = (Index("ix_job_history_job", "job_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: str
    started_at: datetime
    seconds: float = 0.0
    ok: bool = True
    summary: str = ""
    instance: str = ""  # host:pid of the gateway that ran it
    asked_by: str = ""  # who asked for this run ("" for a scheduled one)


class PlatformMark(SQLModel, table=True):
    """Where each chat was last read on a platform that does not redeliver what was
    sent while no one was connected (Discord): the messages after it are fetched when
    the platform connects again (gateway/catch_up.py)."""

    __tablename__ = "platform_marks"

    platform: str = Field(primary_key=True)
    chat_id: str = Field(primary_key=True)
    chat_type: str = "dm"
    thread_id: str | None = None
    message_id: str  # the platform's id of the last message read, as the adapter gave it
    position: int = Field(sa_type=BigInteger)  # the platform's order (a snowflake)
    seen_at: datetime = Field(default_factory=utcnow)


class Delivery(SQLModel, table=True):
    """The outcome of sending a reply to a platform, kept when it failed."""

    __tablename__ = "deliveries"
    __table_args__ = (
        _one_of("status", "sent", "failed"),
        Index("ix_deliveries_message", "message_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    message_id: int | None = Field(default=None, foreign_key="messages.id", ondelete="CASCADE")
    platform: str
    chat_id: str
    status: str  # sent | failed
    attempts: int = 1
    error: str | None = None
    created_at: datetime = Field(default_factory=utcnow)


class SystemPrompt(SQLModel, table=True):
    """Frozen system prompts, stored once by hash and referenced by sessions."""

    __tablename__ = "system_prompts"

    hash: str = Field(primary_key=True)
    text: str
    created_at: datetime = Field(default_factory=utcnow)


class LinkCode(SQLModel, table=True):
    """A one-time code that attaches another identity to `user_id`."""

    __tablename__ = "link_codes"
    __table_args__ = (Index("ix_link_codes_user", "user_id"),)

    code: str = Field(primary_key=True)
    user_id: str = Field(foreign_key="users.id", ondelete="CASCADE")
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    used_at: datetime | None = None


class AccessFailure(SQLModel, table=True):
    """Failed code attempts of one requester, for the lockout."""

    __tablename__ = "access_failures"

    requester: str = Field(primary_key=True)
    failures: int = 0
    locked_until: datetime | None = None
    updated_at: datetime = Field(default_factory=utcnow)


class PairingRequest(SQLModel, table=True):
    __tablename__ = "pairing_requests"
    __table_args__ = (
        _one_of("status", "pending", "approved", "denied"),
        Index("ix_pairing_requester", "platform", "platform_user_id"),
    )

    code: str = Field(primary_key=True)
    platform: str
    platform_user_id: str
    display_name: str = ""
    chat_id: str = ""  # where the requester asked: told there once approved
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    status: str = "pending"  # pending | approved | denied
    decided_by: str | None = None
    decided_at: datetime | None = None
    notified_at: datetime | None = None


class AccessRule(SQLModel, table=True):
    """An allow or block of a platform user or chat, set by an admin at run time."""

    __tablename__ = "access_rules"
    __table_args__ = (
        _one_of("kind", "user", "chat"),
        _one_of("rule", "allow", "block"),
    )

    platform: str = Field(primary_key=True)
    kind: str = Field(primary_key=True)  # user | chat
    subject: str = Field(primary_key=True)
    rule: str  # allow | block
    created_by: str | None = None
    created_at: datetime = Field(default_factory=utcnow)


class Reminder(SQLModel, table=True):
    """A reminder or scheduled message: one-off (`cron` None) or recurring."""

    __tablename__ = "reminders"
    __table_args__ = (
        Index("ix_reminders_due", "status", "due_at"),
        Index("ix_reminders_user", "user_id", "status"),
    )

    id: str = Field(primary_key=True)
    user_id: str  # the person who asked for it (it is delivered as theirs)
    owner_id: str  # the owner of the session it runs in (the chat, in a shared session)
    platform: str
    chat_id: str
    chat_type: str  # dm | group | channel | thread
    thread_id: str | None = None
    session_key: str
    text: str  # what to send; with `prompt`, the instruction of a short agent turn
    prompt: bool = False
    cron: str | None = None  # five fields, in `timezone`
    timezone: str
    due_at: datetime | None = None  # the next run (UTC); None once done or cancelled
    retry_at: datetime | None = None  # a failed delivery of that run is tried again then
    status: str = "active"  # active | paused | done | cancelled
    reason: str = ""  # why it is paused
    runs: int = 0
    failures: int = 0  # failed deliveries of the current run
    last_run_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)


class ReminderRun(SQLModel, table=True):
    """One run of a reminder: inserting it is the claim to deliver it."""

    __tablename__ = "reminder_runs"

    reminder_id: str = Field(primary_key=True, foreign_key="reminders.id", ondelete="CASCADE")
    due_at: datetime = Field(primary_key=True)
    claimed_by: str
    claimed_at: datetime = Field(default_factory=utcnow)
    status: str = "sending"  # sending | delivered | failed | unknown | skipped
    late: bool = False
    attempts: int = 0
    error: str = ""
    finished_at: datetime | None = None


class Media(SQLModel, table=True):
    """A file someone sent (a photo, a voice note, a document), kept by reference."""

    __tablename__ = "media"
    __table_args__ = (
        Index("ix_media_session", "session_id"),
        Index("ix_media_path", "path"),
    )

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(foreign_key="sessions.id", ondelete="CASCADE")
    user_id: str
    sha256: str
    kind: str
    mime: str
    name: str = ""
    bytes: int
    path: str  # relative to HERMES_HOME: media/<sha256>.<ext>
    created_at: datetime = Field(default_factory=utcnow)


class DashboardSession(SQLModel, table=True):
    """A login to the web dashboard: the cookie carries the token, the row its hash
    (a copy of state.db gives no one a session); ended by logout or expiry."""

    __tablename__ = "dashboard_sessions"
    __table_args__ = (Index("ix_dashboard_sessions_user", "user_id"),)

    token_hash: str = Field(primary_key=True)
    user_id: str = Field(foreign_key="users.id", ondelete="CASCADE")
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    ended_at: datetime | None = None


class DashboardLink(SQLModel, table=True):
    """A one-time login link an owner or admin asked the bot for (`/dashboard`)."""

    __tablename__ = "dashboard_links"

    token_hash: str = Field(primary_key=True)
    user_id: str = Field(foreign_key="users.id", ondelete="CASCADE")
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    used_at: datetime | None = None


class OutboxEntry(SQLModel, table=True):
    """A write for an external memory provider, kept until the provider took it: the
    turn to sync, the memory change to mirror, the session that ended. Replayed in
    `id` order per person and provider; `leased_by`/`lease_until`: the gateway that is
    delivering the person's oldest row now (several gateways never deliver one person's
    rows at once)."""

    __tablename__ = "provider_outbox"
    __table_args__ = (Index("ix_provider_outbox_person", "provider", "user_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    provider: str
    user_id: str  # a record, like the audit log's: the row outlives nothing it points to
    kind: str  # sync_turn | memory_write | session_switch | session_end
    payload: str  # JSON
    created_at: datetime = Field(default_factory=utcnow)
    attempts: int = 0
    last_error: str = ""
    leased_by: str = ""
    lease_until: datetime | None = None


class OutboxDrop(SQLModel, table=True):
    """How many of a person's provider writes the outbox gave up on (full, or too old),
    and when last: what the status line reports."""

    __tablename__ = "provider_outbox_drops"

    provider: str = Field(primary_key=True)
    user_id: str = Field(primary_key=True)
    dropped: int = 0
    last_at: datetime = Field(default_factory=utcnow)
    reason: str = ""


class Confirmation(SQLModel, table=True):
    """Something the assistant may do for a person only once they pressed a button (or
    typed `/confirm CODE`): a message to a chat it never sent to for them (`message`),
    their first use of an MCP server (`mcp`), a memory write that repeats fetched text
    (`memory`). `subject` is what a yes consents to from then on (`message:slack:user:U1`,
    `mcp:notes`; "" for a one-off). A message is also the outbox of its delivery:
    `ready` (confirmed, or to a chat consented before) -> `sending` (claimed by
    `claimed_by`) -> `sent`, `failed` or `unknown`; the process that has the target's
    platform delivers it."""

    __tablename__ = "confirmations"
    __table_args__ = (
        _one_of("kind", "message", "mcp", "memory"),
        _one_of(
            "status",
            "asked",
            "declined",
            "done",
            "ready",
            "sending",
            "sent",
            "failed",
            "unknown",
            "expired",
        ),
        Index("ix_confirmations_user", "user_id", "subject"),
        Index("ix_confirmations_status", "status", "platform"),
    )

    code: str = Field(primary_key=True)
    user_id: str  # who must say yes (a record: kept when they are deleted)
    kind: str
    subject: str = ""
    payload: str = "{}"  # JSON: what a yes does
    question: str = ""  # what the person was asked (shown again with the outcome)
    platform: str = ""  # a message's target platform: the process that has it sends it
    status: str = "asked"
    detail: str = ""  # the outcome in words (an error, where it was stored)
    claimed_by: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    decided_at: datetime | None = None


class LogRecord(SQLModel, table=True):
    """A warning or an error a gateway logged (redacted as its log line is), kept for
    the dashboard across restarts and instances."""

    __tablename__ = "log_records"
    __table_args__ = (
        Index("ix_log_records_at", "at"),
        Index("ix_log_records_level_at", "level", "at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    at: datetime
    level: int
    logger: str = ""
    instance: str = ""  # host:pid of the process that logged it
    turn: str = ""
    message: str = ""  # the formatted line's message, with its traceback if any


class UsageDay(SQLModel, table=True):
    """Tokens a person's conversations used on one UTC day with one model (the
    dashboard's Usage page prices them): added to with each reply."""

    __tablename__ = "usage_days"
    __table_args__ = (Index("ix_usage_days_user", "user_id", "day"),)

    day: str = Field(primary_key=True)  # YYYY-MM-DD, UTC
    user_id: str = Field(primary_key=True, foreign_key="users.id", ondelete="CASCADE")
    model: str = Field(default="", primary_key=True)  # "" before v25 (not recorded)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0


class PlatformSpan(SQLModel, table=True):
    """A stretch of time one gateway instance saw one platform in one state ("up",
    "down" with why, "standby": another instance holds its one connection), from `since`
    to `until`, the last time it was known (renewed every minute while it lasts: after a
    crash the span ends near the crash, not `ended`). The dashboard's platform health reads them."""

    __tablename__ = "platform_spans"
    __table_args__ = (
        _one_of("state", "up", "down", "standby"),
        Index("ix_platform_spans_until", "until"),
    )

    id: int | None = Field(default=None, primary_key=True)
    instance: str  # the gateway instance (host:pid, or its cluster id)
    platform: str
    state: str
    detail: str = ""  # why it was down, as its status said when the span began
    since: datetime
    until: datetime
    ended: bool = False  # False: still so when `until` was written (a crash leaves it)


class AuditEntry(SQLModel, table=True):
    """A change an operator made from the dashboard: who, what, when (kept when the
    actor is deleted: the record outlives them)."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_at", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(default_factory=utcnow)
    actor: str
    action: str
    subject: str = ""
    detail: str = ""
