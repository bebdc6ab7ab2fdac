"""The turn loop end to end: tools, frozen prompt, persistence, failures."""

from __future__ import annotations

import json
import time

from hermes.agent.agent import FINAL_ANSWER_NOTE, Agent, Surface, TurnResult
from hermes.memory.store import Target
from hermes.state.models import utcnow
from tests.agent.conftest import Harness, last_user_content
from tests.fakes.openai_server import Reply

CLI = Surface("cli")


def test_memory_add_reaches_file_event_log_and_next_prompt_only(harness: Harness) -> None:
    fake = harness.fake
    fake.push(
        Reply.tool_call("memory", {"action": "add", "target": "user", "content": "Prefers tea"}),
        Reply(text="Noted, tea it is."),
        Reply(text="Sure."),
        Reply(text="Hello again."),
    )

    async def scenario(agent: Agent) -> tuple[TurnResult, str]:
        conv = agent.sessions.open(harness.user, CLI, "cli:local")
        first = await agent.turn(conv, "I prefer tea over coffee", CLI)
        await agent.turn(conv, "what's up", CLI)
        second = agent.sessions.open(harness.user, CLI, "cli:local")
        await agent.turn(second, "hi", CLI)
        return first, conv.id

    result, session_id = harness.run(scenario)
    assert result.ok and result.text == "Noted, tea it is."
    memory = harness.db.memory_log.memory_events(harness.user, "tea")
    assert len(memory) == 1 and memory[0].actor == "agent" and memory[0].session_id == session_id
    cause = harness.db.conversations.message(memory[0].message_id or 0, harness.user)
    assert cause is not None and cause.content == "I prefer tea over coffee"
    path = harness.home / "memories" / harness.user / Target.USER.filename
    assert path.read_text() == "Prefers tea"
    prompts = harness.system_prompts()
    assert prompts[0] == prompts[1] == prompts[2]  # byte-identical within the session
    assert "Prefers tea" not in prompts[0]
    assert "Prefers tea" in prompts[3]  # the next session's snapshot has it
    tools = [t["function"]["name"] for t in fake.requests[0]["tools"]]
    # the owner (this agent runs as them) has the web tools too: the web extra is installed
    assert tools == ["memory", "session_search", "schedule", "web_search", "web_fetch"]


def test_messages_are_persisted_in_openai_shape(harness: Harness) -> None:
    harness.fake.push(
        Reply.tool_call("memory", {"action": "add", "target": "memory", "content": "Uses zsh"}),
        Reply(text="Saved."),
    )

    async def scenario(agent: Agent) -> str:
        conv = agent.sessions.open(harness.user, CLI, "k")
        await agent.turn(conv, "remember I use zsh", CLI)
        return conv.id

    session_id = harness.run(scenario)
    rows = harness.db.conversations.messages(session_id, harness.user)
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert json.loads(rows[1].tool_calls or "")[0]["function"]["name"] == "memory"
    assert rows[2].tool_call_id == "call_1" and rows[2].tool_name == "memory"
    assert json.loads(rows[2].content)["success"] is True
    session = harness.db.conversations.get_session(session_id, harness.user)
    assert session is not None and session.prompt_tokens == 20 and session.completion_tokens == 10
    # the person's day, by model: the turn's two replies and the memory guard's judgement
    # of their write (a side call, metered for them: hermes/llm/metering.py), 10+5 each
    assert len(harness.fake.judge_requests) == 1
    (used,) = harness.db.usage.totals("person", utcnow().date())
    assert (used.key, used.prompt, used.completion, used.calls) == (harness.user, 30, 15, 3)
    assert used.model == "main-model"  # the configured name, what its price is set by


def test_turn_context_rides_on_the_latest_user_message_only(harness: Harness) -> None:
    async def scenario(agent: Agent) -> None:
        conv = agent.sessions.open(harness.user, CLI, "k")
        await agent.turn(conv, "first", Surface("telegram", "group", "-100"))
        await agent.turn(conv, "second", CLI)

    harness.run(scenario)
    first, second = harness.fake.requests
    assert last_user_content(first).startswith("first\n\n[context: telegram group · ")
    users = [m["content"] for m in second["messages"] if m["role"] == "user"]
    assert users[0] == "first" and users[1].startswith("second\n\n[context: cli dm · ")
    assert "telegram" not in second["messages"][0]["content"]  # not in the system prompt


def test_search_finds_an_earlier_session(harness: Harness) -> None:
    harness.fake.push(
        Reply(text="A zebra-themed app, nice."),
        Reply.tool_call("session_search", {"query": "zebra app"}),
        Reply(text="They are building a zebra-themed budgeting app."),  # the summary
        Reply(text="We talked about your zebra app."),
    )

    async def scenario(agent: Agent) -> None:
        old = agent.sessions.open(harness.user, Surface("telegram"), "tg:1")
        await agent.turn(old, "I'm building a zebra-themed budgeting app", Surface("telegram"))
        new = agent.sessions.open(harness.user, CLI, "cli")
        await agent.turn(new, "what was my app idea?", CLI)

    harness.run(scenario)
    tool_message = harness.fake.requests[3]["messages"][-1]
    result = json.loads(tool_message["content"])
    assert result["count"] == 1 and result["results"][0]["platform"] == "telegram"
    assert "zebra" in result["results"][0]["snippets"][0]
    assert "budgeting" in result["results"][0]["summary"]  # by the auxiliary model


def test_malformed_arguments_and_unknown_tools_are_recoverable(harness: Harness) -> None:
    harness.fake.push(
        Reply.tool_call("memory", '{"action": "add", "target": '),
        Reply.tool_call("weather", {"city": "Seoul"}, call_id="c2"),
        Reply(text="Sorry, I can't check the weather."),
    )

    async def scenario(agent: Agent) -> TurnResult:
        return await agent.turn(agent.sessions.open(harness.user, CLI, "k"), "weather?", CLI)

    assert harness.run(scenario).text == "Sorry, I can't check the weather."
    second, third = harness.fake.requests[1], harness.fake.requests[2]
    assert "not valid JSON" in json.loads(second["messages"][-1]["content"])["error"]
    assert "Unknown tool 'weather'" in json.loads(third["messages"][-1]["content"])["error"]


def test_tool_loop_stops_at_the_cap_with_a_final_answer_request(harness: Harness) -> None:
    harness.agent_config = harness.agent_config.model_copy(update={"max_tool_iterations": 3})
    search = Reply.tool_call("session_search", {"query": "x"})
    harness.fake.push(search, search, search, Reply(text="Here is what I have."))

    async def scenario(agent: Agent) -> TurnResult:
        return await agent.turn(agent.sessions.open(harness.user, CLI, "k"), "loop please", CLI)

    assert harness.run(scenario).text == "Here is what I have."
    requests = harness.fake.requests
    assert len(requests) == 4
    assert (
        "tools" not in requests[3] and requests[3]["messages"][-1]["content"] == FINAL_ANSWER_NOTE
    )


def test_429_is_waited_out_and_answered_once(harness: Harness) -> None:
    harness.fake.push(Reply(status=429, retry_after=1), Reply(text="Done."))

    async def scenario(agent: Agent) -> tuple[TurnResult, str]:
        conv = agent.sessions.open(harness.user, CLI, "k")
        return await agent.turn(conv, "hello", CLI), conv.id

    started = time.monotonic()
    result, session_id = harness.run(scenario)
    assert result.text == "Done." and time.monotonic() - started >= 0.9
    assert [m.content for m in harness.db.conversations.messages(session_id, harness.user)] == [
        "hello",
        "Done.",
    ]


def test_unreachable_model_keeps_the_message_and_says_so(harness: Harness) -> None:
    harness.fake.default = Reply(status=500)

    async def scenario(agent: Agent) -> tuple[TurnResult, str]:
        conv = agent.sessions.open(harness.user, CLI, "k")
        return await agent.turn(conv, "are you there?", CLI), conv.id

    result, session_id = harness.run(scenario)
    assert not result.ok
    assert (
        result.text.endswith("Your message was saved; try again.")
        and "sk-secret" not in result.text
    )
    assert [m.content for m in harness.db.conversations.messages(session_id, harness.user)] == [
        "are you there?"
    ]


def test_timeout_message_names_the_timeout(harness: Harness) -> None:
    harness.timeout, harness.max_retries = 0.5, 0
    harness.fake.default = Reply(delay=2)

    async def scenario(agent: Agent) -> TurnResult:
        return await agent.turn(agent.sessions.open(harness.user, CLI, "k"), "slow?", CLI)

    assert harness.run(scenario).text == (
        "The model endpoint is not answering (timeout after 0.5 s). "
        "Your message was saved; try again."
    )


def test_redelivered_platform_message_is_not_answered_twice(harness: Harness) -> None:
    async def scenario(agent: Agent) -> tuple[TurnResult, TurnResult]:
        conv = agent.sessions.open(harness.user, Surface("telegram"), "k")
        first = await agent.turn(conv, "hi", Surface("telegram"), platform_message_id="1:77")
        again = await agent.turn(conv, "hi", Surface("telegram"), platform_message_id="1:77")
        return first, again

    first, again = harness.run(scenario)
    assert first.ok and not first.duplicate and again.duplicate
    assert len(harness.fake.requests) == 1


def test_resume_continues_with_the_same_prompt_and_history(harness: Harness) -> None:
    harness.fake.push(Reply(text="Hi on telegram."), Reply(text="Hi again from the CLI."))

    async def scenario(agent: Agent) -> None:
        conv = agent.sessions.open(harness.user, Surface("telegram"), "tg")
        await agent.turn(conv, "hello from telegram", Surface("telegram"))
        agent.memory_of(harness.user).store(Target.USER)  # memory may change meanwhile
        resumed = agent.sessions.resume(harness.user, conv.id)
        assert resumed is not None
        await agent.turn(resumed, "and now from the terminal", CLI)
        assert agent.sessions.resume("u_0000000000000000", conv.id) is None  # not another user's

    harness.run(scenario)
    first, second = harness.fake.requests
    assert first["messages"][0] == second["messages"][0]
    assert [m["content"] for m in second["messages"][1:3]] == [
        "hello from telegram",
        "Hi on telegram.",
    ]


def test_soul_md_replaces_the_default_persona(harness: Harness) -> None:
    (harness.home / "SOUL.md").write_text("You are Ada, a terse lab assistant.\n")

    async def scenario(agent: Agent) -> None:
        await agent.turn(agent.sessions.open(harness.user, CLI, "k"), "hi", CLI)

    harness.run(scenario)
    prompt = harness.system_prompts()[0]
    assert (
        prompt.startswith("You are Ada, a terse lab assistant.") and "You are Hermes" not in prompt
    )
    assert "# Your memory" in prompt


def test_after_an_idle_end_the_next_message_starts_fresh_with_a_pointer(harness: Harness) -> None:
    telegram = Surface("telegram", "dm", "42")

    async def scenario(agent: Agent) -> tuple[str, str, str]:
        first = agent.sessions.for_key(harness.user, telegram, "telegram:dm:42")
        await agent.turn(first, "planning the Lisbon trip", telegram)
        same = agent.sessions.for_key(harness.user, telegram, "telegram:dm:42")
        assert same.id == first.id  # still open: the same session continues
        harness.db.conversations.end_session(first.id, "idle")  # what the idle_sessions job does
        second = agent.sessions.for_key(harness.user, telegram, "telegram:dm:42")
        await agent.turn(second, "hello again", telegram)
        await agent.turn(second, "and again", telegram)
        return first.id, second.id, second.system_prompt

    first_id, second_id, _ = harness.run(scenario)
    assert first_id != second_id
    opening = last_user_content(harness.fake.requests[1])
    assert f"previous conversation: session {first_id}" in opening and "Lisbon" in opening
    later = last_user_content(harness.fake.requests[2])
    assert "previous conversation" not in later  # one line, once
