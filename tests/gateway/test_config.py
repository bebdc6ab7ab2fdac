from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, HermesConfig, load_config, parse_config, resolve_home


def write(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file(home: Path) -> None:
    config = load_config(home)
    assert config == HermesConfig()
    assert config.memory.memory_enabled and config.memory.user_profile_enabled
    assert (config.memory.memory_char_limit, config.memory.user_char_limit) == (2200, 1375)


def test_empty_file_means_defaults(home: Path) -> None:
    write(home, "# nothing yet\n")
    assert load_config(home) == HermesConfig()


def test_values_are_read(home: Path) -> None:
    write(home, "memory:\n  memory_char_limit: 3000\n  user_profile_enabled: false\n")
    config = load_config(home)
    assert config.memory.memory_char_limit == 3000
    assert config.memory.user_profile_enabled is False


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("memory:\n  memory_char_limt: 3000\n", ["memory.memory_char_limt", "unknown key"]),
        ("memroy: {}\n", ["memroy", "unknown key"]),
        ("memory:\n  memory_char_limit: -5\n", ["memory.memory_char_limit", "-5"]),
        ("memory:\n  user_char_limit: lots\n", ["memory.user_char_limit", "lots"]),
        ("memory:\n  memory_enabled: maybe\n", ["memory.memory_enabled"]),
        ("memory: [1, 2]\n", ["memory"]),
        ("- just\n- a list\n", ["top level must be a mapping"]),
        ("memory:\n  memory_char_limit: 1\n bad indent: [\n", ["not valid YAML"]),
    ],
)
def test_bad_config_names_the_key_and_the_file(home: Path, text: str, fragments: list[str]) -> None:
    path = write(home, text)
    with pytest.raises(ConfigError) as caught:
        load_config(home)
    message = str(caught.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_invalid_utf8_config_is_a_clear_error(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "config.yaml").write_bytes(b"memory:\n  memory_enabled: \xff\xfe\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(home)


def test_home_resolution() -> None:
    assert resolve_home({"HERMES_HOME": "/srv/hermes"}) == Path("/srv/hermes")
    assert resolve_home({}) == Path.home() / ".hermes"
    assert resolve_home({"HERMES_HOME": "  "}) == Path.home() / ".hermes"


def test_example_config_matches_the_defaults() -> None:
    example = Path(__file__).resolve().parents[2] / "config.example.yaml"
    from gateway.config import parse_config

    assert parse_config(example.read_text(encoding="utf-8"), str(example)) == HermesConfig()


def test_endpoints_fall_back_from_auxiliary_to_main() -> None:
    from gateway.config import SideTask, main_endpoint, parse_config, side_endpoint

    assert main_endpoint(HermesConfig()) is None
    config = parse_config(
        "llm:\n  base_url: http://127.0.0.1:11434/v1\n  model: big\n  api_key_env: MY_KEY\n"
        "auxiliary:\n  session_search:\n    model: small\n",
        "test",
    )
    main = main_endpoint(config, {"MY_KEY": "sk-secret"})
    assert main is not None and (main.model, main.api_key) == ("big", "sk-secret")
    assert "sk-secret" not in repr(main)
    aux = side_endpoint(config, SideTask.SESSION_SEARCH, {})
    assert aux is not None and aux.model == "small" and aux.api_key is None
    assert aux.base_url == "http://127.0.0.1:11434/v1" and aux.temperature == 0.2


def test_streaming_on_off_in_yaml_and_per_platform(home: Path) -> None:
    from gateway.app import router_policy

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        "gateway:\n  streaming: on\n"
        "platforms:\n  telegram:\n    enabled: true\n    streaming: off\n"
        "  slack:\n    enabled: true\n"
    )
    policy = router_policy(load_config(home))
    assert policy.streams("slack") and policy.streams("cli") and not policy.streams("telegram")
    (home / "config.yaml").write_text("gateway:\n  streaming: off\n")
    assert not router_policy(load_config(home)).streams("discord")
    (home / "config.yaml").write_text("gateway:\n  streaming: sometimes\n")
    with pytest.raises(ConfigError, match=r"gateway\.streaming"):
        load_config(home)


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("off", "off"),
        ("on", "on"),
        ("'off'", "off"),
        ("no", "off"),
        ("yes", "on"),
        ("auto", "auto"),
    ],
)
def test_a_bare_on_or_off_means_what_it_says(home: Path, written: str, meant: str) -> None:
    """YAML 1.1 reads bare on/off/yes/no as booleans (a hand edit, or a config rewritten
    by `hermes memory setup` without the quotes): every on/off setting takes them."""
    text = (
        f"memory:\n  scan:\n    judge: {written}\n"
        f"  consolidation:\n    notify: {written if meant != 'auto' else 'on'}\n"
        f"llm:\n  vision: {written}\n"
    )
    config = parse_config(text, "config.yaml")
    assert config.memory.scan.judge == meant and config.llm.vision == meant
    assert config.memory.consolidation.notify == ("on" if meant == "auto" else meant)
