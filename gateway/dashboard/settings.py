"""The dashboard's Settings page: the memory provider and its settings, and config.yaml
itself. Every change goes through gateway/config_edit.py, the code `hermes memory setup`
uses: the file must load as the gateway loads it and hold no secret (a variable's name
in its place); a provider's settings are checked as the provider checks them. Owners
change, admins read; each change is in the audit log; the text before the last edit
is kept (config.yaml.previous) and can be put back. A running gateway uses a change from
its next start (the Tools page's changes, from the next turn)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from gateway.admission.authority import Action, decide
from gateway.commands.memory import provider_line
from gateway.config import ConfigError, load_config
from gateway.config_edit import (
    ProviderPlan,
    SettingError,
    apply_provider,
    built_in_only,
    fingerprint,
    has_previous,
    plan_provider,
    provider_fields,
    read_text,
    restore_previous,
    save_text,
)
from gateway.dashboard.site import Operator, RefusedError, form_of
from gateway.edge.http_server import Route
from hermes.identity import owner_user_id
from hermes.providers import registry

if TYPE_CHECKING:
    from gateway.admission.people import People
    from gateway.dashboard.site import Site

RECALL_MODES = ("hybrid", "context", "tools")
APPLIED = "the gateway uses it from its next start (systemctl restart hermes, or stop and run it)"


class Host(Protocol):
    """What these pages use of the dashboard (gateway/dashboard/pages.py `Dashboard`)."""

    parts: Any
    site: Site
    people: People

    def show(
        self, request: web.Request, me: Operator, name: str, **values: Any
    ) -> web.Response: ...

    def unless_sure(
        self,
        request: web.Request,
        me: Operator,
        form: dict[str, str],
        question: str,
        *,
        yes: str,
        detail: str = "",
    ) -> web.Response | None: ...


class SettingsPages:
    def __init__(self, dashboard: Host) -> None:
        self.dashboard = dashboard
        self.parts, self.site = dashboard.parts, dashboard.site

    def routes(self) -> list[Route]:
        site = self.site
        return [
            site.route("GET", "/settings", self._page),
            site.route("POST", "/settings/provider", self._provider),
            site.route("POST", "/settings/config", self._config),
            site.route("POST", "/settings/restore", self._restore),
        ]

    def _refused(self, me: Operator) -> str | None:
        """Why `me` may not change the settings (None: they may)."""
        return decide(self.dashboard.people.party_of(me.user_id, me.role), Action.EDIT_CONFIG)

    def _check(self, me: Operator) -> None:
        if (refused := self._refused(me)) is not None:
            raise RefusedError(403, f"Not allowed: {refused}.")

    # -- the page ----------------------------------------------------------------------------

    async def _page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        chosen = request.query.get("provider", "")[:64]
        values = await asyncio.to_thread(lambda: self._values(chosen))
        return self._show(request, me, **values)

    def _show(
        self, request: web.Request, me: Operator, status: int = 200, **values: Any
    ) -> web.Response:
        values.setdefault("error", "")
        return self.dashboard.show(
            request,
            me,
            "settings.html",
            status=status,
            may_change=self._refused(me) is None,
            **values,
        )

    def _values(self, chosen: str, text: str | None = None) -> dict[str, Any]:
        """The provider in use and the one being chosen with its settings' fields (their
        values as config.yaml has them), and config.yaml's text."""
        home = self.parts.home
        try:
            current = read_text(home)
        except ConfigError as exc:
            current = ""
            text = text if text is not None else f"# {exc}"
        try:
            config = load_config(home)
        except ConfigError:
            config = self.parts.config
        memory = config.memory
        found = registry.discover(home)
        chosen = chosen if chosen in found else memory.provider if memory.provider in found else ""
        fields, problem = [], ""
        if chosen:
            try:
                fields = provider_fields(chosen, home)
            except SettingError as exc:
                problem = str(exc)
        saved = memory.providers.get(chosen, {})
        in_use = self.parts.memory.providers.status(owner_user_id(home))
        return {
            "provider": memory.provider,
            "provider_status": provider_line(in_use),
            "providers": sorted(found),
            "chosen": chosen,
            "fields": [
                {
                    "field": f,
                    "name": f"{f.key}_env" if f.secret else f.key,
                    "value": saved.get(f"{f.key}_env" if f.secret else f.key, ""),
                }
                for f in fields
            ],
            "provider_problem": problem,
            "recall_mode": memory.recall_mode,
            "recall_modes": RECALL_MODES,
            "text": current if text is None else text,
            "seen": fingerprint(current),
            "previous": has_previous(home),
        }

    # -- the memory provider ------------------------------------------------------------------

    async def _provider(self, request: web.Request, me: Operator) -> web.StreamResponse:
        """Choose the memory provider (or none) with its settings, checked as `hermes
        memory setup` checks them."""
        self._check(me)
        form = await form_of(request)
        name = form.get("provider", "")
        mode = form.get("recall_mode") or None
        if mode is not None and mode not in RECALL_MODES:
            return self.site.redirect("/settings", f"Not changed: no recall mode {mode!r}.")
        home = self.parts.home
        if not name:
            try:
                await asyncio.to_thread(lambda: built_in_only(home))
            except ConfigError as exc:
                return self.site.redirect("/settings", f"Not changed: {exc}.")
            await self.site.audit(me, "config", "memory.provider", "built-in memory only")
            return self.site.redirect("/settings", f"Built-in memory only: {APPLIED}.")
        given = _given(form, ("csrf", "provider", "recall_mode"))
        try:
            plan: ProviderPlan = await asyncio.to_thread(
                lambda: plan_provider(home, name, given, mode)
            )
            await asyncio.to_thread(lambda: apply_provider(home, plan))
        except ConfigError as exc:  # (a SettingError too: a setting given wrong)
            return self.site.redirect("/settings", f"Not changed: {exc}.", provider=name)
        detail = ", ".join(f"{k}={v}" for k, v in plan.stored.items())
        await self.site.audit(me, "config", "memory.provider", f"{name} ({detail})")
        said = f"Memory provider {name} selected: {APPLIED}."
        if plan.missing:
            said += " Still missing: " + "; ".join(plan.missing) + "."
        return self.site.redirect("/settings", said, provider=name)

    # -- config.yaml ------------------------------------------------------------------------

    async def _config(self, request: web.Request, me: Operator) -> web.StreamResponse:
        """config.yaml as the owner wrote it, once it loads and holds no secret; refused
        (the text kept in the editor, with why) otherwise, or when the file changed
        since the page was read."""
        self._check(me)
        form = await form_of(request)
        text, seen = form.get("text", ""), form.get("seen", "")
        try:
            changed = await asyncio.to_thread(lambda: save_text(self.parts.home, text, seen))
        except ConfigError as exc:
            values = await asyncio.to_thread(lambda: self._values("", text))
            return self._show(request, me, 422, error=f"Not saved: {exc}", **values)
        if not changed:
            return self.site.redirect("/settings", "Nothing changed.")
        keys = ", ".join(changed)
        await self.site.audit(me, "config", "config.yaml", keys[:500])
        return self.site.redirect("/settings", f"config.yaml saved ({keys}): {APPLIED}.")

    async def _restore(self, request: web.Request, me: Operator) -> web.StreamResponse:
        """Put back the config.yaml of before the last edit made here (asked first)."""
        self._check(me)
        form = await form_of(request)
        asked = self.dashboard.unless_sure(
            request,
            me,
            form,
            "Put back the previous config.yaml?",
            yes="Put it back",
            detail="The text before the last change made here replaces the file (it "
            "becomes the previous one in turn).",
        )
        if asked is not None:
            return asked
        try:
            changed = await asyncio.to_thread(lambda: restore_previous(self.parts.home))
        except ConfigError as exc:
            return self.site.redirect("/settings", f"Not put back: {exc}.")
        keys = ", ".join(changed) or "nothing"
        await self.site.audit(me, "config", "config.yaml", f"put back the previous ({keys})"[:500])
        return self.site.redirect(
            "/settings", f"Previous config.yaml put back ({keys}): {APPLIED}."
        )


def _given(form: Mapping[str, str], skip: tuple[str, ...]) -> dict[str, object]:
    """The provider settings a form gives (an empty field: left to its default)."""
    return {k: v.strip() for k, v in form.items() if k not in skip and v.strip()}
