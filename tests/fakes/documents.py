"""Files people send, built byte by byte for tests: PDFs (plain, many pages sharing one
content stream, a stream that inflates far beyond its size) and image headers that claim
more pixels than any photo has."""

from __future__ import annotations

import struct
import zlib


def pdf(text: str, *, pages: int = 1, inflated: int = 0) -> bytes:
    """A PDF with `text` on each of `pages` pages, all drawn by one shared content stream
    (Helvetica), xref and all. With `inflated`, the stream is Flate-compressed and ends
    in that many zero bytes of padding (a bomb: a few KB that inflate to `inflated`)."""
    stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET\n".encode()
    filters = b""
    if inflated:
        stream = zlib.compress(stream + b" " * inflated, 9)
        filters = b" /Filter /FlateDecode"
    kids = b" ".join(b"%d 0 R" % (5 + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Length %d%s >>\nstream\n" % (len(stream), filters) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    objects += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
        b"/Resources << /Font << /F1 4 0 R >> >> >>"
    ] * pages
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return out


def png_header(width: int, height: int, colour_type: int = 6) -> bytes:
    """A PNG that claims `width`×`height` pixels (RGBA by default) and carries one row of
    them: what a decompression bomb looks like before anything is decoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    row = zlib.compress(b"\x00" * (1 + width * 4))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", row) + chunk(b"IEND", b"")
