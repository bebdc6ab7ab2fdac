"""The Settings page: config.yaml edited as text and the memory provider chosen, checked
with the code `hermes memory setup` uses (the file must load, no secret may be written),
comments kept, audited, the previous text put back; owners change, admins read."""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path

import pytest

from gateway.config import load_config, parse_config
from gateway.config_edit import fingerprint, restore_previous, save_text
from tests.gateway.test_authority import _id, _login_as
from tests.harness.dashboard import Browser, Served, serve

COMMENTED = (
    "gateway:\n  http:\n    port: 0\n# the model we pay for\nllm:\n  model: gpt-4o-mini  # cheap\n"
)


def editor_text(page: str) -> str:
    found = re.search(r'<textarea id="config-text"[^>]*>(.*?)</textarea>', page, re.S)
    assert found is not None, page[-2000:]
    return html.unescape(found.group(1))


def seen_of(page: str) -> str:
    found = re.search(r'name="seen" value="([0-9a-f]+)"', page)
    assert found is not None
    return found.group(1)


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


async def save(browser: Browser, text: str) -> tuple[int, str]:
    _, page = await browser.get("/admin/settings")
    return await browser.post("/admin/settings/config", {"text": text, "seen": seen_of(page)})


def run_as(home: Path, actor: str, body: object) -> object:
    async def go() -> object:
        async with serve(home) as served:
            (home / "config.yaml").write_text(COMMENTED)
            served.db.people.ensure_user(_id(actor), role="owner" if actor == "home" else actor)
            browser = await _login_as(served, actor)
            try:
                return await body(served, browser)  # type: ignore[operator]
            finally:
                await browser.close()

    return asyncio.run(go())


def test_an_owner_edits_config_yaml_keeping_its_comments_and_the_change_is_audited(
    home: Path,
) -> None:
    async def body(served: Served, browser: Browser) -> None:
        _, page = await browser.get("/admin/settings")
        text = editor_text(page)
        assert text == COMMENTED
        edited = text.replace("gpt-4o-mini", "gpt-4.1-mini") + "sessions:\n  retention_days: 90\n"
        status, after = await save(browser, edited)
        assert status == 200 and "config.yaml saved (llm.model, sessions.retention_days)" in (
            text_of(after)
        )
        written = (home / "config.yaml").read_text()
        assert "# the model we pay for" in written and "# cheap" in written
        config = load_config(home)
        assert (config.llm.model, config.sessions.retention_days) == ("gpt-4.1-mini", 90)
        (entry, *_) = served.db.dashboard.audit_log(5)
        assert (entry.actor, entry.action, entry.subject) == (served.owner, "config", "config.yaml")
        assert entry.detail == "llm.model, sessions.retention_days"
        # put back, after the question
        _, asked = await browser.post("/admin/settings/restore", {})
        assert "Put back the previous config.yaml?" in asked
        _, done = await browser.post("/admin/settings/restore", {"sure": "yes"})
        assert "Previous config.yaml put back" in text_of(done)
        assert (home / "config.yaml").read_text() == COMMENTED

    run_as(home, "home", body)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("llm:\n  model: [unclosed\n", "not valid YAML"),
        ("llm:\n  modle: gpt-4o\n", "modle"),  # a key the config does not have
        ("sessions:\n  retention_days: -3\n", "retention_days"),
        ("llm:\n  api_key_env: sk-proj-Abc123def456ghi789jkl\n", "takes the NAME"),
        ("llm:\n  api_key_env: OPENAI API KEY\n", "takes the NAME"),
        ("# key: sk-live-0123456789abcdefABCDEF\n", "looks like a credential"),
        ("# deploy with ghp_0123456789abcdefABCDEF0123456789abcd\n", "a credential (GitHub token)"),
        (
            "# aws AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
            "looks like a credential",
        ),
        (
            "mcp:\n  servers:\n    notes:\n      url: https://notes.example/mcp\n"
            "      headers:\n        Authorization: Bearer abcdefghijklmnop1234\n",
            "takes the NAME",
        ),
        (
            "platforms:\n  telegram:\n    token_env: "
            "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw\n",
            "takes the NAME",
        ),
    ],
)
def test_a_config_that_would_not_load_or_holds_a_secret_is_refused_and_kept_in_the_editor(
    home: Path, change: str, said: str
) -> None:
    async def body(served: Served, browser: Browser) -> tuple[int, str]:
        return await save(browser, COMMENTED + change)

    status, page = run_as(home, "home", body)  # type: ignore[misc]
    assert status == 422 and "Not saved" in page and said in text_of(page), text_of(page)[-800:]
    assert editor_text(page) == COMMENTED + change  # the operator's text is not lost
    assert (home / "config.yaml").read_text() == COMMENTED
    assert not (home / "config.yaml.previous").exists()
    for secret in (
        "sk-proj-Abc123",
        "sk-live-0123",
        "abcdefghijklmnop1234",
        "AAHdqTcv",
        "ghp_0",
        "AKIA",
    ):
        error = page.split('id="error"', 1)[1].split("</p>", 1)[0]
        assert secret not in error  # the refusal never repeats the secret


def test_the_value_of_a_secret_variable_is_refused_wherever_it_is_written(home: Path) -> None:
    """A key pasted in a comment, or as another setting's value: found by its value."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("llm:\n  api_key_env: MY_KEY\n")
    env = {"MY_KEY": "hunter2-correct-horse"}
    for text in (
        "llm:\n  api_key_env: MY_KEY\n# was hunter2-correct-horse\n",
        "llm:\n  api_key_env: MY_KEY\n  model: hunter2-correct-horse\n",
    ):
        with pytest.raises(Exception, match="value of one of the secret variables"):
            save_text(home, text, None, env)
    assert save_text(home, "llm:\n  api_key_env: MY_KEY\n  model: m\n", None, env) == ["llm.model"]
    assert restore_previous(home, env) == ["llm.model"]


def test_a_save_over_a_change_made_since_the_page_was_read_is_refused(home: Path) -> None:
    async def body(served: Served, browser: Browser) -> tuple[int, str]:
        _, page = await browser.get("/admin/settings")
        # the CLI changes the file meanwhile
        (home / "config.yaml").write_text(COMMENTED + "sessions:\n  retention_days: 30\n")
        return await browser.post(
            "/admin/settings/config",
            {"text": COMMENTED.replace("gpt-4o-mini", "x"), "seen": seen_of(page)},
        )

    status, page = run_as(home, "home", body)  # type: ignore[misc]
    assert status == 422 and "was changed since you opened it" in text_of(page)
    assert "retention_days: 30" in (home / "config.yaml").read_text()
    assert fingerprint("a") != fingerprint("b")


def test_an_admin_reads_the_settings_and_changes_nothing(home: Path) -> None:
    async def body(served: Served, browser: Browser) -> tuple[str, int, str, int]:
        _, page = await browser.get("/admin/settings")
        status, refused = await browser.post(
            "/admin/settings/config", {"text": "llm:\n  model: x\n", "seen": ""}
        )
        provider_status, _ = await browser.post("/admin/settings/provider", {"provider": ""})
        return page, status, refused, provider_status

    page, status, refused, provider_status = run_as(home, "admin", body)  # type: ignore[misc]
    assert "Only an owner changes them" in page and 'id="config-text"' not in page
    assert "gpt-4o-mini" in page  # read-only, as a listing
    assert status == 403 and "only an owner can change the configuration" in refused
    assert provider_status == 403
    assert (home / "config.yaml").read_text() == COMMENTED


def test_an_owner_chooses_a_memory_provider_checked_as_the_cli_checks_it(home: Path) -> None:
    async def body(served: Served, browser: Browser) -> list[str]:
        _, page = await browser.get("/admin/settings?provider=mem0")
        assert 'name="api_key_env"' in page and 'name="base_url"' in page
        said = []
        for form in (
            {"base_url": "not a url", "api_key_env": "MEM0_KEY"},
            {"base_url": "https://mem0.example", "api_key_env": "m0-sk-abcdef0123456789"},
            {"base_url": "https://mem0.example", "api_key_env": "MEM0_KEY"},
        ):
            _, after = await browser.post(
                "/admin/settings/provider", {"provider": "mem0", "recall_mode": "tools", **form}
            )
            said.append(text_of(after))
        _, after = await browser.post("/admin/settings/provider", {"provider": ""})
        said.append(text_of(after))
        return said

    bad_url, secret, done, off = run_as(home, "home", body)  # type: ignore[misc]
    assert "Not changed" in bad_url and "base_url must be an http" in bad_url
    assert "Not changed" in secret and "takes the NAME" in secret
    assert "m0-sk-abcdef0123456789" not in secret
    assert "Memory provider mem0 selected" in done and "Still missing" in done
    assert "Built-in memory only" in off
    config = parse_config((home / "config.yaml").read_text(), "config.yaml")
    assert config.memory.provider == ""
    assert config.memory.recall_mode == "tools"
    assert config.memory.providers["mem0"] == {
        "base_url": "https://mem0.example",
        "api_key_env": "MEM0_KEY",
    }
    assert "# the model we pay for" in (home / "config.yaml").read_text()
