"""The tools of one turn, and their execution tolerant of real-world model output.

Malformed JSON arguments, unknown tool names and failing tools all become a tool
result the model can read and recover from; nothing here raises into the turn loop.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hermes.llm.types import ChatModel, ToolCall

logger = logging.getLogger(__name__)

Executor = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
Check = Callable[[str], Awaitable[str | None]]  # a group -> None (allowed) or why not


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    schema: dict[str, Any]
    run: Executor
    status: str = ""  # what a streamed reply shows while it runs ("searching ...")
    group: str = ""  # its capability (hermes/tools/capabilities.py); "" for none


class ToolBox:
    """`check`: asked again for a tool's group when a call runs (the person's role may
    have changed since the list was offered); a refusal is the call's result."""

    def __init__(self, tools: list[Tool], check: Check | None = None) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._check = check

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema for tool in self._tools.values()]

    def status(self, name: str) -> str:
        """The short note shown while the tool `name` runs."""
        tool = self._tools.get(name)
        return (tool.status if tool is not None else "") or "working…"

    def only(self, *names: str) -> ToolBox:
        return ToolBox([t for name, t in self._tools.items() if name in names], self._check)

    async def execute(self, call: ToolCall) -> str:
        """The JSON text of the tool message answering `call`."""
        return json.dumps(await self._result(call), ensure_ascii=False)

    async def _result(self, call: ToolCall) -> dict[str, Any]:
        tool = self._tools.get(call.name)
        if tool is None:
            available = ", ".join(sorted(self._tools)) or "none"
            return _error(f"Unknown tool {call.name!r}. Available tools: {available}.")
        try:
            args = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return _error(
                f"The arguments were not valid JSON ({exc.msg} at char {exc.pos}). "
                f"Call {call.name} again with a JSON object."
            )
        if not isinstance(args, dict):
            return _error(f"The arguments must be a JSON object, got {type(args).__name__}.")
        if self._check is not None and tool.group and (why := await self._check(tool.group)):
            logger.info("tool %s refused at its call: %s", call.name, why)
            return _error(f"This person may not use {call.name}: {why}. Do not call it again.")
        try:
            return await tool.run(args)
        except Exception as exc:
            logger.exception("tool %s failed", call.name)
            return _error(f"The tool {call.name} failed ({type(exc).__name__}).")


async def side_loop(
    model: ChatModel,
    messages: list[dict[str, Any]],
    tools: ToolBox,
    iterations: int,
    temperature: float | None = None,
) -> None:
    """A tool-only side conversation (memory flush, memory review); nothing is persisted
    but what the tools themselves write. Model failures propagate as LLMError."""
    for _ in range(iterations):
        reply = await model.chat(messages, tools.schemas, temperature=temperature)
        if not reply.tool_calls:
            return
        calls = [call.as_openai() for call in reply.tool_calls]
        messages.append({"role": "assistant", "content": reply.content, "tool_calls": calls})
        for call in reply.tool_calls:
            result = await tools.execute(call)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def _error(message: str) -> dict[str, Any]:
    return {"success": False, "error": message}
