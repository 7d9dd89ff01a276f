"""The routes of signing in and of the console's actions (`kairos.services.console.actions`
says what an action publishes). The door (`kairos.services.console.door`) has already checked
where a post comes from and who sends it; here a user acts only on the schedules of their teams
(an administrators' team's user on every schedule), signed as that team."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from kairos.core.errors import KairosError
from kairos.services.console.actions import ACTIONS, act
from kairos.services.console.documents import held_schedule
from kairos.services.console.door import SignInLimitError, csrf_refusal, identity_of
from kairos.services.console.identity import SESSION_COOKIE, Identity, teams_acting_for
from kairos.streams.kafka.settings import KafkaSettings

if TYPE_CHECKING:
    from kairos.services.console.app import Console, Render


class Administrators(Protocol):
    """The administrators' teams (`kairos.services.console.actions.AdminTeams`)."""

    def names(self) -> frozenset[str]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ActionDoor:
    """The deployment the actions publish to, who its administrators are, and the keys the
    console signs with: `<team>.key` in `team_keys`, one per team it acts for."""

    settings: KafkaSettings
    admins: Administrators
    team_keys: Path | None = None


class ForbiddenActionError(KairosError):
    """The user may not do this; the message says why."""


class Acting:
    def __init__(self, console: Console, render: Render) -> None:
        self._console = console
        self._render = render

    async def login(self, request: Request) -> Response:
        door = self._console.door
        if request.method != "POST":
            return self._render(request, "login.html", next=_local(request))
        form = {k: str(v) for k, v in (await request.form()).items()}
        name, token = form.get("name", ""), form.get("token", "")
        peer = request.client.host if request.client else None
        try:
            identity = None if door.users is None else door.signed_in(peer, name, token)
        except SignInLimitError as error:
            return self._render(request, "login.html", 429, next=_local(request), failed=str(error))
        if identity is None:
            wrong = "That name and token do not match a user of this console."
            return self._render(request, "login.html", 401, next=_local(request), failed=wrong)
        response = RedirectResponse(_local(request, form.get("next")), status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            door.sessions.issue(identity, token, int(door.clock())),
            max_age=door.sessions.lifetime_s,
            httponly=True,
            samesite="strict",
            secure=door.origin(request).startswith("https://"),
        )
        return response

    async def logout(self, request: Request) -> Response:
        refusal = csrf_refusal(request, {k: str(v) for k, v in (await request.form()).items()})
        if refusal is not None:
            return refusal
        identity = identity_of(request)
        if identity is not None and identity.via == "session" and identity.csrf:
            self._console.door.revoked.add(identity.csrf)
        response = RedirectResponse("/schedules", status_code=303)
        response.delete_cookie(SESSION_COOKIE, httponly=True, samesite="strict")
        return response

    async def page(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        refusal = csrf_refusal(request, form)
        if refusal is not None:
            return refusal
        outcome = await self._act(request, form)
        if isinstance(outcome, Response):
            return outcome
        schedule_id = quote(request.path_params["schedule_id"])
        return RedirectResponse(
            f"/schedules/{schedule_id}?{urlencode({'done': outcome})}", status_code=303
        )

    async def api(self, request: Request) -> Response:
        try:
            fields = await request.json() if await request.body() else {}
        except ValueError:
            fields = None
        if not isinstance(fields, dict):
            return JSONResponse({"error": 'send a JSON object, e.g. {"reason": "…"}'}, 400)
        outcome = await self._act(request, {k: str(v) for k, v in fields.items() if v is not None})
        if isinstance(outcome, Response):
            return outcome
        return JSONResponse({"done": outcome})

    async def _act(self, request: Request, fields: dict[str, str]) -> str | Response:
        actions, identity = self._console.actions, identity_of(request)
        assert actions is not None and identity is not None  # the door lets in no one else
        action, schedule_id = request.path_params["action"], request.path_params["schedule_id"]
        if action not in ACTIONS:
            return JSONResponse({"error": f"no action {action!r}; one of {list(ACTIONS)}"}, 404)
        try:
            settings = await run_in_threadpool(self._signing, actions, identity, schedule_id)
            done = await run_in_threadpool(
                act, settings, action, schedule_id, identity.user, fields
            )
        except ForbiddenActionError as error:
            return JSONResponse({"error": str(error)}, 403)
        except KairosError as error:
            return JSONResponse({"error": str(error)}, 400)
        return str(done)

    def _signing(self, actions: ActionDoor, identity: Identity, schedule_id: str) -> KafkaSettings:
        """The settings signing as the team `identity` acts as on the schedule."""
        # Decided by the owner the ticker holds, not the key's latest record: a change awaiting
        # the ticker's verdict (perhaps another team's forgery) moves nothing here.
        held = held_schedule(self._console.view, self._console.group, schedule_id)
        if held is None:
            raise KairosError(f"no schedule {schedule_id!r} in the view")
        if held[2].mode is None:
            raise ForbiddenActionError(
                f"the tickers' verdict on {schedule_id} is not known yet (their group cannot be "
                "read, or no ticker has judged its partition); try again in a moment"
            )
        owner = held[0]["owner"]
        teams = teams_acting_for(identity, owner, actions.admins.names())
        if not teams:
            raise ForbiddenActionError(
                f"{identity.shown()} may act only on its teams' schedules; {schedule_id} "
                f"belongs to {'team ' + repr(owner) if owner else 'no team (administrators only)'}"
            )
        if actions.team_keys is None:
            return actions.settings
        for team in teams:
            key = actions.team_keys / f"{team}.key"
            if key.is_file():
                return actions.settings.model_copy(update={"signing_key": key})
        raise ForbiddenActionError(
            f"this console holds no signing key of team {teams[0]!r}: an administrator puts "
            f"one of the team's keys at {actions.team_keys / (teams[0] + '.key')}"
        )


def _local(request: Request, chosen: str | None = None) -> str:
    """Where to go after signing in: a path of this console, never another site."""
    target = chosen if chosen is not None else request.query_params.get("next", "/schedules")
    foreign = not target.startswith("/") or target.startswith("//") or "\\" in target
    return "/schedules" if foreign else target
