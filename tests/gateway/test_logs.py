"""Log hygiene: secrets masked in messages, arguments and tracebacks; library noise
below its level dropped, ours kept."""

from __future__ import annotations

import logging

from gateway.config import HermesConfig
from gateway.logs import MASK, LevelGate, Redactor, secret_values


def _record(
    msg: str, *args: object, name: str = "gateway.x", exc: bool = False
) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError(
                "POST https://slack.com/api/auth.test with xoxb-1234567890-abcdefghij"
            )
        except RuntimeError:
            import sys

            exc_info = sys.exc_info()
    return logging.LogRecord(name, logging.INFO, __file__, 1, msg, args, exc_info)


def test_configured_secrets_and_token_shapes_are_masked_everywhere() -> None:
    config = HermesConfig.model_validate(
        {
            "platforms": {"discord": {"enabled": True, "token_env": "MY_DISCORD"}},
            "llm": {"api_key_env": "MY_KEY"},
        }
    )
    env = {
        "MY_DISCORD": "plain-secret-value-9",
        "MY_KEY": "another-secret",
        "TELEGRAM_BOT_TOKEN": "",
    }
    secrets = secret_values(config, env)
    assert set(secrets) == {"plain-secret-value-9", "another-secret"}
    redactor = Redactor(secrets)
    record = _record("using %s and %s", "plain-secret-value-9", "x another-secret y")
    assert redactor.filter(record) and record.getMessage() == f"using {MASK} and x {MASK} y"
    url = _record(
        "HTTP Request: POST http://api/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1/getMe"
    )
    redactor.filter(url)
    assert "AAHdq" not in url.getMessage() and "/bot***/getMe" in url.getMessage()
    failed = _record("request failed", exc=True)
    redactor.filter(failed)
    assert failed.exc_text is not None and "xoxb-" not in failed.exc_text
    assert "RuntimeError" in failed.exc_text


def test_library_records_need_their_own_level_ours_follow_the_configured_one() -> None:
    gate = LevelGate(logging.INFO, logging.WARNING)
    assert gate.filter(_record("ours", name="gateway.runtime"))
    assert not gate.filter(_record("HTTP Request: ...", name="httpx2"))
    warning = _record("library trouble", name="telegram.ext")
    warning.levelno = logging.WARNING
    assert gate.filter(warning)


def test_records_inside_a_turn_carry_its_id_in_text_and_json() -> None:
    import json

    from gateway.logs import JsonFormatter, TurnTag, turn

    tag = TurnTag()
    outside = _record("before")
    tag.filter(outside)
    with turn() as first:
        inside = _record("during", name="httpx")  # a library's line too
        tag.filter(inside)
    with turn() as second:
        pass
    assert outside.turn == "" and inside.turn == first != second
    assert json.loads(JsonFormatter().format(inside))["turn"] == first
    assert "turn" not in json.loads(JsonFormatter().format(outside))
