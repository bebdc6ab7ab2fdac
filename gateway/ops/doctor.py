"""`hermes doctor`: everything an operator would check by hand, each with its fix.

Each check gives ok, fail (with the fix) or skip (not applicable here: no platform
enabled, no model configured). Checks that talk to the network (the model, each
platform's identity call) are bounded by `timeout` and run concurrently. Nothing is
changed: the database is opened for reading checks only (one older than this Hermes is
not opened: opening would upgrade it) and no message is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import stat
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from gateway import registry
from gateway.app import provider_factory
from gateway.config import (
    CONFIG_FILENAME,
    ConfigError,
    HermesConfig,
    SideTask,
    dashboard_refusal,
    embeddings_endpoint,
    enabled_platforms,
    judge_wanted,
    load_config,
    main_endpoint,
    mcp_servers,
    open_state,
    side_endpoint,
)
from gateway.dashboard.auth import CREDENTIALS_FILENAME, Credentials, CredentialsError
from gateway.edge.platform_config import PlatformConfig, platforms
from gateway.scheduler import read_status
from gateway.status_file import read_status_file
from hermes import extras
from hermes.embedding_models import EndpointModel, LocalModel, local_problem
from hermes.llm.client import LLMClient, LLMError
from hermes.providers.base import MemoryProvider
from hermes.providers.service import ServiceProvider
from hermes.state.db import STATE_DB_FILENAME, SessionDB
from hermes.state.engine import StateDBError, redact, stored_version
from hermes.state.outbox import OutboxStatus
from hermes.state.schema import SCHEMA_VERSION
from hermes.tools.mcp import McpHub, McpLaunch

Status = Literal["ok", "fail", "skip"]
MIN_FREE_BYTES = 500 * 1024 * 1024  # below this, state.db and the stores may fail to grow
HOME_FIX = "chmod 700 the folders and 600 the files (as the service user): chmod -R go-rwx {home}"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name, "fail", detail, fix)


def skip(name: str, detail: str) -> Check:
    return Check(name, "skip", detail)


async def run_checks(
    home: Path, env: Mapping[str, str] | None = None, timeout: float = 10.0
) -> list[Check]:
    """Every check, in the order an operator reads them (`env`: the process's own
    environment when None)."""
    checks = [check_home(home)]
    try:
        config = load_config(home)
    except ConfigError as exc:
        checks.append(fail("config", str(exc), f"edit {home / CONFIG_FILENAME}"))
        return checks
    where = home / CONFIG_FILENAME
    checks.append(ok("config", f"{where} is valid" if where.exists() else "defaults (no file)"))
    checks.append(check_disk(home))
    checks.extend(check_database(home, config, env))
    probes: list[Awaitable[Check]] = [
        check_model(config, env, timeout),
        check_search(home, config, env, timeout),
    ]
    enabled = enabled_platforms(config)
    probes += [check_platform(name, section, env, timeout) for name, section in enabled.items()]
    probes += check_mcp(config, env, timeout)
    checks.extend(await asyncio.gather(*probes))
    if not enabled:
        checks.append(skip("platforms", "none enabled (the terminal chat works without any)"))
    checks.extend(check_webhooks(config, enabled))
    if config.database.url is not None:
        checks.extend(await check_cluster(home, config, env))
    checks.append(check_scheduler(home, config))
    checks.append(check_dashboard(home, config))
    checks.append(check_provider(home, config, env))
    checks.append(check_guard(config, env))
    return checks


def check_mcp(
    config: HermesConfig, env: Mapping[str, str] | None, timeout: float
) -> list[Awaitable[Check]]:
    """Each MCP server started as the gateway would start it, its tools listed, stopped."""
    if not config.mcp.servers:
        return []
    if (absent := extras.needs("mcp", "The MCP servers in config.yaml")) is not None:
        return [_done(fail("MCP servers", absent, extras.install_command("mcp")))]
    launches, problems = mcp_servers(config, env)
    probes: list[Awaitable[Check]] = [
        _done(fail(f"MCP server {name}", why, "export it, or change mcp.servers." + name))
        for name, why in problems.items()
    ]
    return probes + [_probe_mcp(name, launch, timeout) for name, launch in launches.items()]


async def _done(check: Check) -> Check:
    return check


async def _probe_mcp(name: str, launch: McpLaunch, timeout: float) -> Check:
    hub = McpHub({name: launch}, {})
    try:
        async with asyncio.timeout(max(timeout, launch.config.startup_timeout)):
            await hub.tools(name)
        state = hub.states()[name]
    except TimeoutError:
        state = "did not start in time"
    finally:
        await hub.close()
    if state.startswith("running"):
        return ok(f"MCP server {name}", state)
    return fail(f"MCP server {name}", state, f"hermes mcp test {name}, and its own logs")


def check_dashboard(home: Path, config: HermesConfig) -> Check:
    """Whether the web dashboard is served, and its credentials file is sound."""
    if (refusal := dashboard_refusal(config)) is not None:
        return skip("dashboard", f"not served: {refusal}")
    path = home / CREDENTIALS_FILENAME
    if not path.exists():
        return ok("dashboard", "served at /admin/; no password set (log in with /dashboard links)")
    try:
        passwords = len(Credentials.load(home).passwords)
    except CredentialsError as exc:
        return fail("dashboard", str(exc), f"delete {path}, then: hermes dashboard passwd")
    if path.stat().st_mode & 0o077:
        return fail("dashboard", f"{path} is readable by others", f"chmod 600 {path}")
    return ok("dashboard", f"served at /admin/; {passwords} password(s) set")


def check_guard(config: HermesConfig, env: Mapping[str, str] | None) -> Check:
    """Whether a model judges memory writes (the rules alone miss what they do not know)."""
    name = "memory guard"
    if not judge_wanted(config):
        return fail(
            name,
            "memory.scan.judge is off: the rules alone judge memory writes",
            "set memory.scan.judge: on (the auxiliary model, else the chat model, judges)",
        )
    endpoint = side_endpoint(config, SideTask.MEMORY, env)
    if endpoint is None:
        return skip(name, "no model configured: the rules alone judge memory writes")
    return ok(name, f"the model {endpoint.model} judges every memory write")


def check_provider(home: Path, config: HermesConfig, env: Mapping[str, str] | None) -> Check:
    """The memory provider loads and says it can run; a provider kept on a service is
    asked whether the service answers."""
    name = "memory provider"
    try:
        factory = provider_factory(home, config, env)
    except ConfigError as exc:
        return fail(name, str(exc), "hermes memory providers; hermes memory setup NAME")
    if factory is None:
        return skip(name, "none (built-in memory only)")
    try:
        provider = factory()
        available, reason = provider.is_available(), provider.unavailable_reason()
    except Exception as exc:
        return fail(name, f"{config.memory.provider} failed: {type(exc).__name__}: {exc}", "")
    if not available:
        return fail(
            name,
            f"{provider.name} is not available: {reason}",
            f"hermes memory setup {provider.name}",
        )
    return _reached(home, config, provider)


def _reached(home: Path, config: HermesConfig, provider: MemoryProvider) -> Check:
    """An available provider: its service answers (when it has one), and nothing it
    was sent failed or was given up."""
    name = "memory provider"
    found = f"{provider.name}, recall mode {config.memory.recall_mode}"
    if isinstance(provider, ServiceProvider):
        silent = _unanswered(name, provider)
        if silent is not None:
            return silent
        found += f", answering at {provider.base_url}"
    waiting = _outbox(home, config, provider.name)
    if waiting is not None and (waiting.last_error or waiting.dropped):
        detail = f"{found}; {waiting.waiting:,} write(s) waiting"
        detail += f", last error: {waiting.last_error}" if waiting.last_error else ""
        if waiting.dropped:
            detail += f"; {waiting.dropped:,} given up ({waiting.drop_reason})"
        fix = f"check that {provider.name}'s service answers (hermes memory status)"
        return fail(name, detail, fix)
    if waiting is not None and waiting.waiting:
        found += f"; {waiting.waiting:,} write(s) waiting to be delivered"
    return ok(name, found)


def _unanswered(name: str, provider: ServiceProvider) -> Check | None:
    """A failed check when the provider's service does not answer (asked once, within
    the provider's own timeout), else None."""
    why = provider.probe()
    if not why:
        return None
    return fail(
        name,
        f"{provider.name} does not answer at {provider.base_url}: {why}",
        f"check the service, and memory.providers.{provider.name}.base_url",
    )


def _outbox(home: Path, config: HermesConfig, provider: str) -> OutboxStatus | None:
    """What waits in state.db for the provider (None when state.db cannot be read now)."""
    db = _readable_state(home, config)
    if db is None:
        return None
    try:
        return db.outbox.status(provider)
    except Exception:
        return None
    finally:
        db.close()


def _readable_state(home: Path, config: HermesConfig) -> SessionDB | None:
    """state.db opened for a look, when that changes nothing (it exists at this schema
    version, or is on PostgreSQL); else None."""
    path = home / STATE_DB_FILENAME
    if config.database.url is None and (
        not path.exists() or stored_version(path) != SCHEMA_VERSION
    ):
        return None
    try:
        return open_state(home, config)
    except (ConfigError, StateDBError):
        return None


def check_home(home: Path) -> Check:
    """0700 folders, 0600 files: the stores hold what people told the assistant."""
    name = "HERMES_HOME permissions"
    if not home.exists():
        return skip(name, f"{home} does not exist yet (the first command creates it)")
    loose: list[str] = []
    strangers: list[str] = []
    owner = home.stat().st_uid
    for path in [home, *sorted(home.rglob("*"))[:10_000]]:
        try:
            info = path.lstat()
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            continue
        kind = "folder" if stat.S_ISDIR(info.st_mode) else "file"
        if info.st_uid != owner:
            strangers.append(f"{path.relative_to(home.parent)} ({kind} of uid {info.st_uid})")
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            loose.append(f"{path.relative_to(home.parent)} ({kind} {stat.S_IMODE(info.st_mode):o})")
    if strangers:
        shown = ", ".join(strangers[:5]) + (
            f" and {len(strangers) - 5} more" if len(strangers) > 5 else ""
        )
        return fail(
            name,
            f"not owned by the home's owner (uid {owner}), so the service may not be able "
            f"to write them: {shown}",
            f"chown -R {owner}: {home}  (as root); run admin commands as the service user",
        )
    if loose:
        shown = ", ".join(loose[:5]) + (f" and {len(loose) - 5} more" if len(loose) > 5 else "")
        return fail(name, f"readable by others: {shown}", HOME_FIX.format(home=home))
    return ok(name, f"{home}: owner only")


def check_disk(home: Path) -> Check:
    name = "free disk"
    existing = next((p for p in [home, *home.parents] if p.exists()), Path("/"))
    usage = shutil.disk_usage(existing)
    free = f"{usage.free / 2**30:.1f} GiB free of {usage.total / 2**30:.1f} GiB"
    if usage.free < MIN_FREE_BYTES:
        return fail(name, free, "free some space: state.db and the memory stores need room")
    return ok(name, free)


def check_database(
    home: Path, config: HermesConfig | None = None, env: Mapping[str, str] | None = None
) -> list[Check]:
    """state.db: the SQLite file in the home, or the PostgreSQL database config names."""
    if config is not None and config.database.url is not None:
        return check_server(home, config, env)
    path = home / STATE_DB_FILENAME
    if not path.exists():
        return [skip("state.db", f"{path} does not exist yet (the first message creates it)")]
    restore = "stop the gateway and restore the last backup: hermes backup restore PATH"
    stored = stored_version(path)
    if stored is not None and stored < SCHEMA_VERSION:  # opening it would upgrade it
        return [
            ok(
                "state.db schema",
                f"version {stored}: upgraded to {SCHEMA_VERSION} when Hermes next opens it "
                "(take a backup first); not opened, so not checked further",
            )
        ]
    try:
        db = SessionDB(path)
    except Exception as exc:  # damaged beyond opening, newer schema, unreadable
        return [fail("state.db", str(exc), restore)]
    try:
        found = db.upkeep.quick_check()
        version = db.upkeep.schema_version()
        writable = db.upkeep.writable()
        held = db.memory_log.count_pending()
    except Exception as exc:
        return [fail("state.db", f"{type(exc).__name__}: {exc}", restore)]
    finally:
        db.close()
    checks = []
    if found != "ok":
        checks.append(fail("state.db integrity", found, restore))
    else:
        checks.append(ok("state.db integrity", "quick_check: ok"))
    if version != SCHEMA_VERSION:
        checks.append(
            fail(
                "state.db schema",
                f"version {version}, this Hermes expects {SCHEMA_VERSION}",
                "run the Hermes version that wrote it, or restore a backup",
            )
        )
    else:
        checks.append(ok("state.db schema", f"version {version}"))
    if not writable:
        checks.append(
            fail(
                "state.db writable",
                "a write transaction cannot begin (read-only, full disk, or a stuck writer)",
                "check the disk and that no other process holds state.db",
            )
        )
    if held:
        checks.append(
            fail(
                "memory safety check",
                f"{held} memory write(s) held: the check model could not judge them "
                "(they are in no prompt until it does)",
                "check the model endpoint (hermes doctor's model line), then "
                "hermes memory pending --retry",
            )
        )
    return checks


async def check_model(config: HermesConfig, env: Mapping[str, str] | None, timeout: float) -> Check:
    """The endpoint answers GET /models, and the model answers a one-word prompt."""
    name = "model"
    endpoint = main_endpoint(config, env)
    if endpoint is None:
        return fail(
            name,
            "no model is configured",
            "set llm.base_url and llm.model in config.yaml (hermes init writes them)",
        )
    fix = f"check llm.base_url ({endpoint.base_url}), llm.model and the key in llm.api_key_env"
    if config.llm.api_key_env and not endpoint.api_key:
        return fail(name, f"{config.llm.api_key_env} is not set", f"set {config.llm.api_key_env}")
    client = LLMClient(replace(endpoint, timeout=timeout, max_retries=0))
    try:
        health = await client.health(timeout)
        if not health.startswith("ok"):
            return fail(name, f"endpoint {health}", fix)
        try:
            await client.text([{"role": "user", "content": "Reply with the word OK."}])
        except LLMError as exc:
            return fail(name, f"the endpoint is up but the model did not answer: {exc}", fix)
    finally:
        await client.close()
    return ok(name, f"{endpoint.model} at {endpoint.base_url} answers")


async def check_search(
    home: Path, config: HermesConfig, env: Mapping[str, str] | None, timeout: float
) -> Check:
    """Hybrid search: the embeddings endpoint answers, and how far state.db is embedded."""
    name, emb = "search", config.search.embeddings
    if emb.provider == "local":
        return await _check_local(home, config, timeout)
    if not emb.model:
        return skip(name, "lexical only (search.embeddings.model is not set)")
    endpoint = embeddings_endpoint(config, env)
    if endpoint is None:
        return fail(name, "no endpoint for embeddings", "set search.embeddings.base_url")
    key_env = emb.api_key_env or config.llm.api_key_env
    if key_env and not endpoint.api_key:
        return fail(name, f"{key_env} is not set", f"set {key_env}")
    fix = (
        f"check search.embeddings.base_url ({endpoint.base_url}) serves /embeddings for "
        f"{endpoint.model}; until then search is lexical"
    )
    model = EndpointModel(LLMClient(replace(endpoint, timeout=timeout, max_retries=0)), emb)
    try:
        vectors = await model.embed(["hermes doctor"], query=False)
    except LLMError as exc:
        return fail(name, f"embeddings endpoint: {exc}", fix)
    finally:
        await model.close()
    where = f"hybrid: {endpoint.model} at {endpoint.base_url} answers ({len(vectors[0])} dim)"
    return ok(name, where + await asyncio.to_thread(_embedded, home, config, model.name))


async def _check_local(home: Path, config: HermesConfig, timeout: float) -> Check:
    """A local embeddings model: installed, loads and embeds (its first load takes a
    second or more: given at least LOCAL_LOAD_S)."""
    name, emb = "search", config.search.embeddings
    if (problem := local_problem(emb)) is not None:
        return fail(name, problem, "install it, or set search.embeddings.provider: endpoint")
    model = LocalModel(emb)
    try:
        vectors = await model.embed(
            ["hermes doctor"], query=False, timeout=max(timeout, LOCAL_LOAD_S)
        )
    except LLMError as exc:
        return fail(name, str(exc), "see the gateway's log; until then search is lexical")
    finally:
        await model.close()
    where = f"hybrid: {model.name} {model.where} ({len(vectors[0])} dim)"
    return ok(name, where + await asyncio.to_thread(_embedded, home, config, model.name))


def check_server(home: Path, config: HermesConfig, env: Mapping[str, str] | None) -> list[Check]:
    """The PostgreSQL database: reachable with the configured password, its server
    version, the schema version and whether it answers reads and can take writes."""
    name = "database"
    where = redact(config.database.url or "")
    fix = "check database.url, that the server runs, and database.password_env"
    try:
        db = open_state(home, config, env)
    except (ConfigError, StateDBError) as exc:
        return [fail(name, str(exc), fix)]
    try:
        server, version = db.upkeep.server(), db.upkeep.schema_version()
        found, writable = db.upkeep.integrity_check(), db.upkeep.writable()
    except Exception as exc:
        return [fail(name, f"{type(exc).__name__}: {exc}", fix)]
    finally:
        db.close()
    stores = "the database" if config.memory.backend == "database" else "files in the home"
    checks = [ok(name, f"{server} at {where}, schema version {version}; memory in {stores}")]
    if found != "ok" or not writable:
        checks.append(fail("database answers", found if found != "ok" else "read-only", fix))
    return checks


LOCAL_LOAD_S = 60.0  # a local embeddings model's first load and embedding, at most


def _embedded(home: Path, config: HermesConfig, model: str) -> str:
    """How far state.db is embedded with `model` (nothing when it cannot be read now)."""
    db = _readable_state(home, config)
    if db is None:
        return ""
    try:
        status = db.vectors.status()
    finally:
        db.close()
    if status.model != model:
        return "; state.db has no vectors of it yet (they are built in the background)"
    return f"; {status.embedded:,} messages embedded, {status.queued:,} queued"


async def check_platform(
    name: str, section: PlatformConfig, env: Mapping[str, str] | None, timeout: float
) -> Check:
    """The credentials' shape, then one identity call with them."""
    label = f"platform {name}"
    problems = registry.credential_problems(name, section, env)
    if problems:
        return fail(label, "; ".join(problems), "set the variables in the service's env file")
    try:
        adapter = registry.build(name, section, env)
        who = await asyncio.wait_for(adapter.whoami(), timeout)
    except ConfigError as exc:
        return fail(label, str(exc), "fix the platform's section in config.yaml")
    except TimeoutError:
        return fail(label, f"no answer within {timeout:g} s", "check the server's network")
    except Exception as exc:
        if (cause := _network_cause(exc)) is not None:
            return fail(
                label,
                f"cannot reach the {name} API: {type(cause).__name__}: {cause}",
                "check the server's network, DNS and proxy (the token was not tried)",
            )
        return fail(
            label,
            f"the credentials were refused: {type(exc).__name__}: {exc}",
            f"create a new token for the bot (deploy/README.md, {name}) and update the env file",
        )
    return ok(label, f"signed in as {who}")


def _network_cause(exc: BaseException) -> OSError | None:
    """The connection failure under `exc`, if that is what it is: a name that does not
    resolve, a refused or reset connection, TLS (every SDK wraps the socket's OSError,
    so its chain of causes is followed); None for an answer from the API."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def check_webhooks(config: HermesConfig, enabled: Mapping[str, PlatformConfig]) -> list[Check]:
    """A platform that pushes to gateway.http needs a public https URL reaching it (a
    reverse proxy): each platform package says what it needs."""
    checks = []
    for name, section in enabled.items():
        webhook = platforms()[name].webhook
        found = webhook(section, config.gateway.http.port) if webhook is not None else None
        if found is not None:
            label = f"{name} webhook"
            checks.append(
                ok(label, found.detail) if found.ok else fail(label, found.detail, found.fix)
            )
    return checks


async def check_cluster(
    home: Path, config: HermesConfig, env: Mapping[str, str] | None
) -> list[Check]:
    """Several gateways on the PostgreSQL database, seen from this home: who runs,
    whether this config may join them, whether wake-ups (NOTIFY) arrive, and whether
    events wait with nobody to take them."""
    settings = config.gateway.cluster
    try:
        db = open_state(home, config, env)
    except Exception as exc:
        return [skip("gateways", f"the database cannot be opened: {exc}")]
    try:
        alive = [i for i in db.cluster.instances(settings.lease_seconds) if i.alive]
        stranded = db.cluster.stranded(3 * settings.lease_seconds)
        wakes = await _notify_arrives(db)
    finally:
        db.close()
    leader = next((i.id for i in alive if "leader" in i.leases), "none")
    checks = [ok("gateways", f"{len(alive)} running on the database; leader: {leader}")]
    enabled = enabled_platforms(config)
    sole = [n for n, section in enabled.items() if registry.sharing(n, section) == "sole"]
    if sole and len(alive) > 1:
        checks.append(
            fail(
                "gateways: platforms",
                f"{', '.join(sole)} connect in a mode one process only may use, and "
                f"{len(alive)} gateways run on this database",
                "use webhook mode behind the load balancer (deploy/README, 'Several "
                "gateways'), or run one gateway",
            )
        )
    if stranded:
        checks.append(
            fail(
                "gateways: queue",
                f"{stranded} event(s) waiting with no gateway to take them",
                "start a gateway with the platforms these events came from",
            )
        )
    checks.append(
        ok("gateways: wake-ups", "NOTIFY arrives")
        if wakes
        else fail(
            "gateways: wake-ups",
            "a NOTIFY sent to the database did not arrive on a LISTEN connection (a "
            "pooler in transaction mode drops them): events for sessions held by "
            f"another gateway wait for its poll (every {settings.poll_seconds:g} s)",
            "connect the gateways to PostgreSQL directly or through a pooler in session mode",
        )
    )
    return checks


async def _notify_arrives(db: SessionDB, timeout: float = 3.0) -> bool:
    """Whether a NOTIFY this process sends comes back on a LISTEN connection."""
    channel, token = "hermes_doctor", secrets.token_hex(4)
    listening = asyncio.Event()

    async def listen() -> bool:
        notes = db.cluster.notifications([channel], listening)
        async with contextlib.aclosing(notes):
            async for _, payload in notes:
                if payload == token:
                    return True
        return False

    task = asyncio.create_task(listen())
    try:
        await asyncio.wait_for(listening.wait(), timeout)
        await asyncio.to_thread(db.cluster.notify, channel, token)
        return await asyncio.wait_for(task, timeout)
    except Exception:
        return False
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


def check_scheduler(home: Path, config: HermesConfig) -> Check:
    """The jobs' last runs: recent and successful while a gateway runs."""
    name = "scheduler"
    if config.database.url is None:
        running = read_status_file(home)
        if running is None or not running.running:
            return skip(name, "no gateway is running (the scheduler runs inside it)")
    try:
        db = open_state(home, config)
        try:
            jobs = read_status(home, config, db)
        finally:
            db.close()
    except Exception as exc:
        return fail(name, f"cannot read the job store: {exc}", "see the gateway's log")
    now = datetime.now(UTC)
    failing = [job for job in jobs if job.last_ok is False]
    if failing:
        job = failing[0]
        return fail(name, f"{job.id} failed: {job.last_result}", "see the gateway's log")
    late = [
        job
        for job in jobs
        if job.last_run is not None and now - job.last_run > 3 * job.every + timedelta(minutes=5)
    ]
    if late:
        return fail(
            name,
            f"{late[0].id} last ran {late[0].last_run:%Y-%m-%d %H:%M} UTC, late",
            "restart the gateway",
        )
    ran = [job.last_run for job in jobs if job.last_run is not None]
    last = f"last run {max(ran):%Y-%m-%d %H:%M} UTC" if ran else "no job has run yet"
    return ok(name, f"{len(jobs)} jobs, {last}")


__all__ = ["Check", "run_checks"]
