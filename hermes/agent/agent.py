"""The agent: sessions with a frozen prompt, and the tool-calling turn loop.

For each user message: persist it (so a failure loses nothing), call the model with the
frozen system prompt + history + tools, run tool calls in order, persist assistant and
tool messages, repeat until a text answer or the tool-iteration cap.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from hermes import metrics
from hermes.agent import compression, review
from hermes.agent.conversation import Conversation, to_new_message
from hermes.agent.prompt import fence_recall, turn_context
from hermes.agent.sessions import Sessions, provider_session
from hermes.agent.tokens import estimate_messages
from hermes.agent.toolbox import Tool, ToolBox
from hermes.config import AgentConfig
from hermes.embedder import Embedder
from hermes.llm.client import LLMError
from hermes.llm.metering import charged_to, uncharged
from hermes.llm.types import ChatModel, ModelReply
from hermes.memory.service import MemoryService
from hermes.memory.tool import MEMORY_TOOL_SCHEMA
from hermes.memory.user_memory import UserMemory
from hermes.places import Surface
from hermes.providers.host import ProviderHost
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.engine import storage_problem
from hermes.state.models import Reminder
from hermes.state.search import SearchScope
from hermes.state.usage import Usage
from hermes.text import valid_text
from hermes.tools.capabilities import Holder, Holders, granted, groups, holder_of, may_use
from hermes.tools.files import SCHEMA as FILE_SCHEMA
from hermes.tools.files import Filer, FileRefusedError, written_file
from hermes.tools.mcp import McpHub, McpTool
from hermes.tools.message import Asker, Courier, Target, own_targets
from hermes.tools.message import schema as message_schema
from hermes.tools.schedule import ScheduleTool
from hermes.tools.session_search import Reranker, SessionSearchTool, Summarizer, SummaryPolicy
from hermes.tools.taint import Taint
from hermes.tools.web import FETCH_SCHEMA, SEARCH_SCHEMA, WebTools

logger = logging.getLogger(__name__)

FINAL_ANSWER_NOTE = (
    "[The tool-call budget for this turn is used up. Answer the user now with what you "
    "have, without calling tools.]"
)
SAVED_NOTE = "Your message was saved; try again."
UNSAVED_NOTE = (
    "(I could not save this reply just now: my storage is full or not answering. I will "
    "save it as soon as I can.)"
)


def too_long(size: int, limit: int) -> str:
    """The answer to one message larger than half the context budget (nothing of it is
    kept: the model is never asked)."""
    return (
        f"That message is too long for me to read in one go (about {size:,} tokens; I take "
        f"up to {limit:,} at a time, about {limit * 4:,} characters). Send it in parts, or "
        "the important part, and I'll work through it."
    )


NO_VISION_NOTE = (
    "[The user sent a photo, but this model cannot see images: say so briefly, and offer "
    "to help if they describe it.]"
)
REPEATS_THE_WEB = (
    "Not saved: this repeats what a web page or search said in this turn, and a page "
    "never writes memory by itself. Ask the person whether to keep it; when they say so in "
    "their own words, save it then."
)
HELD_FOR_YES = (
    "Not saved yet: this repeats what was read from {source} in this turn, so the person "
    "was asked with a button whether to keep it. Tell them briefly; it is saved if they "
    "press Save."
)
MCP_FIRST_USE = (
    "Not run: this is the person's first use of the {server} tools, so they were asked "
    "with a button to allow it. Tell them in a sentence; once they press Allow, they "
    "say so in a message of theirs and you go on."
)
MCP_NOT_ASKED = (
    "Not run: the {server} tools need the person's yes first, and they cannot be asked "
    "here (no buttons and no reply). Tell them to use it once from a chat with the bot."
)
GROUP_MEMORY_OFF = (
    "Memory is off in group chats here (privacy.group_memory: none); nothing was saved. "
    "The user can tell you again in a direct message."
)


class TurnStream(Protocol):
    """Where a streamed turn shows itself as it goes (gateway/pipeline/streaming.py)."""

    def text(self, so_far: str) -> None:
        """The answer's text so far (of the model call running now)."""

    def status(self, note: str) -> None:
        """A short note while tools run ("searching past conversations…")."""


@dataclass(frozen=True, slots=True)
class Speaker:
    """The person writing a turn, when that is not simply the session's user."""

    user_id: str
    name: str


@dataclass(frozen=True, slots=True)
class TurnResult:
    text: str
    ok: bool
    session_id: str
    duplicate: bool = False
    compressed_from: str | None = None
    reply_id: int | None = None  # the stored assistant message (delivery records on it)


@dataclass
class Agent:
    db: SessionDB
    model: ChatModel
    home: Path
    memory: MemoryService  # the one memory write path (the composition root builds it)
    config: AgentConfig = field(default_factory=AgentConfig)
    aux_model: ChatModel | None = None  # compression summaries and memory review
    search_summarizer: Summarizer | None = None
    search_reranker: Reranker | None = None  # search.rerank
    search_policy: SummaryPolicy = field(default_factory=SummaryPolicy)
    embedder: Embedder | None = None  # hybrid search (search.embeddings)
    group_memory: bool = True  # privacy.group_memory: personal stores in group chats
    on_reminder: Callable[[Reminder], None] | None = None  # a reminder was just added
    tools_table: dict[str, list[str]] = field(default_factory=dict)  # tools:
    web: WebTools | None = None  # web_search, web_fetch (the web extra installed)
    mcp: McpHub | None = None  # the owner's MCP servers (mcp.servers, the mcp extra)
    courier: Courier | None = None  # `message`: the gateway sends to other chats
    asker: Asker | None = None  # asks a person to confirm with a button
    filer: Filer | None = None  # `send_file`: the gateway uploads files into the chat
    holders: Holders | None = None  # the gateway's people cache (else rows read per turn)
    vision: str = "auto"  # llm.vision: on | off | auto (until the endpoint refuses images)
    vision_refused: bool = False
    _reviews: dict[str, asyncio.Task[None]] = field(default_factory=dict, repr=False)
    # messages a turn could not store (the database server lost mid-turn), per session,
    # in order: stored before that session's next message (`save_unsaved`)
    _unsaved: dict[str, list[tuple[list[NewMessage], Usage]]] = field(
        default_factory=dict, repr=False
    )

    sessions: Sessions = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.sessions = Sessions(self.db, self.home, self.memory, group_memory=self.group_memory)

    @property
    def sees_images(self) -> bool:
        """Whether photos go to the model as image parts."""
        return self.vision == "on" or (self.vision == "auto" and not self.vision_refused)

    @property
    def providers(self) -> ProviderHost:
        return self.memory.providers

    def memory_of(self, user_id: str) -> UserMemory:
        return self.memory.of(user_id)

    # -- the turn ----------------------------------------------------------------------

    async def turn(
        self,
        conv: Conversation,
        text: str,
        surface: Surface,
        platform_message_id: str | None = None,
        *,
        speaker: Speaker | None = None,
        stream: TurnStream | None = None,
        images: Sequence[str] = (),
    ) -> TurnResult:
        """One turn. `speaker` is the person writing when it is not the session's user
        (a shared group session): their words are marked with their name, and a memory
        they ask for goes to their own store. With `stream`, the model's text is shown
        as it is written (and a note while tools run); the result is the same. `images`
        (data URLs) go with this message as image parts, in this turn's requests only
        (what is stored and searched is `text`)."""
        # what the turn's side calls spend (compression, memory review, the guard's
        # judge, search summaries) is the session's person's; its replies are counted
        # with the messages they are stored with (_persist), not by the meter
        with metrics.TURN_SECONDS.labels(surface.platform).time(), charged_to(conv.user_id):
            return await self._turn(
                conv,
                valid_text(text),  # a transcript, a document's text, the terminal's bytes
                surface,
                platform_message_id,
                speaker=speaker,
                stream=stream,
                images=tuple(images),
            )

    async def _turn(
        self,
        conv: Conversation,
        text: str,
        surface: Surface,
        platform_message_id: str | None,
        *,
        speaker: Speaker | None,
        stream: TurnStream | None,
        images: tuple[str, ...] = (),
    ) -> TurnResult:
        if conv.shared:
            text = f"[{speaker.name if speaker else 'someone'}] {text}"
        user_message = {"role": "user", "content": text}
        size, limit = estimate_messages([user_message]), self.config.context_budget_tokens // 2
        if size > limit:  # it could never be sent: stored, it would sink every later turn
            return TurnResult(too_long(size, limit), False, conv.id)
        if conv.id in self._unsaved:  # still unreachable: raises, and the person is told
            await self.db.run(self.save_unsaved, conv.id)
        compressed_from = None
        if conv.projected_tokens([user_message]) > self.config.context_budget_tokens:
            compressed_from = conv.id
            await self._compress(conv, surface)
        cause = await self.db.run(
            self.db.conversations.add_message,
            conv.id,
            to_new_message(user_message, platform_message_id),
        )
        if cause is None:
            return TurnResult("", True, conv.id, duplicate=True)
        conv.append([user_message])
        writer_id = speaker.user_id if speaker else conv.user_id
        context = turn_context(
            surface.platform,
            surface.kind,
            datetime.now(UTC),
            timezone=await self.db.run(self.db.reminders.timezone, writer_id)
            if not conv.shared or speaker
            else None,
        )
        if conv.pointer:
            context, conv.pointer = f"{context}\n{conv.pointer}", ""
        writer = speaker.user_id if speaker else (None if conv.shared else conv.user_id)
        # the provider is the person's: not in a chat's shared session, nor where personal
        # memory is off (privacy.group_memory: none)
        personal = not conv.shared and self.sessions.personal(surface)
        holder = await self.db.run(self.holder, writer_id)
        offered = (
            await self.providers.atool_schemas(conv.user_id)
            if personal and may_use(holder, "provider", self.tools_table) is None
            else []
        )
        servers = await self._mcp_tools(holder)
        tools = self.toolbox(
            conv,
            surface,
            cause,
            holder,
            writer=writer,
            provider_tools=offered,
            mcp_tools=servers,
            answering=platform_message_id.rsplit(",", 1)[-1] if platform_message_id else None,
        )
        recalled = await self.providers.recall(text, provider_session(conv)) if personal else ""
        if recalled:
            context = f"{context}\n{fence_recall(recalled)}"
        try:
            # a reply to a platform message is "stored" until it is on its way (Turns)
            delivery = "stored" if platform_message_id else None
            answer, reply_id = await self._loop(
                conv, tools, context, stream, images, delivery=delivery
            )
        except LLMError as exc:
            logger.warning("model call failed in session %s: %s", conv.id, exc)
            return TurnResult(
                f"{exc} {SAVED_NOTE}", False, conv.id, compressed_from=compressed_from
            )
        if conv.id in self._unsaved:  # the reply is the person's all the same
            answer = f"{answer}\n\n{UNSAVED_NOTE}"
            return TurnResult(answer, True, conv.id, compressed_from=compressed_from)
        if personal:
            await self.db.run(
                self.providers.turn_done, text, answer, provider_session(conv), conv.history
            )
        notices = await self.db.run(self.db.memory_log.take_notices, conv.user_id)
        if notices:  # e.g. "I tidied your memory ... /memory undo reverts it"
            answer = "\n\n".join([answer, *notices])
        self._schedule_review(conv)  # after the last await: it starts once the reply is back
        return TurnResult(answer, True, conv.id, compressed_from=compressed_from, reply_id=reply_id)

    def holder(self, user_id: str, *, fresh: bool = False) -> Holder:
        """The person whose capabilities a turn runs with (on the database executor):
        their role, whether they are this home's owner, their accounts; from the
        gateway's people cache where there is one (`fresh`: what another process changed
        this moment is seen too), else read now."""
        if self.holders is not None:
            return self.holders.holder(user_id, fresh=fresh)
        return holder_of(self.db.people, user_id, self.home)

    @property
    def tool_groups(self) -> list[str]:
        """The tool groups this assistant has (what /tools and `hermes tools` list)."""
        return groups(
            provider=bool(self.providers.name),
            web=self.web is not None,
            message=self.courier is not None,
            files=self.filer is not None,
            mcp_servers=self.mcp.names if self.mcp is not None else (),
            chats=list(self.courier.chats) if self.courier is not None else (),
        )

    async def refusal(self, user_id: str, group: str) -> str | None:
        """Why `user_id` may not use the tools of `group` now (None: they may)."""
        holder = await self.db.run(functools.partial(self.holder, user_id, fresh=True))
        return may_use(holder, group, self.tools_table)

    def toolbox(
        self,
        conv: Conversation,
        surface: Surface,
        cause: int | None,
        holder: Holder,
        *,
        writer: str | None = None,
        provider_tools: list[dict[str, Any]] | None = None,
        mcp_tools: Sequence[McpTool] = (),
        answering: str | None = None,
    ) -> ToolBox:
        """The turn's tools: those of the groups `holder` may use (each call asks again
        when it runs). Memory writes go to `writer`'s stores (default: the session's
        user; nobody's in a shared session without a known speaker); `provider_tools`:
        the memory provider's, as it offered them to the person
        (`ProviderHost.atool_schemas`); `answering`: the platform message the turn
        answers (a file sent goes where the reply goes: its thread in a channel)."""
        owner = writer if writer is not None else (None if conv.shared else conv.user_id)

        taint = Taint()  # what this turn read from the web

        async def remember(args: dict[str, Any]) -> dict[str, Any]:
            if not self.sessions.personal(surface) or owner is None:
                return {"success": False, "error": GROUP_MEMORY_OFF}
            content = args.get("content")
            if taint.tainted and isinstance(content, str) and (source := taint.repeats(content)):
                return await self._hold_memory(
                    owner, surface=surface, conv=conv, cause=cause, args=args, source=source
                )
            outcome = await self.memory.apply(
                owner,
                args,
                actor="agent",
                session_id=conv.id,
                message_id=cause,
                context=taint.context() if taint.tainted else "",
            )
            return outcome.result

        chat_id = surface.chat_id if surface.chat_type != "dm" else None
        scope = SearchScope(conv.user_id, chat_id=chat_id, exclude_session_id=conv.id)
        search = SessionSearchTool(
            self.db,
            scope,
            self.search_summarizer,
            self.search_policy,
            embedder=self.embedder,
            reranker=self.search_reranker,
        )
        tools = [
            Tool("memory", MEMORY_TOOL_SCHEMA, remember, "updating my notes…", "memory"),
            Tool(
                search.name,
                search.schema,
                search.run,
                "searching past conversations…",
                "session_search",
            ),
        ]
        if owner is not None:  # reminders are a person's, delivered where they asked
            schedule = ScheduleTool(
                self.db,
                owner,
                conv.user_id,
                surface,
                conv.session.session_key,
                on_added=self.on_reminder,
                judge=self.memory.judge,
            )
            tools.append(
                Tool(schedule.name, schedule.schema, schedule.run, "setting that up…", "schedule")
            )
        tools += [self._provider_tool(conv.user_id, s) for s in provider_tools or ()]
        if self.web is not None:  # limited per person: the one whose capability it is
            who, web = holder.user_id, self.web

            async def search_web(args: dict[str, Any]) -> dict[str, Any]:
                found = await web.run_search(who, args)
                if found.get("success"):
                    taint.read(f"web search: {args.get('query')}", str(found.get("results")))
                return found

            async def fetch_page(args: dict[str, Any]) -> dict[str, Any]:
                page = await web.run_fetch(who, args)
                if page.get("success"):
                    taint.read(str(page.get("url")), str(page.get("content")))
                return page

            tools += [
                Tool("web_search", SEARCH_SCHEMA, search_web, "searching the web…", "web"),
                Tool("web_fetch", FETCH_SCHEMA, fetch_page, "reading the page…", "web"),
            ]
        tools += [self._mcp_tool(t, taint, holder.user_id, surface) for t in mcp_tools]
        if self.courier is not None:
            tools += self._message_tool(self.courier, holder, surface)
        if self.filer is not None and (limit := self.filer.limit(surface)) is not None:
            tools.append(self._file_tool(self.filer, surface, limit, answering))
        allowed = granted(holder, {t.group for t in tools}, self.tools_table)
        return ToolBox(
            [t for t in tools if t.group in allowed],
            functools.partial(self.refusal, holder.user_id),
        )

    async def _mcp_tools(self, holder: Holder) -> list[McpTool]:
        """The tools of the MCP servers `holder` may use (a server is started when a
        turn first needs it)."""
        if self.mcp is None:
            return []
        found: list[McpTool] = []
        for server in self.mcp.names:
            if may_use(holder, f"mcp:{server}", self.tools_table) is None:
                found += await self.mcp.tools(server)
        return found

    def _mcp_tool(self, tool: McpTool, taint: Taint, user_id: str, surface: Surface) -> Tool:
        """A person's first call of a server's tools waits for their yes (a button)."""
        hub, asker = self.mcp, self.asker
        assert hub is not None
        subject = f"mcp:{tool.server}"

        async def call(args: dict[str, Any]) -> dict[str, Any]:
            if asker is not None and not await asker.consented(user_id, subject):
                question = (
                    f"**Allow the {tool.server} tools?** The assistant wants to use "
                    f"`{tool.name}` of the MCP server {tool.server} for you, for the first "
                    "time. Once allowed, it uses that server's tools without asking again."
                )
                code = await asker.ask(user_id, surface, "mcp", question, subject=subject)
                note = MCP_FIRST_USE if code is not None else MCP_NOT_ASKED
                return {"success": False, "error": note.format(server=tool.server)}
            result = await hub.call(tool.server, tool.name, args)
            if "content" in result:
                taint.read(f"mcp:{tool.server}/{tool.name}", str(result["content"]))
            return result

        return Tool(tool.offered, tool.schema, call, f"asking {tool.server}…", f"mcp:{tool.server}")

    async def _hold_memory(
        self,
        owner: str,
        *,
        surface: Surface,
        conv: Conversation,
        cause: int | None,
        args: dict[str, Any],
        source: str,
    ) -> dict[str, Any]:
        """A memory write that repeats fetched text: shown to the person with a button,
        saved only if they say yes (refused where they cannot be asked)."""
        if self.asker is None:
            return {"success": False, "error": REPEATS_THE_WEB}
        content = str(args.get("content", ""))
        question = (
            f"**Save this to memory?** It repeats what was read from {source}:\n\n> {content[:600]}"
        )
        payload = {"args": args, "session_id": conv.id, "message_id": cause}
        code = await self.asker.ask(owner, surface, "memory", question, payload=payload)
        if code is None:
            return {"success": False, "error": REPEATS_THE_WEB}
        return {"success": False, "held": True, "error": HELD_FOR_YES.format(source=source)}

    def _message_tool(self, courier: Courier, holder: Holder, surface: Surface) -> list[Tool]:
        """`message`, offered with the places `holder` may send to (none: not offered);
        a named chat's own capability is asked again when the call runs."""
        here = surface.platform if surface.is_dm else None  # (that DM is this chat)
        own = [t for t in own_targets(holder, courier.platforms) if t.platform != here]
        named = [
            t
            for name, t in courier.chats.items()
            if may_use(holder, f"message:{name}", self.tools_table) is None
        ]
        if not own and not named:
            return []
        places = {t.name: t for t in [*named, *own]}  # a platform's name wins over a chat's

        async def send(args: dict[str, Any]) -> dict[str, Any]:
            to, text = args.get("to"), args.get("text")
            target: Target | None = places.get(to) if isinstance(to, str) else None
            if target is None:
                known = ", ".join(sorted(places))
                return {"success": False, "error": f"Unknown target {to!r}; one of: {known}."}
            if not isinstance(text, str) or not text.strip():
                return {"success": False, "error": "The message text is empty."}
            if target.group and (why := await self.refusal(holder.user_id, target.group)):
                return {"success": False, "error": f"Not sent: {why}."}
            return await courier.send(holder, surface, target, text)

        schema = message_schema(own, named)
        return [Tool("message", schema, send, "sending that…", "message")]

    @staticmethod
    def _file_tool(filer: Filer, surface: Surface, limit: int, answering: str | None) -> Tool:
        """`send_file` into the chat of `surface` (files of at most `limit` bytes), as a
        reply to `answering` where the platform threads replies."""

        async def send(args: dict[str, Any]) -> dict[str, Any]:
            try:
                file = written_file(args, limit)
            except FileRefusedError as exc:
                return {"success": False, "error": str(exc)}
            return await filer.send(surface, file, answering)

        return Tool("send_file", FILE_SCHEMA, send, "writing the file…", "files")

    def _provider_tool(self, user_id: str, schema: dict[str, Any]) -> Tool:
        name = str(schema["function"]["name"])

        async def call(args: dict[str, Any]) -> dict[str, Any]:
            return await self.providers.call_tool(user_id, name, args)

        return Tool(name, schema, call, f"checking {self.providers.name or 'memory'}…", "provider")

    async def _loop(
        self,
        conv: Conversation,
        tools: ToolBox,
        context: str,
        stream: TurnStream | None,
        images: tuple[str, ...] = (),
        *,
        delivery: str | None = None,
    ) -> tuple[str, int | None]:
        on_text = stream.text if stream is not None else None
        for _ in range(self.config.max_tool_iterations):
            reply, images = await self._seeing(conv, context, tools, on_text, images)
            if not reply.tool_calls:
                return await self._finish(conv, reply, delivery)
            if stream is not None:
                stream.status(
                    " ".join(dict.fromkeys(tools.status(c.name) for c in reply.tool_calls))
                )
            await self._run_tools(conv, tools, reply)
        reply = await self._call(
            conv, context, None, note=FINAL_ANSWER_NOTE, on_text=on_text, images=images
        )
        return await self._finish(conv, reply, delivery)

    async def _seeing(
        self,
        conv: Conversation,
        context: str,
        tools: ToolBox,
        on_text: Callable[[str], None] | None,
        images: tuple[str, ...],
    ) -> tuple[ModelReply, tuple[str, ...]]:
        """One call with the turn's images; an endpoint that refuses image parts (auto
        vision) is asked again without them, told why, and not sent images again."""
        try:
            return await self._call(conv, context, tools, on_text=on_text, images=images), images
        except LLMError as exc:
            if not images or exc.status not in (400, 404, 415, 422) or self.vision != "auto":
                raise
        logger.warning("the model endpoint refused image parts: photos are off from now on")
        self.vision_refused = True
        context += f"\n{NO_VISION_NOTE}"
        return await self._call(conv, context, tools, on_text=on_text), ()

    async def _call(
        self,
        conv: Conversation,
        context: str,
        tools: ToolBox | None,
        *,
        note: str | None = None,
        on_text: Callable[[str], None] | None = None,
        images: tuple[str, ...] = (),
    ) -> ModelReply:
        messages = self.request_messages(conv, context)
        if images:  # the latest user message carries them, as image parts
            last = max(i for i, m in enumerate(messages) if m["role"] == "user")
            parts = [{"type": "image_url", "image_url": {"url": url}} for url in images]
            text_part = {"type": "text", "text": messages[last]["content"]}
            messages[last] = {**messages[last], "content": [text_part, *parts]}
        if note:
            messages.append({"role": "user", "content": note})
        schemas = tools.schemas if tools else None
        with uncharged():  # counted with the messages it is stored with (_persist)
            if on_text is None:
                reply = await self.model.chat(messages, schemas)
            else:
                reply = await self.model.chat(messages, schemas, on_text=on_text)
        conv.mark_sent(reply.prompt_tokens)
        return reply

    def request_messages(self, conv: Conversation, context: str) -> list[dict[str, Any]]:
        """System prompt + history, the latest user message carrying the turn's context."""
        history = list(conv.history)
        last_user = max((i for i, m in enumerate(history) if m["role"] == "user"), default=None)
        if last_user is not None:
            message = history[last_user]
            history[last_user] = {**message, "content": f"{message['content']}\n\n{context}"}
        return [{"role": "system", "content": conv.system_prompt}, *history]

    async def _run_tools(self, conv: Conversation, tools: ToolBox, reply: ModelReply) -> None:
        call_message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.content or None,
            "tool_calls": [call.as_openai() for call in reply.tool_calls],
        }
        results = []
        for call in reply.tool_calls:  # in order: a later call may depend on an earlier one
            metrics.TOOL_CALLS.labels(call.name).inc()
            content = await tools.execute(call)
            results.append(
                {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}
            )
        # added together, so a turn cancelled mid-tools leaves no call without its results
        conv.append([call_message, *results])
        await self.db.run(self._persist, conv, [call_message, *results], reply)

    async def _finish(
        self, conv: Conversation, reply: ModelReply, delivery: str | None
    ) -> tuple[str, int | None]:
        """The answer's text and its stored id."""
        text = (reply.content or "").strip()
        message = {"role": "assistant", "content": text}
        conv.append([message])
        (stored,) = await self.db.run(self._persist, conv, [message], reply, delivery)
        return text, stored

    def _persist(
        self,
        conv: Conversation,
        messages: list[dict[str, Any]],
        reply: ModelReply,
        delivery: str | None = None,
    ) -> list[int | None]:
        """The turn's new messages stored (the last with `delivery`); with the database
        server lost mid-turn they are kept in memory instead (the model's answer is not
        thrown away) and stored, in order, before the session's next message."""
        rows: list[NewMessage] = [to_new_message(m) for m in messages]
        if delivery is not None:
            rows[-1] = dataclasses.replace(rows[-1], delivery=delivery)
        usage = Usage(reply.prompt_tokens or 0, reply.completion_tokens or 0, reply.model)
        waiting = self._unsaved.get(conv.id)
        if waiting is None:
            try:
                return self.db.conversations.add_messages(conv.id, rows, usage=usage)
            except Exception as exc:
                if (problem := storage_problem(exc)) is None:
                    raise
                logger.error(
                    "session %s: kept in memory until it can be stored: %s", conv.id, problem
                )
                waiting = self._unsaved.setdefault(conv.id, [])
        waiting.append((rows, usage))
        return [None] * len(rows)

    def save_unsaved(self, session_id: str | None = None) -> int:
        """Store what a lost database left in memory (one session's, or everyone's), in
        order; raises while the database still cannot take it. Returns the count stored."""
        stored = 0
        for sid in [session_id] if session_id is not None else list(self._unsaved):
            waiting = self._unsaved.get(sid) or []
            while waiting:
                rows, usage = waiting[0]
                self.db.conversations.add_messages(sid, rows, usage=usage)
                waiting.pop(0)
                stored += len(rows)
            self._unsaved.pop(sid, None)
            if stored:
                logger.info("session %s: what the database missed is stored now", sid)
        return stored

    # -- background memory review ---------------------------------------------------------

    def _schedule_review(self, conv: Conversation) -> None:
        interval = self.memory.config.review_interval
        user_turns = sum(1 for m in conv.history if m["role"] == "user")
        if not interval or user_turns % interval or conv.user_id in self._reviews:
            return
        task = asyncio.create_task(self.review(conv))
        self._reviews[conv.user_id] = task
        task.add_done_callback(functools.partial(self._review_done, conv.user_id))

    async def review(self, conv: Conversation) -> None:
        """Look at `conv` for facts worth keeping, with its user's memory tool; nothing
        to do where no personal memory may be written (a shared group session, or any
        group with privacy.group_memory: none)."""
        if conv.shared or not self.sessions.personal(conv.home_surface):
            return
        holder = await self.db.run(self.holder, conv.user_id)
        tools = self.toolbox(conv, conv.home_surface, None, holder).only("memory")
        if not tools.schemas:  # memory is not among the person's tools
            return
        snapshot = self.memory_of(conv.user_id).snapshot()
        with charged_to(conv.user_id):  # after a turn, or from the idle-sessions job
            await review.run(
                conv, model=self.aux_model or self.model, tools=tools, snapshot=snapshot
            )

    async def _compress(self, conv: Conversation, surface: Surface) -> None:
        note = (
            ""
            if conv.shared
            else await self.providers.pre_compress(provider_session(conv), conv.history)
        )
        holder = await self.db.run(self.holder, conv.user_id)
        await compression.compress(
            conv,
            sessions=self.sessions,
            model=self.model,
            summary_model=self.aux_model or self.model,
            keep_recent=self.config.keep_recent_messages,
            flush_tools=self.toolbox(conv, surface, None, holder).only("memory"),
            flush_messages=self.request_messages(conv, ""),
            provider_note=note,
        )

    def _review_done(self, user_id: str, _task: asyncio.Task[None]) -> None:
        self._reviews.pop(user_id, None)

    def check_memory(self, user_id: str) -> None:
        """Consolidate this user's stores over the threshold, in the background."""
        self.memory.request_check(user_id)

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait for background work (e.g. before a one-shot CLI exits)."""
        if self._reviews:
            await asyncio.wait(list(self._reviews.values()), timeout=timeout)
        await self.memory.drain(timeout)
        if self._unsaved:  # a last try before the process ends and they are gone
            try:
                await self.db.run(self.save_unsaved)
            except Exception as exc:
                left = sum(len(rows) for waiting in self._unsaved.values() for rows, _ in waiting)
                logger.error("%d message(s) could not be stored before stopping: %s", left, exc)


__all__ = ["Agent", "Speaker", "Surface", "TurnResult", "TurnStream"]
