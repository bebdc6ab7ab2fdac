"""The platforms, one line each: the name and its package under adapters/.

A fifth platform is one folder (`adapters/<name>/`, see gateway/edge/platform_config.py for
what it declares), its line here and its extra in pyproject.toml. This module imports
nothing, so the CLI can name the platforms without loading any of them.
"""

from __future__ import annotations

PACKAGES: dict[str, str] = {
    "telegram": "adapters.telegram",
    "discord": "adapters.discord",
    "slack": "adapters.slack",
    "mattermost": "adapters.mattermost",
    "matrix": "adapters.matrix",
    "cli": "adapters.cli",  # the terminal: always installed, never in config.yaml
}
TERMINAL = "cli"  # `hermes chat`'s platform
# the ones an operator configures (platforms.<name> in config.yaml)
CONFIGURED: tuple[str, ...] = tuple(name for name in PACKAGES if name != TERMINAL)
