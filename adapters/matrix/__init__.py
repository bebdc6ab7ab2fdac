"""Matrix (the client-server API through matrix-nio): everything the gateway knows
about it is here."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from gateway.edge.platform_config import Credential, Platform, PlatformConfig, Setup, Sharing

if TYPE_CHECKING:
    from gateway.edge.ports import MenuEntry, PlatformAdapter

USER_ID = re.compile(r"^@[^:\s]+:[^\s]+$")


class MatrixConfig(PlatformConfig):
    homeserver: str = ""  # the client-server API's address, https://matrix.example.org
    user_id: str = ""  # the bot's account, @hermes:example.org
    token_env: str = "MATRIX_ACCESS_TOKEN"  # that account's access token
    # whose invitations the bot accepts: "allowed" (people in allowed_users, rooms in
    # allowed_chats), "direct" (also anyone's direct chat, so a stranger can ask for a
    # pairing code), "anyone"; the others are declined
    invites: Literal["allowed", "direct", "anyone"] = "allowed"
    # end-to-end encrypted rooms (the matrix-e2e extra): the bot's device keys are kept
    # in the folder `store` (e.g. /var/lib/hermes/matrix-keys), readable by the gateway
    # alone; lose it and people's clients see a new, unverified device
    encryption: bool = False
    store: str | None = None


def _credentials(_config: MatrixConfig) -> list[Credential]:
    return [Credential("token_env")]


def _build(
    config: MatrixConfig, values: Mapping[str, str], _menu: Sequence[MenuEntry], _announce: bool
) -> PlatformAdapter:
    from adapters.matrix.adapter import MatrixAdapter  # noqa: PLC0415 - matrix-nio

    if not config.homeserver.startswith(("https://", "http://")):
        raise ValueError("platforms.matrix.homeserver must be an address (https://...)")
    if not USER_ID.match(config.user_id):
        raise ValueError("platforms.matrix.user_id must be the bot's Matrix id (@name:server)")
    store = None
    if config.encryption:
        import nio.crypto  # noqa: PLC0415 - the e2e extra's libraries

        if not nio.crypto.ENCRYPTION_ENABLED:
            raise ImportError("encryption needs the matrix-e2e extra: pip install '.[matrix-e2e]'")
        if not config.store:
            raise ValueError(
                "platforms.matrix.store: a folder for the bot's encryption keys "
                "(e.g. /var/lib/hermes/matrix-keys) is needed with encryption: true"
            )
        store = Path(config.store).expanduser()
    return MatrixAdapter(
        config.homeserver,
        config.user_id,
        values["token_env"],
        allowed_users=config.allowed_users,
        allowed_chats=config.allowed_chats,
        invites=config.invites,
        store=store,
    )


def _sharing(_config: MatrixConfig) -> Sharing:
    """Every sync of the account receives every event: one instance syncs (a lease)."""
    return "leased"


PLATFORM = Platform(
    name="matrix",
    config=MatrixConfig,
    credentials=_credentials,
    build=_build,
    sharing=_sharing,
    extra="matrix",
    setup=Setup(
        section="""\
  matrix:
    enabled: true
    homeserver: https://matrix.example.org   # your homeserver's client API
    user_id: "@hermes:example.org"            # the bot's account
    token_env: MATRIX_ACCESS_TOKEN            # that account's access token
    invites: allowed                          # or: direct (strangers may ask to pair)
    # encryption: true                        # encrypted rooms (pip install '.[matrix-e2e]')
    # store: /var/lib/hermes/matrix-keys      # where the bot's device keys are kept
    allowed_users: {allowed}    # Matrix ids, "@you:example.org"
""",
        account_hint='your Matrix id ("@you:example.org", in your client\'s settings)',
    ),
    log_secrets=r"\bsy[tu]_[A-Za-z0-9_-]{10,}",  # Synapse's access tokens
)
