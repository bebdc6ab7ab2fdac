"""Changes to config.yaml from outside the file: the memory provider and its settings
(`hermes memory setup`, the dashboard's Settings page) and the whole file as text (the
Settings page's editor). Both pass the same checks before anything is written: the file
loads as the gateway loads it, and it holds no secret: a setting that names a variable
(`*_env`, an MCP server's `env` and `headers`) holds a variable's NAME, a provider's
secret setting is given as `<key>_env`, and neither the value of a secret variable the
gateway knows nor anything shaped like a token appears anywhere in it."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gateway.config import (
    CONFIG_FILENAME,
    ConfigError,
    HermesConfig,
    env_names,
    parse_config,
    provider_settings,
    update_config,
)
from gateway.logs import secret_shapes, secret_values
from hermes.memory.scanner import find_secret
from hermes.providers import registry

if TYPE_CHECKING:
    from hermes.providers.base import ConfigField, MemoryProvider

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
PREVIOUS_SUFFIX = ".previous"  # config.yaml.previous: the text before the last edit here
MAX_CHARS = 200_000


class SettingError(ConfigError):
    """A setting given wrong (a usage error: the CLI exits 2 on it)."""


def fingerprint(text: str) -> str:
    """What an editor saw: a save is refused when the file changed since."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def read_text(home: Path) -> str:
    path = home / CONFIG_FILENAME
    try:
        return path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc}") from None


# -- the checks --------------------------------------------------------------------------


def secret_problems(
    text: str, config: HermesConfig, env: Mapping[str, str] | None = None
) -> list[str]:
    """Where `text` (a config.yaml that loads as `config`) holds a secret, said without
    repeating it: a setting naming a variable that is not a variable's name, a value of a
    variable the config names, a token's shape."""
    problems = [
        f"{where} takes the NAME of an environment variable, not the secret itself "
        "(config.yaml never holds secrets): put the value in the environment and its "
        "name here"
        for where, name in env_names(config).items()
        if not ENV_NAME.fullmatch(name) or secret_shapes().search(name)
    ]
    known = {s for s in secret_values(config, env) if len(s) >= 8}
    for value in sorted(known, key=len):  # (as a word: a short password inside a url is not)
        if re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", text):
            problems.append(
                "the value of one of the secret variables the config names is written in it: "
                "remove it (config.yaml holds the variable's name only)"
            )
            break
    if not problems:  # a credential by its shape: the log redactor's and the memory guard's
        for number, line in enumerate(text.splitlines(), 1):
            found = find_secret(line)
            if found is not None or secret_shapes().search(line):
                what = found.reason if found is not None else "an API key or token"
                problems.append(
                    f"line {number} holds what looks like a credential ({what}): config.yaml "
                    "never holds "
                    "secrets (put it in the environment, and the variable's name in a *_env "
                    "setting)"
                )
                break
    return problems


def check_text(text: str, source: str, env: Mapping[str, str] | None = None) -> HermesConfig:
    """The config `text` makes, as the gateway would load it; ConfigError when it would
    not load or holds a secret."""
    if len(text) > MAX_CHARS:
        raise ConfigError(f"{source}: {len(text):,} characters; at most {MAX_CHARS:,}")
    config = parse_config(text, source)
    if problems := secret_problems(text, config, env):
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return config


# -- the whole file ----------------------------------------------------------------------


def save_text(
    home: Path, text: str, seen: str | None, env: Mapping[str, str] | None = None
) -> list[str]:
    """Write `text` as config.yaml once it passes `check_text`, unless the file changed
    since the editor read it (`seen`: its `fingerprint`; None: not checked). The text
    before is kept as config.yaml.previous. The settings that changed, as dotted keys."""
    path = home / CONFIG_FILENAME
    text = text.replace("\r\n", "\n")
    if text and not text.endswith("\n"):
        text += "\n"
    check_text(text, str(path), env)
    before = read_text(home)
    if seen is not None and fingerprint(before) != seen:
        raise ConfigError(
            f"{path} was changed since you opened it (by the CLI or another operator): "
            "nothing written; open it again to see the change"
        )
    changed = changed_keys(_data(before), _data(text))
    if not changed and before == text:
        return []
    _write(home, PREVIOUS_SUFFIX, before)
    _write(home, "", text)
    return changed or ["(comments and layout only)"]


def restore_previous(home: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Put back the text before the last edit made here (checked again: it must still
    load); the one it replaces becomes the previous one. The settings that changed."""
    previous = home / (CONFIG_FILENAME + PREVIOUS_SUFFIX)
    if not previous.exists():
        raise ConfigError("there is no earlier config.yaml to put back")
    return save_text(home, previous.read_text(encoding="utf-8"), None, env)


def has_previous(home: Path) -> bool:
    return (home / (CONFIG_FILENAME + PREVIOUS_SUFFIX)).exists()


def changed_keys(before: Any, after: Any, where: str = "") -> list[str]:
    """The dotted keys whose values differ between two loaded configs."""
    if isinstance(before, dict | None) and isinstance(after, dict | None) and before != after:
        before, after = before or {}, after or {}
        keys = list(dict.fromkeys([*before, *after]))
        found: list[str] = []
        for key in keys:
            found += changed_keys(
                before.get(key), after.get(key), f"{where}.{key}" if where else str(key)
            )
        return found
    return [] if before == after else [where or "(the whole file)"]


def _data(text: str) -> Any:
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return {}


def _write(home: Path, suffix: str, text: str) -> None:
    """Atomically, 0600 (as update_config writes)."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = home / (CONFIG_FILENAME + suffix)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.chmod(0o600)
    temporary.replace(path)


# -- the memory provider -----------------------------------------------------------------


@dataclass
class ProviderPlan:
    """What choosing provider `name` writes, and what it still lacks to run."""

    name: str
    stored: dict[str, object]  # its settings as config.yaml will hold them
    settings: dict[str, Any]  # as the provider gets them (secrets from the environment)
    probe: MemoryProvider
    missing: list[str] = field(default_factory=list)
    recall_mode: str | None = None


def provider_fields(name: str, home: Path) -> list[ConfigField]:
    """Provider `name`'s settings (SettingError when it cannot be found or loaded)."""
    try:
        return list(registry.config_schema(name, home))
    except registry.ProviderError as exc:
        raise SettingError(str(exc)) from None


def plan_provider(
    home: Path,
    name: str,
    given: Mapping[str, object],
    recall_mode: str | None = None,
    ask: Callable[[ConfigField], object] | None = None,
) -> ProviderPlan:
    """Provider `name` with the settings `given` (a secret as `<key>_env: VARIABLE`; what
    is not given is asked with `ask`, else left to its default), checked as the provider
    checks them; SettingError for a setting given wrong."""
    fields = provider_fields(name, home)
    known = {f.key for f in fields} | {f"{f.key}_env" for f in fields if f.secret}
    if unknown := set(given) - known:
        raise SettingError(f"{name} has no setting {', '.join(sorted(unknown))}")
    stored: dict[str, object] = {}
    for one in fields:
        key = f"{one.key}_env" if one.secret else one.key
        value = given.get(key, given.get(one.key))
        if value in (None, "") and ask is not None:
            value = ask(one)
        if value in (None, "") and one.required and not one.secret:
            raise SettingError(f"{name} needs {one.key} ({one.description}): --set {one.key}=…")
        if one.secret and value not in (None, "") and not ENV_NAME.fullmatch(str(value)):
            example = one.env_var or "PROVIDER_API_KEY"
            raise SettingError(
                f"{key} takes the NAME of an environment variable, not the secret itself "
                f"(config.yaml never holds secrets): put the value in the environment "
                f"(e.g. {example}=… in the service's env file) and give {key}={example}"
            )
        if not one.secret and (problem := one.problem(value)):
            raise SettingError(problem)
        if value not in (None, ""):
            stored[key] = value
    settings = provider_settings(fields, stored)
    try:
        probe = registry.load(name, settings, home)()
    except registry.ProviderError as exc:
        raise SettingError(str(exc)) from None
    missing = []
    if not probe.is_available():  # what it lacks, as these settings see it
        missing = [
            f"{f.key}: set the environment variable {stored.get(f'{f.key}_env') or f.env_var}"
            for f in fields
            if f.secret and f.required and not settings.get(f.key)
        ]
        missing.append(probe.unavailable_reason())
    return ProviderPlan(name, stored, settings, probe, missing, recall_mode)


def apply_provider(home: Path, plan: ProviderPlan) -> Path:
    """Select the planned provider in config.yaml (comments kept, checked before it is
    written) and let it save what it keeps beside it."""
    changes: dict[tuple[str, ...], object] = {
        ("memory", "provider"): plan.name,
        ("memory", "providers", plan.name): plan.stored,
    }
    if plan.recall_mode is not None:
        changes[("memory", "recall_mode")] = plan.recall_mode
    plan.probe.save_config(plan.settings, home)
    return update_config(home, changes)


def built_in_only(home: Path) -> Path:
    """No provider beside the built-in memory (its settings are kept)."""
    return update_config(home, {("memory", "provider"): ""})
