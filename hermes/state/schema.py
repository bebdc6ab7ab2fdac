"""Versioned schema: ordered migrations keyed by `PRAGMA user_version`.

A new database runs every migration; an older one runs those it lacks, in place, in
one transaction each, keeping its data. Never edit a shipped migration: add one.

Full-text search uses two contentless FTS5 tables kept in sync by triggers, indexing
only user and assistant text (tool output is stored, never ranked):
- `messages_fts`: `porter unicode61 remove_diacritics 2` for space-separated languages,
  with a `scope` column holding the message's user id so a search is confined to one
  person inside the index (`scope:<id> AND (...)`) rather than filtered afterwards;
- `messages_cjk` (since v9; it replaced the `trigram` index of v2): the bigrams and
  characters of each Korean, Chinese and Japanese run (hermes/state/cjk.py, through the
  `hermes_cjk` SQL function every Hermes connection registers: a program that writes
  messages with plain sqlite3 must register it too), with the same `scope` column.
"""

from __future__ import annotations

_INDEXED = "{row}.role IN ('user', 'assistant') AND {row}.content <> ''"


def _fts_triggers(table: str, columns: str, values: str) -> list[str]:
    new, old = _INDEXED.format(row="new"), _INDEXED.format(row="old")
    insert = f"INSERT INTO {table}(rowid, {columns}) VALUES (new.id, {values.format(r='new')})"
    delete = (
        f"INSERT INTO {table}({table}, rowid, {columns}) "
        f"VALUES ('delete', old.id, {values.format(r='old')})"
    )
    return [
        f"CREATE TRIGGER {table}_ai AFTER INSERT ON messages WHEN {new} BEGIN {insert}; END",
        f"CREATE TRIGGER {table}_ad AFTER DELETE ON messages WHEN {old} BEGIN {delete}; END",
        f"CREATE TRIGGER {table}_ud AFTER UPDATE OF content, role ON messages WHEN {old} "
        f"BEGIN {delete}; END",
        f"CREATE TRIGGER {table}_ui AFTER UPDATE OF content, role ON messages WHEN {new} "
        f"BEGIN {insert}; END",
    ]


SCOPE = "'s' || substr({r}.user_id, 3)"  # 'u_0123…' -> one token 's0123…'

_V1 = [
    """CREATE TABLE users (
        id TEXT PRIMARY KEY,
        display_name TEXT NOT NULL DEFAULT '',
        role TEXT NOT NULL DEFAULT 'user' CHECK (role IN ('owner', 'admin', 'user')),
        status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'pending', 'blocked')),
        created_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE identities (
        id INTEGER PRIMARY KEY,
        platform TEXT NOT NULL,
        platform_user_id TEXT NOT NULL,
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        display_name TEXT NOT NULL DEFAULT '',
        first_seen TIMESTAMP NOT NULL,
        last_seen TIMESTAMP NOT NULL,
        UNIQUE (platform, platform_user_id)
    )""",
    "CREATE INDEX ix_identities_user ON identities(user_id)",
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        session_key TEXT NOT NULL,
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        platform TEXT NOT NULL,
        chat_type TEXT NOT NULL DEFAULT 'dm'
            CHECK (chat_type IN ('dm', 'group', 'channel', 'thread')),
        chat_id TEXT NOT NULL DEFAULT '',
        thread_id TEXT,
        title TEXT NOT NULL DEFAULT '',
        started_at TIMESTAMP NOT NULL,
        last_active_at TIMESTAMP NOT NULL,
        ended_at TIMESTAMP,
        end_reason TEXT,
        parent_session_id TEXT REFERENCES sessions(id) ON DELETE SET NULL,
        system_prompt_hash TEXT,
        message_count INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX ix_sessions_user_active ON sessions(user_id, last_active_at)",
    "CREATE INDEX ix_sessions_key ON sessions(session_key, ended_at)",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        user_id TEXT NOT NULL,
        platform TEXT NOT NULL,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
        content TEXT NOT NULL DEFAULT '',
        tool_calls TEXT,
        tool_call_id TEXT,
        tool_name TEXT,
        platform_message_id TEXT,
        created_at TIMESTAMP NOT NULL,
        token_count INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX ix_messages_session ON messages(session_id, id)",
    "CREATE INDEX ix_messages_user ON messages(user_id, created_at)",
    "CREATE UNIQUE INDEX ux_messages_platform_message ON messages(platform, platform_message_id)"
    " WHERE platform_message_id IS NOT NULL",
    """CREATE TABLE memory_events (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        target TEXT NOT NULL,
        action TEXT NOT NULL,
        entry_before TEXT,
        entry_after TEXT,
        actor TEXT NOT NULL CHECK (actor IN ('agent', 'user', 'admin', 'consolidator')),
        session_id TEXT REFERENCES sessions(id) ON DELETE SET NULL,
        message_id INTEGER REFERENCES messages(id) ON DELETE SET NULL,
        created_at TIMESTAMP NOT NULL
    )""",
    "CREATE INDEX ix_memory_events_user ON memory_events(user_id, created_at)",
    """CREATE TABLE system_prompts (
        hash TEXT PRIMARY KEY,
        text TEXT NOT NULL,
        created_at TIMESTAMP NOT NULL
    )""",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(body, scope, content='', "
    "tokenize='porter unicode61 remove_diacritics 2')",
    *_fts_triggers("messages_fts", "body, scope", "{r}.content, " + SCOPE),
]

# v2: substring search for CJK text. Added after v1 so the upgrade path is exercised:
# a v1 database gains the index and it is filled from the rows already there.
_V2 = [
    "CREATE VIRTUAL TABLE messages_tri USING fts5(body, content='', tokenize='trigram')",
    *_fts_triggers("messages_tri", "body", "{r}.content"),
    "INSERT INTO messages_tri(rowid, body) SELECT id, content FROM messages WHERE "
    + _INDEXED.format(row="messages"),
]

# v3: memory versions (undo), consolidation bookkeeping, scheduler job results.
_V3 = [
    """CREATE TABLE memory_versions (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        target TEXT NOT NULL,
        text_before TEXT NOT NULL,
        text_after TEXT NOT NULL,
        actor TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        created_at TIMESTAMP NOT NULL,
        undone_at TIMESTAMP
    )""",
    "CREATE INDEX ix_memory_versions_user ON memory_versions(user_id, id)",
    """CREATE TABLE consolidation_state (
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        target TEXT NOT NULL,
        needs_consolidation INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_attempt_at TIMESTAMP,
        next_attempt_at TIMESTAMP,
        last_error TEXT,
        last_consolidated_at TIMESTAMP,
        last_summary TEXT,
        notice_pending TEXT,
        PRIMARY KEY (user_id, target)
    )""",
    """CREATE TABLE job_runs (
        job_id TEXT PRIMARY KEY,
        last_run_at TIMESTAMP NOT NULL,
        ok INTEGER NOT NULL,
        summary TEXT NOT NULL DEFAULT ''
    )""",
]

# v4: replies that could not be delivered to a platform, with their failure.
_V4 = [
    """CREATE TABLE deliveries (
        id INTEGER PRIMARY KEY,
        message_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        platform TEXT NOT NULL,
        chat_id TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('sent', 'failed')),
        attempts INTEGER NOT NULL DEFAULT 1,
        error TEXT,
        created_at TIMESTAMP NOT NULL
    )""",
    "CREATE INDEX ix_deliveries_message ON deliveries(message_id)",
]


def _update_trigger(table: str, columns: str, values: str, on: str) -> list[str]:
    """One trigger for updates: delete the old row's tokens, then index the new ones.

    (v1 and v2 used two triggers for this; SQLite runs triggers of one event
    most-recent-first, so the insert ran before the delete and the delete then removed
    the new tokens too.)"""
    new, old = _INDEXED.format(row="new"), _INDEXED.format(row="old")
    return [
        f"DROP TRIGGER {table}_ud",
        f"DROP TRIGGER {table}_ui",
        f"CREATE TRIGGER {table}_u AFTER UPDATE OF {on} ON messages BEGIN "
        f"INSERT INTO {table}({table}, rowid, {columns}) "
        f"SELECT 'delete', old.id, {values.format(r='old')} WHERE {old}; "
        f"INSERT INTO {table}(rowid, {columns}) SELECT new.id, {values.format(r='new')} "
        f"WHERE {new}; END",
    ]


# v5: people and access: link codes, lockouts, pairing requests, access rules; entries
# of a merged account waiting for consolidation (kept with each version for exact undo).
_V5 = [
    """CREATE TABLE link_codes (
        code TEXT PRIMARY KEY,
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        created_at TIMESTAMP NOT NULL,
        expires_at TIMESTAMP NOT NULL,
        used_at TIMESTAMP
    )""",
    "CREATE INDEX ix_link_codes_user ON link_codes(user_id)",
    """CREATE TABLE access_failures (
        requester TEXT PRIMARY KEY,
        failures INTEGER NOT NULL DEFAULT 0,
        locked_until TIMESTAMP,
        updated_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE pairing_requests (
        code TEXT PRIMARY KEY,
        platform TEXT NOT NULL,
        platform_user_id TEXT NOT NULL,
        display_name TEXT NOT NULL DEFAULT '',
        chat_id TEXT NOT NULL DEFAULT '',
        created_at TIMESTAMP NOT NULL,
        expires_at TIMESTAMP NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending'
            CHECK (status IN ('pending', 'approved', 'denied')),
        decided_by TEXT,
        decided_at TIMESTAMP,
        notified_at TIMESTAMP
    )""",
    "CREATE INDEX ix_pairing_requester ON pairing_requests(platform, platform_user_id)",
    """CREATE TABLE access_rules (
        platform TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('user', 'chat')),
        subject TEXT NOT NULL,
        rule TEXT NOT NULL CHECK (rule IN ('allow', 'block')),
        created_by TEXT,
        created_at TIMESTAMP NOT NULL,
        PRIMARY KEY (platform, kind, subject)
    )""",
    "ALTER TABLE memory_versions ADD COLUMN pending_before TEXT",
    "ALTER TABLE memory_versions ADD COLUMN pending_after TEXT",
    # a merge moves messages to another user: the scope token must follow them
    *_update_trigger(
        "messages_fts", "body, scope", "{r}.content, " + SCOPE, "content, role, user_id"
    ),
    *_update_trigger("messages_tri", "body", "{r}.content", "content, role"),
]

# v6: a group chat's shared session (group_scope: per_chat) is marked as such: it
# belongs to the chat (a user of kind 'chat', never a person), its prompt holds no
# personal memory, and review skips it.
_V6 = [
    "ALTER TABLE sessions ADD COLUMN shared BOOLEAN NOT NULL DEFAULT 0",
    "ALTER TABLE users ADD COLUMN kind TEXT NOT NULL DEFAULT 'person' "
    "CHECK (kind IN ('person', 'chat'))",
]

# v7: a memory change is recorded as an intent (what the file will hold, and the events
# and version to log) before the file is replaced, and completed after; a crash between
# the two is settled at the store's next use (see hermes/memory/journal.py).
_V7 = [
    """CREATE TABLE memory_intents (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        target TEXT NOT NULL,
        text_before TEXT NOT NULL,
        text_after TEXT NOT NULL,
        planned TEXT NOT NULL,
        created_at TIMESTAMP NOT NULL
    )""",
    "CREATE INDEX ix_memory_intents_store ON memory_intents(user_id, target, id)",
]

# v8: a merged-away user id stays an alias of the survivor, so a write or a link code
# that still names it (a turn that started before the merge) reaches the right person.
_V8 = [
    """CREATE TABLE user_aliases (
        old_id TEXT PRIMARY KEY,
        user_id TEXT NOT NULL,
        merged_at TIMESTAMP NOT NULL
    )""",
    "CREATE INDEX ix_user_aliases_user ON user_aliases(user_id)",
]

# v9: Korean, Chinese and Japanese as bigrams and characters, ranked per user like words
# (hermes/state/cjk.py), in place of substring search over trigrams (a question had to
# contain the answer's exact wording). Filled from the rows already there.
# Only text with a character outside printable ASCII can hold CJK: the GLOB (short-
# circuited) spares plain text the call into Python. SQLite resolves the function when
# it compiles a trigger, so a program writing to `messages` must register `hermes_cjk`
# (every Hermes connection does, hermes/state/engine.py); reading needs nothing.
_CJK_ROW = (
    _INDEXED + " AND {row}.content GLOB '*[^\t\n\r -~]*' AND hermes_cjk({row}.content, '') <> ''"
)
_CJK_VALUES = "hermes_cjk({r}.content, " + SCOPE + "), " + SCOPE
_V9 = [
    "CREATE VIRTUAL TABLE messages_cjk USING fts5(body, scope, content='', "
    "tokenize='unicode61 remove_diacritics 0')",
    "CREATE TRIGGER messages_cjk_ai AFTER INSERT ON messages WHEN "
    + _CJK_ROW.format(row="new")
    + " BEGIN INSERT INTO messages_cjk(rowid, body, scope) VALUES (new.id, "
    + _CJK_VALUES.format(r="new")
    + "); END",
    "CREATE TRIGGER messages_cjk_ad AFTER DELETE ON messages WHEN "
    + _CJK_ROW.format(row="old")
    + " BEGIN INSERT INTO messages_cjk(messages_cjk, rowid, body, scope) VALUES ('delete', "
    + "old.id, "
    + _CJK_VALUES.format(r="old")
    + "); END",
    "CREATE TRIGGER messages_cjk_u AFTER UPDATE OF content, role, user_id ON messages BEGIN "
    "INSERT INTO messages_cjk(messages_cjk, rowid, body, scope) SELECT 'delete', old.id, "
    + _CJK_VALUES.format(r="old")
    + " WHERE "
    + _CJK_ROW.format(row="old")
    + "; INSERT INTO messages_cjk(rowid, body, scope) SELECT new.id, "
    + _CJK_VALUES.format(r="new")
    + " WHERE "
    + _CJK_ROW.format(row="new")
    + "; END",
    "INSERT INTO messages_cjk(rowid, body, scope) SELECT id, "
    + _CJK_VALUES.format(r="messages")
    + " FROM messages WHERE "
    + _CJK_ROW.format(row="messages"),
    "DROP TRIGGER messages_tri_ai",
    "DROP TRIGGER messages_tri_ad",
    "DROP TRIGGER messages_tri_u",
    "DROP TABLE messages_tri",
]

# v10: hybrid retrieval (hermes/state/vectors.py). `vector_model` names the embeddings
# model in use (no row: hybrid search was never switched on, and nothing is queued);
# each vector carries its model and dimension, and a search reads only the model in use,
# so a change of model is a rebuild, never a mix. `id` grows with every vector written
# (AUTOINCREMENT: never reused), which tells a per-user cache what it lacks. New and
# edited messages are queued by triggers for the background embedder; a merge moves the
# vectors with their messages; deleting a message deletes its vector and queue entry.
_VECTOR_QUEUED = (
    "INSERT OR IGNORE INTO embedding_queue(message_id) SELECT new.id WHERE "
    + _INDEXED.format(row="new")
    + " AND EXISTS (SELECT 1 FROM vector_model)"
)
_V10 = [
    """CREATE TABLE vector_model (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        model TEXT NOT NULL,
        dim INTEGER,
        changed_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE message_vectors (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id INTEGER NOT NULL UNIQUE REFERENCES messages(id) ON DELETE CASCADE,
        user_id TEXT NOT NULL,
        model TEXT NOT NULL,
        dim INTEGER NOT NULL,
        vector BLOB NOT NULL
    )""",
    "CREATE INDEX ix_message_vectors_user ON message_vectors(user_id, model, id)",
    """CREATE TABLE embedding_queue (
        message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE
    )""",
    f"CREATE TRIGGER embedding_queue_ai AFTER INSERT ON messages BEGIN {_VECTOR_QUEUED}; END",
    "CREATE TRIGGER message_vectors_u AFTER UPDATE OF content, role ON messages "
    "WHEN old.content IS NOT new.content OR old.role IS NOT new.role BEGIN "
    f"DELETE FROM message_vectors WHERE message_id = old.id; {_VECTOR_QUEUED}; END",
    "CREATE TRIGGER message_vectors_owner AFTER UPDATE OF user_id ON messages "
    "WHEN old.user_id IS NOT new.user_id BEGIN "
    "UPDATE message_vectors SET user_id = new.user_id WHERE message_id = new.id; END",
]

# v11: reminders and scheduled messages (hermes/state/reminders.py), and each person's
# time zone. A reminder keeps where it was created (platform, chat, thread, session key)
# and its next due time in UTC; `reminder_runs` has one row per (reminder, due time):
# whoever inserts it delivers that run, so two gateways (or a retry after a crash)
# never deliver the same run twice.
_V11 = [
    "ALTER TABLE users ADD COLUMN timezone TEXT",
    """CREATE TABLE reminders (
        id TEXT PRIMARY KEY,
        user_id TEXT NOT NULL,
        owner_id TEXT NOT NULL,
        platform TEXT NOT NULL,
        chat_id TEXT NOT NULL,
        chat_type TEXT NOT NULL,
        thread_id TEXT,
        session_key TEXT NOT NULL,
        text TEXT NOT NULL,
        prompt BOOLEAN NOT NULL DEFAULT 0,
        cron TEXT,
        timezone TEXT NOT NULL,
        due_at TIMESTAMP,
        retry_at TIMESTAMP,
        status TEXT NOT NULL DEFAULT 'active',
        reason TEXT NOT NULL DEFAULT '',
        runs INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        last_run_at TIMESTAMP,
        created_at TIMESTAMP NOT NULL
    )""",
    "CREATE INDEX ix_reminders_due ON reminders(status, due_at)",
    "CREATE INDEX ix_reminders_user ON reminders(user_id, status)",
    """CREATE TABLE reminder_runs (
        reminder_id TEXT NOT NULL REFERENCES reminders(id) ON DELETE CASCADE,
        due_at TIMESTAMP NOT NULL,
        claimed_by TEXT NOT NULL,
        claimed_at TIMESTAMP NOT NULL,
        status TEXT NOT NULL DEFAULT 'sending',
        late BOOLEAN NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        error TEXT NOT NULL DEFAULT '',
        finished_at TIMESTAMP,
        PRIMARY KEY (reminder_id, due_at)
    )""",
]

# v12: photos, voice notes and files people sent, stored by reference: the file lives
# under $HERMES_HOME/media/ (content-hashed, 0600), the row says whose it is and which
# session it came in; deleting the session deletes the row (the maintenance job then
# removes files no row refers to). Nothing of it is in the search index.
_V12 = [
    """CREATE TABLE media (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        user_id TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        kind TEXT NOT NULL,
        mime TEXT NOT NULL,
        name TEXT NOT NULL DEFAULT '',
        bytes INTEGER NOT NULL,
        path TEXT NOT NULL,
        created_at TIMESTAMP NOT NULL
    )""",
    "CREATE INDEX ix_media_session ON media(session_id)",
    "CREATE INDEX ix_media_path ON media(path)",
]

# v13: memory writes held for the memory guard's model (it could not answer): the tool
# call's arguments as given, whose it was and what caused it; none of it is in any
# prompt. Judged again when the model answers; then written or refused, and removed.
_V13 = [
    """CREATE TABLE memory_pending (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        args TEXT NOT NULL,
        actor TEXT NOT NULL,
        session_id TEXT,
        message_id INTEGER,
        reason TEXT NOT NULL DEFAULT '',
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at TIMESTAMP NOT NULL,
        last_tried_at TIMESTAMP
    )""",
    "CREATE INDEX ix_memory_pending_user ON memory_pending(user_id)",
]

# v14: memory stores in the database (memory.backend: database; what PostgreSQL uses):
# each person's MEMORY.md / USER.md text, its waiting entries and a version compared and
# swapped by every write; and the stores of people merged away by a link.
_V14 = [
    """CREATE TABLE memory_stores (
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        target TEXT NOT NULL CONSTRAINT ck_target CHECK (target IN ('memory', 'user')),
        text TEXT NOT NULL DEFAULT '',
        pending TEXT NOT NULL DEFAULT '',
        version INTEGER NOT NULL DEFAULT 0,
        updated_at TIMESTAMP NOT NULL,
        consolidating_until TIMESTAMP,
        PRIMARY KEY (user_id, target)
    )""",
    """CREATE TABLE memory_archive (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        merged_into TEXT NOT NULL,
        target TEXT NOT NULL,
        text TEXT NOT NULL,
        pending TEXT NOT NULL DEFAULT '',
        archived_at TIMESTAMP NOT NULL
    )""",
]

# v15: PostgreSQL's search keys (hermes/state/postgres.py); nothing changes on SQLite
_V15: list[str] = []

# v16: the rows that coordinate several gateways (hermes/state/cluster.py); PostgreSQL
# only: a SQLite home keeps its one-process lock (gateway/instance.py)
_V16: list[str] = []

# v17: the web dashboard's logins and one-time links (hashes only), its audit log, and
# every consolidation's outcome (applied, or rejected with the reason) for its history
_V17 = [
    """CREATE TABLE dashboard_sessions (
        token_hash TEXT PRIMARY KEY,
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        created_at TIMESTAMP NOT NULL,
        expires_at TIMESTAMP NOT NULL,
        ended_at TIMESTAMP
    )""",
    "CREATE INDEX ix_dashboard_sessions_user ON dashboard_sessions(user_id)",
    """CREATE TABLE dashboard_links (
        token_hash TEXT PRIMARY KEY,
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        created_at TIMESTAMP NOT NULL,
        expires_at TIMESTAMP NOT NULL,
        used_at TIMESTAMP
    )""",
    """CREATE TABLE audit_log (
        id INTEGER PRIMARY KEY,
        at TIMESTAMP NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        subject TEXT NOT NULL DEFAULT '',
        detail TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX ix_audit_log_at ON audit_log(at)",
    """CREATE TABLE consolidation_runs (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        target TEXT NOT NULL,
        at TIMESTAMP NOT NULL,
        status TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '',
        entries_before INTEGER NOT NULL DEFAULT 0,
        entries_after INTEGER NOT NULL DEFAULT 0,
        used_before INTEGER NOT NULL DEFAULT 0,
        used_after INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX ix_consolidation_runs_user ON consolidation_runs(user_id, id)",
]

# v18: external memory providers' outbox: their writes kept until delivered, in order
# per person (hermes/state/outbox.py), and what it gave up on
_V18 = [
    """CREATE TABLE provider_outbox (
        id INTEGER PRIMARY KEY,
        provider TEXT NOT NULL,
        user_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at TIMESTAMP NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT NOT NULL DEFAULT '',
        leased_by TEXT NOT NULL DEFAULT '',
        lease_until TIMESTAMP
    )""",
    "CREATE INDEX ix_provider_outbox_person ON provider_outbox(provider, user_id, id)",
    """CREATE TABLE provider_outbox_drops (
        provider TEXT NOT NULL,
        user_id TEXT NOT NULL,
        dropped INTEGER NOT NULL DEFAULT 0,
        last_at TIMESTAMP NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (provider, user_id)
    )""",
]

# v19: a consolidation run names the change it made (the dashboard links them by id)
_V19 = ["ALTER TABLE consolidation_runs ADD COLUMN version_id INTEGER"]

# v20: where a reply to a platform message is on its way (stored, sending, sent...)
_V20 = ["ALTER TABLE messages ADD COLUMN delivery TEXT"]

# v21: each job's first schedule (its timers live in memory on both backends now:
# APScheduler's job store in state.db wrote on the event loop at every run); where each
# chat was last read on a platform that does not redeliver (Discord's catch-up)
_V21 = [
    """CREATE TABLE job_schedules (
        job_id TEXT PRIMARY KEY,
        since TIMESTAMP NOT NULL
    )""",
    "DROP TABLE IF EXISTS apscheduler_jobs",
    """CREATE TABLE platform_marks (
        platform TEXT NOT NULL,
        chat_id TEXT NOT NULL,
        chat_type TEXT NOT NULL DEFAULT 'dm',
        thread_id TEXT,
        message_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        seen_at TIMESTAMP NOT NULL,
        PRIMARY KEY (platform, chat_id)
    )""",
]

# v22: what waits for a person's yes (a first message to a chat, a first use of an MCP
# server, a memory write repeating fetched text), and the messages' outbox
_V22 = [
    """CREATE TABLE confirmations (
        code TEXT PRIMARY KEY,
        user_id TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('message', 'mcp', 'memory')),
        subject TEXT NOT NULL DEFAULT '',
        payload TEXT NOT NULL DEFAULT '{}',
        question TEXT NOT NULL DEFAULT '',
        platform TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL DEFAULT 'asked' CHECK (status IN ('asked', 'declined', 'done',
            'ready', 'sending', 'sent', 'failed', 'unknown', 'expired')),
        detail TEXT NOT NULL DEFAULT '',
        claimed_by TEXT NOT NULL DEFAULT '',
        created_at TIMESTAMP NOT NULL,
        expires_at TIMESTAMP NOT NULL,
        decided_at TIMESTAMP
    )""",
    "CREATE INDEX ix_confirmations_user ON confirmations(user_id, subject)",
    "CREATE INDEX ix_confirmations_status ON confirmations(status, platform)",
]

# v23: the gateway's warnings and errors, kept across restarts for the dashboard's Logs
# page and its problems (gateway/logs.py StoredLog; pruned by level, `logging.keep_days`)
_V23 = [
    """CREATE TABLE log_records (
        id INTEGER PRIMARY KEY,
        at TIMESTAMP NOT NULL,
        level INTEGER NOT NULL,
        logger TEXT NOT NULL DEFAULT '',
        instance TEXT NOT NULL DEFAULT '',
        turn TEXT NOT NULL DEFAULT '',
        message TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX ix_log_records_at ON log_records(at)",
    "CREATE INDEX ix_log_records_level_at ON log_records(level, at)",
]

# v24: an operator's scheduler controls (pause, run now) and each job's run history
_V24 = [
    "ALTER TABLE job_schedules ADD COLUMN paused_at TIMESTAMP",
    "ALTER TABLE job_schedules ADD COLUMN paused_by TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE job_schedules ADD COLUMN run_asked_at TIMESTAMP",
    "ALTER TABLE job_schedules ADD COLUMN run_asked_by TEXT NOT NULL DEFAULT ''",
    """CREATE TABLE job_history (
        id INTEGER PRIMARY KEY,
        job_id TEXT NOT NULL,
        started_at TIMESTAMP NOT NULL,
        seconds FLOAT NOT NULL DEFAULT 0,
        ok INTEGER NOT NULL,
        summary TEXT NOT NULL DEFAULT '',
        instance TEXT NOT NULL DEFAULT '',
        asked_by TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX ix_job_history_job ON job_history(job_id, id)",
]

# v25: tokens per person, day and model (the dashboard's Usage page); what the sessions
# counted before is kept, on the day each was last active, its model unknown
USAGE_BACKFILL = (
    "INSERT INTO usage_days (day, user_id, model, prompt_tokens, completion_tokens, calls) "
    "SELECT substr(CAST(s.last_active_at AS TEXT), 1, 10), s.user_id, '', "
    "sum(s.prompt_tokens), sum(s.completion_tokens), sum((SELECT count(*) FROM messages m "
    "WHERE m.session_id = s.id AND m.role = 'assistant')) FROM sessions s "
    "WHERE s.prompt_tokens + s.completion_tokens > 0 "
    "GROUP BY substr(CAST(s.last_active_at AS TEXT), 1, 10), s.user_id"
)
_V25 = [
    """CREATE TABLE usage_days (
        day TEXT NOT NULL,
        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        model TEXT NOT NULL DEFAULT '',
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        calls INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (day, user_id, model)
    )""",
    "CREATE INDEX ix_usage_days_user ON usage_days(user_id, day)",
    USAGE_BACKFILL,
]

# v26: each platform's state over time, per gateway instance (the dashboard's platform
# health: uptime and outages)
_V26 = [
    """CREATE TABLE platform_spans (
        id INTEGER PRIMARY KEY,
        instance TEXT NOT NULL,
        platform TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('up', 'down', 'standby')),
        detail TEXT NOT NULL DEFAULT '',
        since TIMESTAMP NOT NULL,
        until TIMESTAMP NOT NULL,
        ended INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX ix_platform_spans_until ON platform_spans(until)",
]

MIGRATIONS: list[list[str]] = [
    _V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13, _V14, _V15,
    _V16, _V17, _V18, _V19, _V20, _V21, _V22, _V23, _V24, _V25, _V26,
]  # fmt: skip
SCHEMA_VERSION = len(MIGRATIONS)
