"""Who may use the dashboard, and how they prove it.

- **Passwords**: `hermes dashboard passwd` stores a person's password as a scrypt hash
  (`hashlib.scrypt`, a fresh salt each) in `$HERMES_HOME/dashboard.json`, created 0600.
  There is no default password: with none set, only a one-time link logs in.
- **One-time links**: an owner or admin sends `/dashboard` to the bot in a DM and gets a
  link that works once, for minutes (`hermes/state/dashboard.py`).
- **Cookies**: a login is a random token in state.db (as its hash), sent in a cookie
  signed with the persisted secret (HMAC-SHA256), HttpOnly, SameSite=Strict, and Secure
  behind https. The CSRF token of every form is derived from the login's token.
- **Attempts**: failed logins are limited per client address and in all (`Attempts`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from hermes.state.access import AccessDB, Lockout
from hermes.state.models import utcnow

CREDENTIALS_FILENAME = "dashboard.json"
# scrypt's cost: 16 MiB and ~50 ms a try on one core (OWASP's minimum is N=2**17 with
# r=8 for a hash that must last decades; a dashboard login behind a rate limit, with
# a password chosen for it, is served well by this and stays quick on a small VPS)
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
SCRYPT_MAXMEM = 64 * 1024 * 1024
MIN_PASSWORD_CHARS = 12


class CredentialsError(Exception):
    """dashboard.json cannot be read or written; the message says what to do."""


def hash_password(password: str) -> str:
    salt = os.urandom(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=SCRYPT_MAXMEM
    )
    encoded = [base64.b64encode(part).decode() for part in (salt, digest)]
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${encoded[0]}${encoded[1]}"


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        found = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=SCRYPT_MAXMEM,
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(found, base64.b64decode(digest))


def password_problem(password: str) -> str | None:
    """Why a new password will not do, or None."""
    if len(password) < MIN_PASSWORD_CHARS:
        return f"a password needs at least {MIN_PASSWORD_CHARS} characters"
    if len(password) > 1024:
        return "a password may have at most 1,024 characters"
    return None


@dataclass
class Credentials:
    """`dashboard.json`: the secret that signs cookies, and password hashes by user id."""

    path: Path
    secret: bytes
    passwords: dict[str, str]

    @classmethod
    def load(cls, home: Path) -> Credentials:
        """The home's credentials; the file is created (0600, a new secret) when absent."""
        path = home / CREDENTIALS_FILENAME
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            secret = bytes.fromhex(raw["secret"])
            passwords = {str(k): str(v) for k, v in dict(raw.get("passwords") or {}).items()}
        except FileNotFoundError:
            found = cls(path, secrets.token_bytes(32), {})
            found.save()
            return found
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CredentialsError(
                f"{path} cannot be read ({exc}); delete it and set the password again with "
                "`hermes dashboard passwd` (every dashboard login ends)"
            ) from None
        if len(secret) < 16:
            raise CredentialsError(f"{path}: its secret is too short; delete the file")
        return cls(path, secret, passwords)

    def save(self) -> None:
        """Written whole to a 0600 file beside it, then renamed over it."""
        body = json.dumps({"secret": self.secret.hex(), "passwords": self.passwords}, indent=1)
        partial = self.path.with_name(self.path.name + ".tmp")
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(body)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(partial, 0o600)  # an old file of another mode is not kept
            os.replace(partial, self.path)
        except OSError as exc:
            raise CredentialsError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def set_password(self, user_id: str, password: str) -> None:
        self.passwords[user_id] = hash_password(password)
        self.save()

    def check(self, password: str) -> str | None:
        """The user whose password this is (each stored hash is tried), or None."""
        found = None
        for user_id, stored in self.passwords.items():
            if verify_password(password, stored) and found is None:
                found = user_id  # every hash is tried: the time says nothing of which
        return found

    def sign(self, token: str) -> str:
        return f"{token}.{self._mac('cookie', token)}"

    def unsign(self, value: str) -> str | None:
        token, _, mac = value.rpartition(".")
        if not token or not hmac.compare_digest(mac, self._mac("cookie", token)):
            return None
        return token

    def notice(self, text: str) -> str:
        """The signature of a notice a page shows after a redirect (`note=` in the
        address): only the dashboard's own notices carry one, so a link someone sends
        cannot make the page say what they wrote."""
        return self._mac("notice", text)

    def csrf(self, token: str) -> str:
        """The CSRF token of a login's forms (a page of another site cannot read it)."""
        return self._mac("csrf", token)

    def _mac(self, purpose: str, value: str) -> str:
        digest = hmac.new(self.secret, f"{purpose}:{value}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


class Attempts:
    """Failed logins: past `per_client` failures from one client address, or `overall`
    from all, logins are refused for the window (a correct password included: a guesser
    learns nothing while locked out); failures a window old (since the last) are
    forgotten. Counted in state.db (`AccessDB`'s lockouts), so every gateway serving the
    dashboard over the same database shares them, and a restart does not reset them."""

    def __init__(
        self, access: AccessDB, per_client: int = 5, overall: int = 50, window: float = 900.0
    ) -> None:
        self.access = access
        lasts = timedelta(seconds=window)
        self.per_client = Lockout(per_client, lasts, forgiven_after=lasts)
        self.overall = Lockout(overall, lasts, forgiven_after=lasts)

    def wait(self, client: str) -> float:
        """Seconds until `client` may try again (0: now)."""
        until = self.access.locked_until([_key(client), EVERYONE])
        return max(0.0, (until - utcnow()).total_seconds()) if until else 0.0

    def failed(self, client: str) -> None:
        self.access.failed({_key(client): self.per_client, EVERYONE: self.overall})
        self.access.forget_stale(_key(""), self.per_client)  # bounded whoever guesses

    def succeeded(self, client: str) -> None:
        self.access.succeeded(_key(client))


EVERYONE = "dashboard"  # every client's failures, for the overall limit (no client key is this)


def _key(client: str) -> str:
    return f"dashboard:{client}"


__all__ = [
    "Attempts",
    "Credentials",
    "CredentialsError",
    "hash_password",
    "password_problem",
    "verify_password",
]
