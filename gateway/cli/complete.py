"""Shell completion of option and argument values, and the help text that names them.

Each fixed set of values is written once for the CLI: `Choices` gives typer both the
completion (`autocompletion=X.complete`) and the words for its help ("a, b or c"). The
platforms come from gateway/edge/platforms.py; the other sets are copies of what the config
models define, kept here so that `--help` imports no pydantic (tests/gateway/
test_cli_main.py checks each copy against its home). Names that come from the home
(memory providers) and from the platform packages (modes) are listed when completing.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.edge.platforms import CONFIGURED, PACKAGES


class Choices:
    def __init__(self, *values: str) -> None:
        self.values: tuple[str, ...] = values

    def complete(self, incomplete: str) -> list[str]:
        return [value for value in self.values if value.startswith(incomplete.lower())]

    def __contains__(self, value: object) -> bool:
        return value in self.values

    @property
    def words(self) -> str:
        """'a, b or c'."""
        return one_of(self.values)


def one_of(values: Sequence[str]) -> str:
    if len(values) < 2:
        return "".join(values)
    return f"{', '.join(values[:-1])} or {values[-1]}"


def provider_names(incomplete: str) -> list[str]:
    from gateway.config import resolve_home  # noqa: PLC0415 - only when completing
    from hermes.providers import registry  # noqa: PLC0415

    return [name for name in registry.names(resolve_home()) if name.startswith(incomplete)]


def platform_modes(incomplete: str) -> list[str]:
    """PLATFORM=MODE for `hermes init --mode`, from each platform package."""
    from gateway.edge.platform_config import platforms  # noqa: PLC0415 - only when completing

    found = [
        f"{name}={mode}"
        for name, platform in platforms().items()
        if platform.setup is not None
        for mode in platform.setup.modes
    ]
    return [value for value in found if value.startswith(incomplete)]


# the chat platforms an operator configures, and every surface a session can come from
PLATFORMS = Choices(*CONFIGURED)
SURFACES = Choices(*PACKAGES)
LOG_LEVELS = Choices("debug", "info", "warning", "error")
LOG_FORMATS = Choices("text", "json")
RECALL_MODES = Choices("context", "tools", "hybrid")
EXPORT_FORMATS = Choices("jsonl", "md")
FACT_STATUSES = Choices("draft", "verified", "retracted")
ROLES = Choices("owner", "admin", "user")
JOBS = Choices("consolidation_check", "idle_sessions", "memory_pending", "maintenance")
