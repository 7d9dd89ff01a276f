"""The routes of the console's actions (`kairos.services.console.actions` says who may act
and what an action publishes): refused unless the console was started with a users file, the
request comes from the console's own pages (or from no browser at all), and it proves who sends
it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from kairos.core.errors import KairosError
from kairos.services.console.actions import ACTIONS, REALM, Users, act
from kairos.streams.kafka.settings import KafkaSettings

if TYPE_CHECKING:
    from kairos.services.console.app import Console


@dataclass(frozen=True)
class ActionDoor:
    """Who may act (`Users`) and the deployment the actions publish to."""

    users: Users
    settings: KafkaSettings


class Acting:
    def __init__(self, console: Console) -> None:
        self._console = console

    def login(self, request: Request) -> Response:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        return RedirectResponse("/schedules", status_code=303)

    async def page(self, request: Request) -> Response:
        form = await request.form()
        outcome = await self._act(request, {k: str(v) for k, v in form.items()})
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
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        door = self._console.actions
        assert door is not None  # checked by `_refusal`
        action = request.path_params["action"]
        if action not in ACTIONS:
            return JSONResponse({"error": f"no action {action!r}; one of {list(ACTIONS)}"}, 404)
        who = door.users.authenticated(request.headers.get("authorization"))
        assert who is not None  # checked by `_refusal`
        try:
            return str(
                await run_in_threadpool(
                    act, door.settings, action, request.path_params["schedule_id"], who, fields
                )
            )
        except KairosError as error:
            return JSONResponse({"error": str(error)}, 400)

    def _refusal(self, request: Request) -> Response | None:
        door = self._console.actions
        if door is None:
            return JSONResponse(
                {"error": "the console is read-only; start it with --users-file to allow actions"},
                403,
            )
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            return JSONResponse({"error": f"refused: posted from {origin}"}, 403)
        if door.users.authenticated(request.headers.get("authorization")) is None:
            return JSONResponse(
                {"error": "who are you? send your name and token (HTTP Basic)"},
                401,
                headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'},
            )
        return None
