"""The platforms by name: each package's `Platform`, and what the gateway does with it
the same way for every platform (credentials checked before anything connects, the
adapter built, a missing SDK named with how to install it).

The gateway reaches platform packages through here only; a package's SDK code is
imported when its adapter is built, so a missing SDK only matters when the platform is on.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping, Sequence

from gateway.config import ConfigError, secret
from gateway.edge.platform_config import Platform, PlatformConfig, Sharing, platforms
from gateway.edge.platforms import TERMINAL
from gateway.edge.ports import LocalChat, MenuEntry, PlatformAdapter
from hermes import extras

Menu = Sequence[MenuEntry]


def install_hint(platform: Platform) -> str:
    """How to add a platform's SDK: the package is installed from its checkout."""
    if not platform.extra:
        return "reinstall hermes-gateway"
    return extras.install_command(platform.extra)


def credential_problems(
    name: str, config: PlatformConfig, env: Mapping[str, str] | None = None
) -> list[str]:
    """Every missing or malformed credential of an enabled platform, at once, before
    anything connects: a swapped Slack token or a Telegram token with a `bot` prefix is
    named precisely instead of surfacing as a 401 or a DNS error later."""
    platform = platforms().get(name)
    if platform is None:
        return [f"platforms.{name}: this platform is not available"]
    problems = []
    if platform.extra and (absent := extras.needs(platform.extra, f"platforms.{name}")):
        problems.append(f"{absent} (it is enabled in config.yaml)")
    for credential in platform.credentials(config):
        env_name = str(getattr(config, credential.key))
        value = secret(env_name, env)
        if not value:
            problems.append(
                f"platforms.{name}.{credential.key}: set the environment variable {env_name}"
            )
        elif (wrong := credential.shape(value)) is not None:
            problems.append(f"platforms.{name}.{credential.key}: {env_name} {wrong}")
    return problems


def preload(names: Sequence[str]) -> None:
    """Import these platforms' adapter modules, their SDKs with them (0.3-0.5 s each):
    the gateway calls it on a thread before it builds them, so its event loop does not
    import them (a stall every chat would wait for). A missing SDK is said by `build`."""
    for name in names:
        with contextlib.suppress(ImportError):
            importlib.import_module(f"adapters.{name}.adapter")


def build(
    name: str,
    config: PlatformConfig,
    env: Mapping[str, str] | None = None,
    menu: Menu = (),
    *,
    announce: bool = True,
) -> PlatformAdapter:
    """`name`'s adapter; `announce`: it registers itself with the platform at start
    (Telegram's setWebhook), which one instance of several does."""
    platform = platforms().get(name)
    if platform is None:
        raise ConfigError(f"platforms.{name}: this platform is not available yet")
    problems = credential_problems(name, config, env)
    if problems:
        raise ConfigError("; ".join(problems))
    values = {
        credential.key: secret(str(getattr(config, credential.key)), env) or ""
        for credential in platform.credentials(config)
    }
    try:
        return platform.build(config, values, menu, announce)
    except ImportError as exc:
        raise ConfigError(
            f"platforms.{name} is enabled but its SDK is missing ({exc.name}): "
            f"{install_hint(platform)}"
        ) from None
    except ValueError as exc:  # a mistake in the platform's section
        raise ConfigError(f"platforms.{name}.{exc}") from None


def sharing(name: str, config: PlatformConfig) -> Sharing:
    """How several gateway processes share `name`'s connection (see `Sharing`)."""
    platform = platforms().get(name)
    return platform.sharing(config) if platform is not None else "shared"


def local_chat() -> LocalChat:
    """The terminal's adapter, for `hermes chat`."""
    adapter = build(TERMINAL, PlatformConfig())
    assert isinstance(adapter, LocalChat)
    return adapter
