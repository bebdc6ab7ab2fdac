"""The `send_file` tool's gateway side: a file the assistant wrote, uploaded into the
chat the turn is in, through that platform's adapter (`SendsFiles`).

A turn runs where its platform is served (gateway/pipeline/shared.py), so the adapter
is this process's. The upload goes through the delivery path's retries (a 429 waited
out as asked, a retryable error sent again with backoff, an unknown outcome never sent
again); one that fails is counted, logged and recorded in the delivery ledger as a
reply that could not be delivered is (`Delivery.record_failure`), and the tool's result
says so in words the model can pass on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.edge.events import ChatRef, OutboundFile
from gateway.edge.ports import PlatformAdapter, SendsFiles
from gateway.pipeline.delivery import Delivery
from hermes import metrics
from hermes.places import Surface
from hermes.tools.files import WrittenFile


class FileDesk:
    """The agent's `Filer`: sends files to the chats of the adapters attached here."""

    def __init__(
        self, delivery: Delivery, adapters: Mapping[str, PlatformAdapter], max_bytes: int
    ) -> None:
        self.delivery, self.adapters, self.max_bytes = delivery, adapters, max_bytes

    def _adapter(self, surface: Surface) -> SendsFiles | None:
        adapter = self.adapters.get(surface.platform)
        if isinstance(adapter, SendsFiles) and adapter.capabilities.max_file_bytes > 0:
            return adapter
        return None

    def limit(self, surface: Surface) -> int | None:
        adapter = self._adapter(surface)
        if adapter is None:
            return None
        return min(self.max_bytes, adapter.capabilities.max_file_bytes)

    async def send(
        self, surface: Surface, file: WrittenFile, reply_to: str | None = None
    ) -> dict[str, Any]:
        adapter = self._adapter(surface)
        if adapter is None:
            return {"success": False, "error": "Files cannot be sent in this chat."}
        chat = ChatRef(surface.chat_id, surface.chat_type, surface.thread_id)
        outbound = OutboundFile(chat, file.name, file.mime, file.data, file.caption, reply_to)
        result, attempts = await self.delivery.attempt(lambda: adapter.send_file(outbound))
        if result.ok:
            metrics.FILES_SENT.labels(adapter.name).inc()
            return {"success": True, "sent": file.name, "size": file.size_text}
        # as a reply's part that could not be delivered: counted, logged, in the ledger
        await self.delivery.record_failure(adapter, chat, None, result, attempts)
        why = "it may have arrived" if result.outcome_unknown else "it was not sent"
        return {
            "success": False,
            "error": f"The file could not be sent ({why}): {result.error or 'no answer'}.",
        }


__all__ = ["FileDesk"]
