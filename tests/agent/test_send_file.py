"""What `send_file` sends, decided once for every platform (hermes/tools/files.py): plain
names of text formats, nothing active when opened, sizes counted in the bytes uploaded;
and the terminal's side, which saves the file without ever overwriting one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from adapters.cli.adapter import CLI_CHAT, CliAdapter
from gateway.edge.events import OutboundFile
from hermes.tools.files import MAX_CAPTION, FileRefusedError, check_name, mime_of, written_file


@pytest.mark.parametrize(
    ("name", "mime"),
    [
        ("budget.csv", "text/csv"),
        ("Notes.MD", "text/markdown"),
        ("dentist.ics", "text/calendar"),
        ("config.yaml", "application/yaml"),
        ("data.json", "application/json"),
        ("backup.sh", "text/plain"),
        ("index.ts", "text/plain"),
        ("Makefile.makefile", "text/plain"),
        ("résumé v2.txt", "text/plain"),
        ("アジェンダ.md", "text/markdown"),
    ],
)
def test_text_formats_are_sent_with_their_type(name: str, mime: str) -> None:
    assert check_name(name) == name
    assert mime_of(name) == mime


@pytest.mark.parametrize(
    "name",
    [
        "page.html",
        "page.HTM",
        "logo.svg",
        "app.js",
        "run.bat",  # Windows runs these when they are opened
        "setup.cmd",
        "macro.vbs",
        "task.ps1",
        "run.exe",  # binary formats: the model writes text
        "photo.jpg",
        "archive.zip",
        "notes",  # no extension
        "notes.unknownext",
    ],
)
def test_active_binary_and_unknown_formats_are_refused(name: str) -> None:
    with pytest.raises(FileRefusedError, match="not a text format"):
        check_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "../etc/passwd.txt",
        "C:\\Users\\me\\notes.txt",
        "notes/today.md",
        "what?.txt",
        "report\u202etxt.exe",  # right-to-left override: shows as "reportexe.txt"
        "tab\there.txt",
        "line\nbreak.txt",
    ],
)
def test_names_with_folders_or_hidden_characters_are_refused(name: str) -> None:
    with pytest.raises(FileRefusedError, match="plain file name"):
        check_name(name)


@pytest.mark.parametrize("name", ["", "   ", ".bashrc.txt", "notes.", 42, None])
def test_names_that_are_not_file_names_are_refused(name: object) -> None:
    with pytest.raises(FileRefusedError):
        check_name(name)


def test_a_name_longer_than_the_limit_is_refused() -> None:
    with pytest.raises(FileRefusedError, match="too long"):
        check_name("a" * 200 + ".txt")


def test_the_size_is_counted_in_the_bytes_uploaded() -> None:
    euro = "€" * 700  # 700 characters, 2,100 bytes of UTF-8
    with pytest.raises(FileRefusedError, match="too large"):
        written_file({"name": "prices.txt", "content": euro}, 2048)
    file = written_file({"name": "prices.txt", "content": euro}, 2100)
    assert file.data == euro.encode() and file.mime == "text/plain"


def test_content_and_caption_are_made_valid_and_bounded() -> None:
    file = written_file(
        {"name": "a.md", "content": "broken \ud800 half", "caption": "x" * 5000}, 10_000
    )
    assert file.data.decode() == "broken \ufffd half"
    assert len(file.caption) == MAX_CAPTION and file.caption.endswith("…")
    for empty in ("", "  \n", None, 7):
        with pytest.raises(FileRefusedError, match="empty"):
            written_file({"name": "a.md", "content": empty}, 10_000)


def test_the_terminal_saves_without_overwriting_and_says_where(tmp_path: Path) -> None:
    adapter = CliAdapter(tmp_path)
    (tmp_path / "notes.md").write_text("mine")

    async def send(caption: str) -> str:
        file = OutboundFile(CLI_CHAT, "notes.md", "text/markdown", b"# New", caption)
        result = await adapter.send_file(file)
        assert result.ok, result.error
        return result.message_ids[0]

    first = asyncio.run(send("Here you go"))
    second = asyncio.run(send(""))
    assert (tmp_path / "notes.md").read_text() == "mine"  # never overwritten
    assert Path(first) == tmp_path / "notes (1).md"
    assert Path(second) == tmp_path / "notes (2).md"
    assert Path(second).read_bytes() == b"# New"
    assert adapter.take_notices() == [
        f"Here you go\n📎 Saved notes.md to {first}",
        f"📎 Saved notes.md to {second}",
    ]


def test_the_terminal_says_why_a_file_could_not_be_saved_when_the_folder_is_gone(
    tmp_path: Path,
) -> None:
    file = OutboundFile(CLI_CHAT, "notes.md", "text/markdown", b"# New")
    result = asyncio.run(CliAdapter(tmp_path / "gone").send_file(file))
    assert not result.ok
    assert result.error == "could not save notes.md: No such file or directory"
