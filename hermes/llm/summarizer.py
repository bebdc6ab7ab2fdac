"""Query-focused summaries of past conversations, written by the auxiliary model."""

from __future__ import annotations

from hermes.llm.client import LLMClient

INSTRUCTIONS = (
    "You summarize an excerpt of a past conversation between a user and an assistant, "
    "for the assistant to use in a new conversation. Focus only on what is relevant to "
    "the search query. Be factual and concise (at most 3 sentences); include dates, "
    "names and decisions when present; say so if the excerpt is not relevant."
)


class LLMSummarizer:
    def __init__(self, client: LLMClient, max_tokens: int = 200) -> None:
        self.client = client
        self.max_tokens = max_tokens

    async def summarize(self, query: str, excerpt: str) -> str:
        messages = [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": f"Search query: {query}\n\nExcerpt:\n{excerpt}"},
        ]
        return await self.client.text(messages, max_tokens=self.max_tokens)
