"""The LLM client: `openai.AsyncOpenAI` against any OpenAI-compatible endpoint.

The openai package retries 429 (honouring Retry-After), 5xx and connection errors with
exponential backoff, `max_retries` times, and applies the per-call timeout; we map what
still fails to LLMError with a short message that never echoes secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from hermes import metrics
from hermes.llm import metering
from hermes.llm.endpoint import Endpoint
from hermes.llm.metering import Meter
from hermes.llm.types import ModelReply, ToolCall
from hermes.text import valid_text

if TYPE_CHECKING:  # the SDK is imported on the first call: a CLI command that never
    import openai  # talks to a model does not pay for it (about 0.8 s of CPU)

logger = logging.getLogger(__name__)

# a streamed reply's text is handed on at most this often (a person sees no difference;
# a million-character reply no longer costs its length squared)
TEXT_EVERY_S = 0.05
# a reply's bound (text, and each tool call's arguments): far past any model's longest
# real output (128k tokens is ~500,000 characters), it stops an endpoint gone wrong from
# streaming gigabytes within the deadline (the stream is closed: nothing more is read)
MAX_REPLY_CHARS = 2_000_000
MAX_NAME_CHARS = 200  # a tool's name (ours are short; an unknown one is refused by name)
CUT_NOTE = "\n\n_(reply cut off: it ran past 2,000,000 characters)_"
TRANSCRIPT_CUT_NOTE = " [the transcript ran past 2,000,000 characters: cut]"
NO_KEY = "no-key-needed"  # local servers (Ollama, vLLM) accept any key


NOT_A_COMPLETION = (
    "The model endpoint answered with something that is not a chat completion (not JSON, "
    "or JSON of another shape): check llm.base_url points at an OpenAI-compatible /v1."
)


NOT_EMBEDDINGS = (
    "The embeddings endpoint answered with something that is not a list of embeddings, one "
    "per text: check search.embeddings.base_url and model."
)


NOT_A_TRANSCRIPT = (
    "The transcription endpoint answered with something that is not a transcript: check "
    "transcription.base_url and transcription.model."
)


class LLMError(Exception):
    """The model endpoint failed after retries; the message is safe to show a user.
    `status` is the HTTP status of an error answer (None: no answer, or not HTTP)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class LLMClient:
    def __init__(self, endpoint: Endpoint, meter: Meter | None = None) -> None:
        self.endpoint = endpoint
        self.meter = meter  # counts the tokens of calls made for a person (metering.py)
        self._sdk_client: openai.AsyncOpenAI | None = None

    @property
    def _client(self) -> openai.AsyncOpenAI:
        if self._sdk_client is None:
            from openai import AsyncOpenAI

            self._sdk_client = AsyncOpenAI(
                base_url=self.endpoint.base_url,
                api_key=self.endpoint.api_key or NO_KEY,
                timeout=self.endpoint.timeout,
                max_retries=self.endpoint.max_retries,
            )
        return self._sdk_client

    async def _chat_completion(self, body: dict[str, Any], *, stream: bool) -> Any:
        """POST /chat/completions with `body` as it is, through the SDK's client (its
        retries, timeouts, errors and parsing: a ChatCompletion, or a stream of chunks).
        `chat.completions.create` would first walk the whole request through its
        typed-dict transform, which leaves plain JSON like ours as it was and cost about
        3 ms a call for 20 messages and 4 tools, on the event loop, growing with the
        conversation."""
        from openai import AsyncStream
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        return await self._client.post(
            "/chat/completions",
            body=body,
            cast_to=ChatCompletion,
            stream=stream,
            stream_cls=AsyncStream[ChatCompletionChunk],
        )

    def warm(self) -> None:
        """Import what a first call loads (the SDK, its chat resources and their
        types: about a second of CPU, longer on a busy machine) and make the client,
        here (a gateway calls it on a thread at start) rather than inside the first
        turn, on the event loop, where every chat would wait for it."""
        import openai.types.chat  # noqa: F401 - loaded for the side effect

        _ = self._client.chat.completions

    async def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Any:
        """One chat completion (the SDK's ChatCompletion object)."""
        async with self._deadline():
            completion = await self._complete(messages, tools, temperature, max_tokens)
        usage = getattr(completion, "usage", None)
        await self._charge(
            getattr(usage, "prompt_tokens", 0), getattr(usage, "completion_tokens", 0)
        )
        return completion

    async def _complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        temperature: float | None,
        max_tokens: int | None,
    ) -> Any:
        kwargs: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": list(messages),
            "temperature": self.endpoint.temperature if temperature is None else temperature,
        }
        if tools:
            kwargs["tools"] = list(tools)
        if max_tokens:
            kwargs["max_tokens"] = max_tokens
        import openai

        started = time.perf_counter()
        try:
            return await self._chat_completion(kwargs, stream=False)
        except openai.APIError as exc:
            metrics.MODEL_ERRORS.labels(_kind(exc)).inc()
            raise _error(exc, self.endpoint.timeout) from None
        except ValueError:  # a body that is not JSON
            metrics.MODEL_ERRORS.labels("not_a_completion").inc()
            raise LLMError(NOT_A_COMPLETION) from None
        finally:
            metrics.MODEL_CALL_SECONDS.observe(time.perf_counter() - started)

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        temperature: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        """One reply. With `on_text`, the reply is streamed: `on_text` gets the text so
        far at each piece. A stream that breaks off (a dropped connection, an error
        event, a body that is not a stream) is not resumed: the same request is made
        again without streaming (the SDK's retries apply to it), so the reply returned
        is always one complete answer, never the broken-off part. Both together finish
        within the endpoint's deadline, or LLMError says the model is not answering."""
        model = self.endpoint.model
        reply = None
        async with self._deadline():
            if on_text is not None:
                reply = await self._stream(messages, tools, temperature, on_text)
            if reply is None:
                completion = await self._complete(messages, tools, temperature, None)
                try:
                    reply = _reply(completion)
                except (AttributeError, TypeError, IndexError, KeyError):  # JSON's shape
                    raise LLMError(NOT_A_COMPLETION) from None
        await self._charge(reply.prompt_tokens, reply.completion_tokens)
        return dataclasses.replace(reply, model=model)

    async def _charge(self, prompt: int | None, completion: int | None) -> None:
        """Count a call's tokens for the person it was made for (metering.py), when
        there is one and the endpoint said what it used. Counting never fails a call."""
        who = metering.payer()
        if who is None or self.meter is None or not (prompt or completion):
            return
        try:
            await self.meter(who, prompt or 0, completion or 0, self.endpoint.model)
        except Exception as exc:
            logger.warning("tokens of a call for %s not counted: %s", who, exc)

    @contextlib.asynccontextmanager
    async def _deadline(self) -> AsyncIterator[None]:
        """One call, retries and a trickling stream included, within the deadline."""
        deadline = self.endpoint.deadline
        try:
            async with asyncio.timeout(deadline):
                yield
        except TimeoutError:
            metrics.MODEL_ERRORS.labels("deadline").inc()
            raise LLMError(
                f"The model endpoint is not answering (no complete reply within {deadline:g} s)."
            ) from None

    async def _stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        temperature: float | None,
        on_text: Callable[[str], None],
    ) -> ModelReply | None:
        """The streamed reply, or None when the stream failed (ask again, whole)."""
        import httpx2
        import openai

        kwargs: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": list(messages),
            "temperature": self.endpoint.temperature if temperature is None else temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            kwargs["tools"] = list(tools)
        started = time.perf_counter()
        reply = _StreamedReply()
        try:
            stream = await self._chat_completion(kwargs, stream=True)
            shown, shown_at = 0, 0.0
            async for piece in stream:
                # the text so far, at most every TEXT_EVERY_S (each call hands over the
                # whole text: per chunk, a long reply would cost its length squared)
                if reply.add(piece) and time.monotonic() - shown_at >= TEXT_EVERY_S:
                    on_text(reply.text)
                    shown, shown_at = reply.length, time.monotonic()
                if reply.cut:
                    await stream.close()  # nothing more is read (or generated)
                    logger.warning("the model's reply ran past %d characters: cut", MAX_REPLY_CHARS)
                    break
            if reply.cut or reply.length != shown:
                on_text(reply.text)
            return reply.result()
        except openai.APIStatusError as exc:
            if exc.status_code not in (400, 404, 415, 422):
                metrics.MODEL_ERRORS.labels(_kind(exc)).inc()
                raise _error(exc, self.endpoint.timeout) from None
            # an endpoint that refuses streaming (or stream_options): the plain request
            logger.info("the model endpoint refused a streamed request (HTTP %s)", exc.status_code)
        except openai.APITimeoutError as exc:  # already retried by the SDK
            metrics.MODEL_ERRORS.labels(_kind(exc)).inc()
            raise _error(exc, self.endpoint.timeout) from None
        except (openai.APIError, httpx2.HTTPError, ValueError, AttributeError, TypeError) as exc:
            metrics.MODEL_ERRORS.labels("stream_interrupted").inc()
            logger.warning(
                "the model's stream broke off (%s); asking again without streaming",
                type(exc).__name__,
            )
        finally:
            metrics.MODEL_CALL_SECONDS.observe(time.perf_counter() - started)
        return None

    async def text(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> str:
        completion = await self.complete(messages, **kwargs)
        try:
            content = completion.choices[0].message.content if completion.choices else None
        except (AttributeError, TypeError, IndexError, KeyError):
            raise LLMError(NOT_A_COMPLETION) from None
        if not content:
            raise LLMError("The model returned an empty answer.")
        return _bounded(str(content))

    async def embed(
        self,
        texts: Sequence[str],
        *,
        dimensions: int | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        input_type: str | None = None,
    ) -> list[list[float]]:
        """Embeddings of `texts` (POST /embeddings), in their order. `input_type`: what
        the texts are, for the APIs that take it ("query", "document")."""
        import openai

        kwargs: dict[str, Any] = {
            "model": self.endpoint.model,
            "input": list(texts),
            "encoding_format": "float",  # base64 (the SDK's default) is not served everywhere
        }
        if dimensions:
            kwargs["dimensions"] = dimensions
        if input_type:
            kwargs["extra_body"] = {"input_type": input_type}
        client = self._client
        if timeout is not None or retries is not None:
            client = client.with_options(
                timeout=self.endpoint.timeout if timeout is None else timeout,
                max_retries=self.endpoint.max_retries if retries is None else retries,
            )
        try:
            page = await client.embeddings.create(**kwargs)
            items = sorted(page.data, key=lambda item: item.index)
            vectors = [list(item.embedding) for item in items]
        except openai.APIError as exc:
            metrics.MODEL_ERRORS.labels(_kind(exc)).inc()
            raise _error(exc, timeout or self.endpoint.timeout) from None
        except (ValueError, AttributeError, TypeError):  # not JSON, or of another shape
            metrics.MODEL_ERRORS.labels("not_a_completion").inc()
            raise LLMError(NOT_EMBEDDINGS) from None
        if len(vectors) != len(texts) or not all(vectors):
            raise LLMError(NOT_EMBEDDINGS)
        return vectors

    async def transcribe(self, audio: bytes, filename: str, mime: str = "") -> str:
        """Speech to text (POST /audio/transcriptions): the transcript, stripped."""
        import openai

        upload = (filename, audio, mime) if mime else (filename, audio)
        started = time.perf_counter()
        try:
            result = await self._client.audio.transcriptions.create(
                model=self.endpoint.model, file=upload
            )
            transcript = str(getattr(result, "text", "") or "")
        except openai.APIError as exc:
            metrics.MODEL_ERRORS.labels(_kind(exc)).inc()
            raise _error(exc, self.endpoint.timeout) from None
        except (ValueError, AttributeError, TypeError):
            raise LLMError(NOT_A_TRANSCRIPT) from None
        finally:
            metrics.MODEL_CALL_SECONDS.observe(time.perf_counter() - started)
        return _bounded(transcript.strip(), TRANSCRIPT_CUT_NOTE)

    async def health(self, timeout: float = 5.0) -> str:
        """A cheap probe (GET /models): 'ok' or what is wrong, never raising."""
        import openai

        client = self._client.with_options(timeout=timeout, max_retries=0)
        where = self.endpoint.base_url
        try:
            page = await client.models.list()
        except openai.AuthenticationError:
            return f"refused the API key ({where})"
        except openai.APIStatusError as exc:
            return f"error HTTP {exc.status_code} ({where})"
        except openai.APIError:
            return f"unreachable ({where})"
        listed = {model.id for model in page.data}
        known = "" if not listed or self.endpoint.model in listed else ", model not listed"
        return f"ok ({self.endpoint.model} at {where}{known})"

    async def close(self) -> None:
        """Close the connections; a later call opens new ones (in the loop then running)."""
        if self._sdk_client is not None:
            client, self._sdk_client = self._sdk_client, None
            await client.close()


class _StreamedReply:
    """A reply put together from stream chunks (content pieces, tool calls by index)."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._text = ""  # the parts joined, up to `_joined` of them
        self._joined = 0
        self.length = 0
        self.calls: dict[int, dict[str, str]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.cut = False  # past MAX_REPLY_CHARS: the rest is not taken

    def add(self, chunk: Any) -> bool:
        """Take one chunk; True when the text grew. Past MAX_REPLY_CHARS (the text or a
        tool call's arguments) `cut` is set and the reply ends there."""
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        if not chunk.choices:
            return False
        choice = chunk.choices[0]
        self.finish_reason = choice.finish_reason or self.finish_reason
        delta = choice.delta
        for call in getattr(delta, "tool_calls", None) or []:
            slot = self.calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = call.id or slot["id"]
            if call.function is not None:
                slot["name"] = (slot["name"] + (call.function.name or ""))[:MAX_NAME_CHARS]
                slot["arguments"] += call.function.arguments or ""
                if len(slot["arguments"]) > MAX_REPLY_CHARS:
                    slot["arguments"] = slot["arguments"][:MAX_REPLY_CHARS]
                    self.cut = True
        if delta.content:
            self._parts.append(delta.content)
            self.length += len(delta.content)
            if self.length > MAX_REPLY_CHARS:
                self.cut = True
            return True
        return False

    @property
    def text(self) -> str:
        if self._joined != len(self._parts):
            self._text = _bounded("".join(self._parts))
            if self.cut:
                self.length = len(self._text)
            self._parts = [self._text]
            self._joined = 1
        return self._text

    def result(self) -> ModelReply:
        if self.cut:  # ended by us, not by the endpoint
            self.finish_reason = "length"
        if self.finish_reason is None:  # every complete stream ends with one
            raise ValueError("the stream ended without a finish reason (cut off)")
        calls = tuple(
            ToolCall(
                id=slot["id"] or f"call_{index}",
                name=valid_text(slot["name"]),
                arguments=valid_text(slot["arguments"]),
            )
            for index, slot in sorted(self.calls.items())
        )
        usage = self.usage
        return ModelReply(
            content=self.text or None,
            tool_calls=calls,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            finish_reason=self.finish_reason,
        )


def _bounded(text: str, note: str = CUT_NOTE) -> str:
    """`text` within MAX_REPLY_CHARS, with `note` when it was cut, as valid Unicode (an
    endpoint's JSON may escape half an emoji: hermes/text.py)."""
    text = valid_text(text)
    return text if len(text) <= MAX_REPLY_CHARS else text[:MAX_REPLY_CHARS] + note


def _reply(completion: Any) -> ModelReply:
    if not completion.choices:
        raise LLMError("The model returned no answer.")
    choice = completion.choices[0]
    calls = tuple(
        ToolCall(
            id=call.id or f"call_{index}",
            name=valid_text((getattr(call.function, "name", "") or "")[:MAX_NAME_CHARS]),
            arguments=valid_text((getattr(call.function, "arguments", "") or "")[:MAX_REPLY_CHARS]),
        )
        for index, call in enumerate(choice.message.tool_calls or [])
    )
    usage = completion.usage
    content = choice.message.content
    return ModelReply(
        content=_bounded(content) if isinstance(content, str) else content,
        tool_calls=calls,
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
        finish_reason=choice.finish_reason,
    )


def _kind(exc: openai.APIError) -> str:
    """The failure's kind, for the metrics."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "unreachable"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limited"
    if isinstance(exc, openai.AuthenticationError):
        return "auth"
    if isinstance(exc, openai.APIStatusError):
        return "http_status"
    return "not_a_completion"


def _error(exc: openai.APIError, timeout: float) -> LLMError:
    """The clear message for a failed call (safe to show a user)."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return LLMError(f"The model endpoint is not answering (timeout after {timeout:g} s).")
    if isinstance(exc, openai.APIConnectionError):
        return LLMError("The model endpoint cannot be reached.")
    if isinstance(exc, openai.RateLimitError):
        return LLMError("The model endpoint is rate-limiting us; try again shortly.", 429)
    if isinstance(exc, openai.AuthenticationError):
        return LLMError(
            "The model endpoint refused the API key (check llm.api_key_env).", exc.status_code
        )
    if isinstance(exc, openai.APIStatusError):
        return LLMError(
            f"The model endpoint answered with an error (HTTP {exc.status_code}).",
            exc.status_code,
        )
    return LLMError(NOT_A_COMPLETION)  # APIResponseValidationError: JSON of another shape
