"""A PDF's text, read in a child process with bounds on pages, output, memory and time.

A PDF is a program more than a file: a small one can share one huge content stream
across every page, inflate a stream to hundreds of megabytes, or nest objects without
end. pypdf cannot be interrupted from another thread, so the reading runs in a child
process (`python -m gateway.pipeline.pdf_text`) that limits its own address space and CPU time,
reads at most `max_pages` pages and stops once it has `max_chars` characters; the parent
kills it at `seconds`. Every way it can fail is a ValueError with a sentence a person
can read.

Protocol: the PDF on stdin; argv: max_pages max_chars; one JSON object on stdout:
{"text": str, "pages_read": int, "pages": int} or {"error": str}.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import resource
import sys

MEMORY_LIMIT = 1024 * 1024 * 1024  # the child's address space (Python + pypdf + the PDF)
STREAM_LIMIT = 20_000_000  # bytes one decompressed stream may take in the child


async def pdf_text(data: bytes, *, max_pages: int, max_chars: int, seconds: float) -> str:
    """The text of the PDF `data`; ValueError (a sentence for the person) otherwise."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.pipeline.pdf_text",
        str(max_pages),
        str(max_chars),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(data), seconds)
    except TimeoutError:
        raise ValueError(f"the PDF took longer than {seconds:g} s to read") from None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    try:
        answer = json.loads(out)
    except ValueError:
        raise ValueError("the PDF could not be read (it needs too much memory)") from None
    if "error" in answer:
        raise ValueError(str(answer["error"]))
    text, read, pages = str(answer["text"]), int(answer["pages_read"]), int(answer["pages"])
    if read < pages:
        text += f"\n\n[only the first {read} of {pages} pages were read]"
    return text


def _read(data: bytes, max_pages: int, max_chars: int) -> dict[str, object]:
    from pypdf import PdfReader  # noqa: PLC0415 - the child's only work
    from pypdf.errors import PyPdfError  # noqa: PLC0415

    _limit_streams()
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            return {"error": "the PDF is password-protected"}
        pages, texts, chars = len(reader.pages), [], 0
        for page in reader.pages[:max_pages]:
            texts.append((page.extract_text() or "").strip())
            chars += len(texts[-1])
            if chars >= max_chars:
                break
    except MemoryError:
        return {"error": "the PDF could not be read (it needs too much memory)"}
    except (PyPdfError, OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        return {"error": f"the PDF could not be read ({type(exc).__name__})"}
    text = "\n\n".join(texts)
    if not text.strip():
        return {"error": "the PDF has no text layer (a scan?); a photo of it would work"}
    return {"text": text[:max_chars], "pages_read": len(texts), "pages": pages}


def _limit_streams() -> None:
    """pypdf's own caps on decompressed data, well under its defaults."""
    import pypdf  # noqa: PLC0415

    pypdf.overwrite_configuration(
        zlib_maximum_output_length=STREAM_LIMIT,
        lzw_maximum_output_length=STREAM_LIMIT,
        run_length_maximum_output_length=STREAM_LIMIT,
        maximum_declared_stream_length=STREAM_LIMIT,
        array_based_stream_maximum_output_length=STREAM_LIMIT,
        stream_decoding_work_maximum_length=10 * STREAM_LIMIT,
    )


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    max_pages, max_chars = int(sys.argv[1]), int(sys.argv[2])
    answer = _read(sys.stdin.buffer.read(), max_pages, max_chars)
    sys.stdout.write(json.dumps(answer, ensure_ascii=False))


if __name__ == "__main__":
    main()


__all__ = ["pdf_text"]
