"""Files people send are bounded by construction: an image is never decoded past a pixel
budget (a JPEG is decoded straight at a reduced scale), a PDF is read in a child process
with limits on pages, output, memory and time, and every failure is a sentence."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from gateway.pipeline.media import shrink
from gateway.pipeline.pdf_text import pdf_text
from tests.fakes.documents import pdf, png_header

SIDE, KB, PIXELS = 1568, 1500 * 1024, 24_000_000


@pytest.mark.parametrize(
    ("width", "height", "colour_type"),
    [(13_376, 13_376, 6), (40_000, 40_000, 0), (100_000, 300, 2), (5_000, 5_000, 6)],
)
def test_an_image_claiming_more_pixels_than_the_budget_is_refused_before_decoding(
    width: int, height: int, colour_type: int
) -> None:
    with pytest.raises(ValueError, match="megapixels"):
        shrink(png_header(width, height, colour_type), SIDE, KB, 20_000_000)


def test_a_large_jpeg_is_decoded_at_a_reduced_scale_never_whole(tmp_path: Path) -> None:
    """Peak memory measured in a child process: decoding 10,000² RGB whole takes 300 MB;
    drafted at 1/8 it is a few MB."""
    path = tmp_path / "big.jpg"
    Image.new("RGB", (10_000, 10_000), (20, 120, 200)).save(path, "JPEG", quality=50)
    child = f"""
import resource
from gateway.pipeline.media import shrink
data = open({str(path)!r}, "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out, mime = shrink(data, {SIDE}, {KB}, {PIXELS})
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(grew // 1024, mime, len(out))
"""
    result = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, check=True
    )
    grew_mb, mime, size = result.stdout.split()
    assert mime == "image/jpeg" and 0 < int(size) <= KB
    assert int(grew_mb) < 100, f"decoding grew the process by {grew_mb} MB"


def test_a_photo_within_the_budget_is_downscaled_with_its_orientation() -> None:
    out = io.BytesIO()
    image = Image.new("RGB", (3000, 2000), (200, 40, 40))
    exif = image.getexif()
    exif[0x0112] = 6  # rotated: shown 2000 wide, 3000 tall
    image.save(out, "JPEG", exif=exif)
    data, mime = shrink(out.getvalue(), SIDE, KB, PIXELS)
    assert mime == "image/jpeg" and Image.open(io.BytesIO(data)).size == (1045, SIDE)


def test_what_is_not_an_image_is_a_sentence() -> None:
    for junk in (b"", b"not an image", png_header(100, 100)[:40]):
        with pytest.raises(ValueError, match="not an image I can read"):
            shrink(junk, SIDE, KB, PIXELS)


def read(data: bytes, *, pages: int = 100, chars: int = 40_000, seconds: float = 30) -> str:
    return asyncio.run(pdf_text(data, max_pages=pages, max_chars=chars, seconds=seconds))


def test_a_pdf_is_read_up_to_its_page_bound_and_says_so() -> None:
    text = read(pdf("Quarterly numbers", pages=40), pages=5)
    assert text.count("Quarterly numbers") == 5
    assert text.endswith("[only the first 5 of 40 pages were read]")


def test_pages_sharing_one_content_stream_stop_at_the_output_bound() -> None:
    text = read(pdf("x" * 200, pages=300), chars=1000)
    assert "x" * 200 in text and len(text) < 1200
    assert "of 300 pages were read" in text


def test_a_stream_that_inflates_past_its_bound_is_a_clear_refusal() -> None:
    with pytest.raises(ValueError, match=r"^the PDF could not be read \("):
        read(pdf("bomb", inflated=70_000_000))


def test_a_pdf_that_takes_too_long_is_stopped_with_a_sentence() -> None:
    with pytest.raises(ValueError, match=r"took longer than 0.01 s"):
        read(pdf("slow", pages=500), seconds=0.01)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"%PDF-1.4\n garbage", "could not be read"),
        (b"", "could not be read"),
        (pdf(""), "no text layer"),
    ],
)
def test_broken_pdfs_are_sentences(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        read(data)
