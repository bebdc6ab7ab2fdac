from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hermes.identity import InvalidUserIdError, new_user_id, owner_user_id, validate_user_id


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "..",
        "../etc",
        "u_../../x",
        "u_0123456789abcdeF",
        "u_0123456789abcde",
        "u_0123456789abcdef/",
        "u_０１２３４５６７８９abcdef",
        "u_0123456789abcdef\n",
        "telegram:12345",
        "u_0123456789abcdef0",
    ],
)
def test_rejects_ids_that_are_not_ours(bad: str) -> None:
    with pytest.raises(InvalidUserIdError):
        validate_user_id(bad)


def test_minted_ids_validate() -> None:
    for _ in range(50):
        assert validate_user_id(new_user_id())


def test_owner_id_is_stable_and_private(home: Path) -> None:
    first = owner_user_id(home)
    assert owner_user_id(home) == first
    assert (home / "owner_id").stat().st_mode & 0o777 == 0o600


def test_owner_id_race_between_processes_yields_one_id(home: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from hermes.identity import owner_user_id;"
        "print(owner_user_id(Path(sys.argv[1])))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(home)], stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    ids = {proc.communicate(timeout=60)[0].strip() for proc in procs}
    assert len(ids) == 1
    assert ids == {owner_user_id(home)}


def test_damaged_owner_file_is_reported_not_replaced(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "owner_id").write_text("../../etc\n")
    with pytest.raises(InvalidUserIdError, match="damaged"):
        owner_user_id(home)
    assert (home / "owner_id").read_text() == "../../etc\n"
