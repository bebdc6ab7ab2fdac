"""The process's metrics, in Prometheus form (prometheus-client), on one registry.

Each is counted where its concept lives: messages received in the router, reply parts
sent and deliveries failed in the delivery module, turns and tool calls in the agent,
model calls in the LLM client, memory writes and rejections in the memory service (the
one write path), consolidations in its check, session_search in its tool, queue depth
per platform in the router's lanes. The gateway serves `render()` at `GET /metrics`.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

REGISTRY = CollectorRegistry(auto_describe=True)
_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

MESSAGES_RECEIVED = Counter(
    "hermes_messages_received",
    "Messages received from the platforms",
    ["platform"],
    registry=REGISTRY,
)
MESSAGES_SENT = Counter(
    "hermes_messages_sent", "Reply messages (parts) delivered", ["platform"], registry=REGISTRY
)
FILES_SENT = Counter(
    "hermes_files_sent", "Files the assistant wrote and sent", ["platform"], registry=REGISTRY
)
STREAM_EDITS = Counter(
    "hermes_stream_edits",
    "Edits of a message that shows a reply as it is streamed",
    ["platform"],
    registry=REGISTRY,
)
DELIVERIES_FAILED = Counter(
    "hermes_deliveries_failed",
    "Replies that could not be delivered",
    ["platform"],
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "hermes_queue_depth",
    "Messages waiting for their session's turn",
    ["platform"],
    registry=REGISTRY,
)
# several gateways on one database: what this instance holds now, and its hand-overs
LEASES_HELD = Gauge(
    "hermes_leases_held",
    "Leases this gateway instance holds (session, leader, platform)",
    ["kind"],
    registry=REGISTRY,
)
CLUSTER_STATEMENTS = Counter(
    "hermes_cluster_statements",
    "Statements (each one round trip) sent to coordinate with other gateway instances",
    registry=REGISTRY,
)
EVENTS_TAKEN_OVER = Counter(
    "hermes_events_taken_over",
    "Events this instance took from another's queue or from a holder that died",
    registry=REGISTRY,
)
TURN_SECONDS = Histogram(
    "hermes_turn_seconds",
    "One agent turn, model calls and tools included",
    ["platform"],
    buckets=_SECONDS,
    registry=REGISTRY,
)
MODEL_CALL_SECONDS = Histogram(
    "hermes_model_call_seconds", "One chat-completion call", buckets=_SECONDS, registry=REGISTRY
)
MODEL_ERRORS = Counter(
    "hermes_model_errors", "Failed model calls by kind", ["kind"], registry=REGISTRY
)
TOOL_CALLS = Counter("hermes_tool_calls", "Tool calls by tool", ["tool"], registry=REGISTRY)
MEMORY_WRITES = Counter(
    "hermes_memory_writes", "Memory changes written, by action", ["action"], registry=REGISTRY
)
MEMORY_REJECTIONS = Counter(
    "hermes_memory_rejections",
    "Memory writes refused, by reason",
    ["reason"],
    registry=REGISTRY,
)
MEMORY_JUDGE_SECONDS = Histogram(
    "hermes_memory_judge_seconds",
    "The memory guard's model judging one write",
    buckets=_SECONDS,
    registry=REGISTRY,
)
CONSOLIDATIONS = Counter(
    "hermes_consolidations", "Consolidation runs by outcome", ["status"], registry=REGISTRY
)
PROVIDER_PREFETCH_SKIPPED = Counter(
    "hermes_provider_prefetch_skipped",
    "Memory-provider prefetches skipped (too slow, or failed), by reason",
    ["reason"],
    registry=REGISTRY,
)
SEARCH_SECONDS = Histogram(
    "hermes_session_search_seconds",
    "One session_search call",
    buckets=_SECONDS,
    registry=REGISTRY,
)


DB_CALL_SECONDS = Histogram(
    "hermes_db_call_seconds",
    "One state call awaited through the database executor (lock waits and retries "
    "included), by the repository call",
    ["call"],
    buckets=(0.001, 0.005, *_SECONDS),
    registry=REGISTRY,
)
DB_CALLS_ON_LOOP = Counter(
    "hermes_db_calls_on_loop",
    "Database connections taken on the event loop's thread (each one could stall every chat)",
    registry=REGISTRY,
)
DB_LOCK_WAIT_SECONDS = Histogram(
    "hermes_db_lock_wait_seconds",
    "How long a write transaction waited for its locks: `write` SQLite's write lock, "
    "`keys` PostgreSQL's locks by key (a person, a session, a reminder)",
    ["lock"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
EVENT_LOOP_LAG = Histogram(
    "hermes_event_loop_lag_seconds",
    "How late the event loop ran a timer (a blocked loop delays every chat)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)


def render() -> tuple[bytes, str]:
    """The exposition text and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


__all__ = [
    "CONSOLIDATIONS",
    "DB_CALLS_ON_LOOP",
    "DB_CALL_SECONDS",
    "DB_LOCK_WAIT_SECONDS",
    "DELIVERIES_FAILED",
    "EVENT_LOOP_LAG",
    "FILES_SENT",
    "MEMORY_JUDGE_SECONDS",
    "MEMORY_REJECTIONS",
    "MEMORY_WRITES",
    "MESSAGES_RECEIVED",
    "MESSAGES_SENT",
    "MODEL_CALL_SECONDS",
    "MODEL_ERRORS",
    "QUEUE_DEPTH",
    "SEARCH_SECONDS",
    "STREAM_EDITS",
    "TOOL_CALLS",
    "TURN_SECONDS",
    "render",
]
