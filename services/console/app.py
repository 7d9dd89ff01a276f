"""The console's routes: server-rendered pages and the JSON API, both built from the documents
of `kairos.services.console.documents`, so a page and its API path never disagree.

Pages and reads change nothing. Actions (`kairos.services.console.acting`) and audit requests
are for signed-in users only, past the door (`kairos.services.console.door`); an audit stores a
report in the console's own view, nothing else. The API is versioned under `/api/v1`;
docs/console.md lists its paths.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from kairos.core.time_arguments import TimeArgumentError, parse_time
from kairos.services.build import register_build_info
from kairos.services.console import audits, documents, queries, runs
from kairos.services.console.acting import Acting, ActionDoor
from kairos.services.console.audits import AuditJobs, AuditsBusyError
from kairos.services.console.door import Door, DoorConfig, csrf_refusal, identity_of
from kairos.services.console.follower import ViewFollower
from kairos.services.console.herd import ComingHerd, herd_document
from kairos.services.console.plots import Series, plot_svg
from kairos.services.console.redaction import sees_secrets
from kairos.services.console.view import ConsoleView

API = "/api/v1"
LONGEST_AUDIT = timedelta(days=7)
"""Any signed-in user can ask for an audit: each is bounded, and one waits at most
(`AuditJobs`), so that asking cannot take the console's machine."""
POST = ["POST"]
MAX_HOURS = 24 * 7
_TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
# JSON shown as text, escaped by the templates like any text (`tojson` writes `<` as `\u003c`
# for script contexts, which a person reads as noise).
_TEMPLATES.env.filters["pretty_json"] = lambda value: json.dumps(value, indent=2, sort_keys=True)


@dataclass(frozen=True)
class Console:
    """What the routes read: the view, its follower, the live group, audits and the herd."""

    view: ConsoleView
    follower: ViewFollower
    group: documents.LiveGroup
    audits: AuditJobs
    herd: ComingHerd
    door: DoorConfig
    actions: ActionDoor | None = None
    """`None`: read-only, the default."""
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)


Render = Callable[..., Response]
"""`Pages.render`: a request, a template's name, a status, and the template's context."""


class BadRequestError(ValueError):
    """A query the console cannot answer; the message says what to send instead."""


def build_app(console: Console) -> Starlette:
    pages = Pages(console)
    api = Api(console)
    acting = Acting(console, pages.render)
    routes = [
        Route("/login", acting.login, methods=["GET", "POST"]),
        Route("/logout", acting.logout, methods=POST),
        Route("/runs", pages.runs),
        Route("/runs/{run_id:path}", pages.run),
        Route(f"{API}/runs", api.runs),
        Route(f"{API}/runs/{{run_id:path}}", api.run),
        Route("/schedules/{schedule_id:path}/actions/{action}", acting.page, methods=POST),
        Route(f"{API}/schedules/{{schedule_id:path}}/actions/{{action}}", acting.api, methods=POST),
        Route("/", lambda _r: RedirectResponse("/schedules", status_code=303)),
        Route("/schedules", pages.schedules),
        Route("/schedules/{schedule_id:path}", pages.schedule),
        Route("/partitions", pages.partitions),
        Route("/activity", pages.activity),
        Route("/audit", pages.audits, methods=["GET", "POST"]),
        Route("/audit/{audit_id:int}", pages.audit),
        Route("/dead-letters", pages.dead_letters),
        *probe_routes(),
        Route(f"{API}/status", api.status),
        Route(f"{API}/schedules", api.schedules),
        Route(f"{API}/schedules/{{schedule_id:path}}", api.schedule),
        Route(f"{API}/partitions", api.partitions),
        Route(f"{API}/activity", api.activity),
        Route(f"{API}/herd", api.herd),
        Route(f"{API}/audits", api.audits, methods=["GET", "POST"]),
        Route(f"{API}/audits/{{audit_id:int}}", api.audit),
        Route(f"{API}/dead-letters", api.dead_letters),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Door, config=console.door)])


def probe_routes() -> list[Route]:
    """`/metrics` (the build's `kairos_build_info`), `/livez` and `/readyz`: the console serves
    its view whatever the follower's state (shown on every page), so answering is being ready."""
    registry = CollectorRegistry()
    register_build_info(registry)

    def metrics(_request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    def answering(_request: Request) -> Response:
        return PlainTextResponse("ok\n")

    return [Route("/metrics", metrics), Route("/livez", answering), Route("/readyz", answering)]


def schedule_filter(request: Request) -> queries.ScheduleFilter:
    args = request.query_params
    state = args.get("state") or None
    if state not in (None, "active", "paused"):
        raise BadRequestError(f"state {state!r} is not active or paused")
    kind = args.get("kind") or None
    if kind not in (None, "cron", "every", "at"):
        raise BadRequestError(f"kind {kind!r} is not cron, every or at")
    label = args.get("label") or None
    try:
        parsed = queries.parse_label(label) if label else None
    except queries.FilterError as error:
        raise BadRequestError(str(error)) from None
    return queries.ScheduleFilter(
        prefix=args.get("q", "").strip(),
        owner=args.get("owner") or None,
        label=parsed,
        paused=None if state is None else state == "paused",
        trigger_kind=kind,
    )


def hours_of(request: Request) -> int:
    text = request.query_params.get("hours", "3")
    if not text.isdigit() or not 1 <= int(text) <= MAX_HOURS:
        raise BadRequestError(f"hours {text!r} is not a whole number from 1 to {MAX_HOURS}")
    return int(text)


def audit_window(console: Console, fields: dict[str, Any]) -> tuple[datetime, datetime]:
    now = console.clock()
    try:
        start = parse_time(str(fields.get("from") or "-1h"), now)
        end = parse_time(str(fields.get("to") or "-1m"), now)
    except TimeArgumentError as error:
        raise BadRequestError(f"{error}; e.g. 2027-03-14T07:00:00Z, now or -2h") from None
    if end <= start:
        raise BadRequestError("the window's end is not after its start; swap them")
    if end - start > LONGEST_AUDIT:
        raise BadRequestError(
            f"the window is longer than {LONGEST_AUDIT.days} days; audit a longer one in parts, "
            "or with `kairos audit verify` from a shell"
        )
    return start, end


def status_document(console: Console) -> dict[str, Any]:
    follower = console.follower
    return {
        "schedules": queries.count_schedules(console.view),
        "view_updated_at": None if follower.applied_at is None else follower.applied_at.isoformat(),
        "view_error": follower.error,
        "rejected_records": follower.rejected,
    }


class Api:
    def __init__(self, console: Console) -> None:
        self._console = console

    def status(self, _request: Request) -> Response:
        return JSONResponse(status_document(self._console))

    def schedules(self, request: Request) -> Response:
        return _json(
            lambda: documents.schedules_page(
                self._console.view, schedule_filter(request), request.query_params.get("after", "")
            )
        )

    def schedule(self, request: Request) -> Response:
        schedule_id = request.path_params["schedule_id"]
        found = documents.schedule_page(
            self._console.view,
            self._console.group,
            schedule_id,
            self._console.clock(),
            identity_of(request),
        )
        if found is None:
            return JSONResponse({"error": f"no schedule {schedule_id!r} in the view"}, 404)
        return JSONResponse(found)

    def partitions(self, _request: Request) -> Response:
        return JSONResponse(self._console.group.document())

    def activity(self, request: Request) -> Response:
        return _json(
            lambda: documents.activity_page(
                self._console.view, self._console.clock(), hours_of(request)
            )
        )

    def herd(self, _request: Request) -> Response:
        return JSONResponse(herd_document(self._console.herd.latest(self._console.clock())))

    async def audits(self, request: Request) -> Response:
        if request.method == "POST":
            try:
                fields = await request.json()
                if not isinstance(fields, dict):
                    raise BadRequestError('send a JSON object: {"from": …, "to": …}')
                start, end = audit_window(self._console, fields)
            except (BadRequestError, ValueError) as error:
                return JSONResponse({"error": str(error)}, 400)
            try:
                audit_id = self._console.audits.request(start, end)
            except AuditsBusyError as error:
                return JSONResponse({"error": str(error)}, 429)
            return JSONResponse(audits.audit(self._console.view, audit_id), 202)
        return JSONResponse({"audits": audits.audits(self._console.view)})

    def audit(self, request: Request) -> Response:
        found = stored_audit(self._console, request)
        if found is None:
            return JSONResponse({"error": "no such audit"}, 404)
        return JSONResponse(found)

    def dead_letters(self, request: Request) -> Response:
        return JSONResponse({"dead_letters": dead_letters_document(self._console, request)})

    def runs(self, request: Request) -> Response:
        return _json(lambda: {"runs": runs_document(self._console, request)})

    def run(self, request: Request) -> Response:
        found = run_document(self._console, request)
        if found is None:
            return JSONResponse({"error": "no such run in the view"}, 404)
        return JSONResponse(found)


def _json(build: Callable[[], dict[str, Any]]) -> Response:
    try:
        return JSONResponse(build())
    except BadRequestError as error:
        return JSONResponse({"error": str(error)}, 400)


def activity_plots(activity: dict[str, Any]) -> list[str]:
    minutes = activity["minutes"]
    labels = [m["minute"][11:16] for m in minutes]

    def series(name: str, key: str) -> Series:
        return Series(name, [m.get(key) for m in minutes])

    return [
        plot_svg("Fires per minute", labels, [series("fires", "fires")], "", bars=True),
        plot_svg(
            "Lateness (bucket upper bound)",
            labels,
            [series("p50", "lateness_p50_ms"), series("p99", "lateness_p99_ms")],
            "ms",
        ),
        plot_svg(
            "Skipped, failed, dead-lettered, deadline missed",
            labels,
            [
                series("skipped", "skipped"),
                series("failed", "failed"),
                series("dead-lettered", "dead_lettered"),
                series("deadline missed", "deadline_missed"),
            ],
            "",
            bars=True,
        ),
    ]


def herd_plot(herd: dict[str, Any]) -> str | None:
    if herd.get("state") != "counted":
        return None
    start = datetime.fromisoformat(herd["from"])
    by_minute: dict[str, int] = herd["minutes"]
    count = int((datetime.fromisoformat(herd["to"]) - start).total_seconds() // 60)
    first = int(start.timestamp()) // 60 + 1
    keys = [datetime.fromtimestamp((first + i) * 60, UTC).isoformat() for i in range(count)]
    values: list[float | None] = [by_minute.get(key, 0) for key in keys]
    labels = [key[11:16] for key in keys]
    return plot_svg("Coming fires per minute", labels, [Series("due", values)], "", bars=True)


class Pages:
    def __init__(self, console: Console) -> None:
        self._console = console

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context.update(
            status=status_document(self._console),
            path=request.url.path,
            identity=identity_of(request),
            can_sign_in=self._console.door.users is not None,
        )
        return _TEMPLATES.TemplateResponse(request, name, context, status_code=status)

    def _problem(self, request: Request, message: str, status: int) -> Response:
        return self.render(request, "problem.html", status, message=message)

    def schedules(self, request: Request) -> Response:
        try:
            chosen = schedule_filter(request)
        except BadRequestError as error:
            return self._problem(request, str(error), 400)
        page = documents.schedules_page(
            self._console.view, chosen, request.query_params.get("after", "")
        )
        owners = queries.owners(self._console.view)
        args = dict(request.query_params)
        return self.render(request, "schedules.html", page=page, owners=owners, args=args)

    def schedule(self, request: Request) -> Response:
        schedule_id = request.path_params["schedule_id"]
        found = documents.schedule_page(
            self._console.view,
            self._console.group,
            schedule_id,
            self._console.clock(),
            identity_of(request),
        )
        if found is None:
            message = f"No schedule {schedule_id!r} in the view: never published, or deleted."
            return self._problem(request, message, 404)
        return self.render(
            request,
            "schedule.html",
            page=found,
            actions=self._console.actions is not None,
            done=request.query_params.get("done"),
        )

    def partitions(self, request: Request) -> Response:
        return self.render(request, "partitions.html", group=self._console.group.document())

    def activity(self, request: Request) -> Response:
        try:
            hours = hours_of(request)
        except BadRequestError as error:
            return self._problem(request, str(error), 400)
        activity = documents.activity_page(self._console.view, self._console.clock(), hours)
        herd = herd_document(self._console.herd.latest(self._console.clock()))
        return self.render(
            request,
            "activity.html",
            activity=activity,
            hours=hours,
            plots=activity_plots(activity),
            herd=herd,
            herd_plot=herd_plot(herd),
        )

    async def audits(self, request: Request) -> Response:
        if request.method == "POST":
            form = {k: str(v) for k, v in (await request.form()).items()}
            refusal = csrf_refusal(request, form)
            if refusal is not None:
                return refusal
            try:
                start, end = audit_window(self._console, form)
            except BadRequestError as error:
                return self._problem(request, str(error), 400)
            try:
                audit_id = self._console.audits.request(start, end)
            except AuditsBusyError as error:
                return self._problem(request, str(error), 429)
            return RedirectResponse(f"/audit/{audit_id}", status_code=303)
        return self.render(request, "audits.html", audits=audits.audits(self._console.view))

    def audit(self, request: Request) -> Response:
        found = stored_audit(self._console, request)
        if found is None:
            return self._problem(request, "No such audit.", 404)
        return self.render(request, "audit.html", audit=found)

    def dead_letters(self, request: Request) -> Response:
        letters = dead_letters_document(self._console, request)
        return self.render(request, "dead_letters.html", letters=letters)

    def runs(self, request: Request) -> Response:
        try:
            found = runs_document(self._console, request)
        except BadRequestError as error:
            return self._problem(request, str(error), 400)
        teams = queries.owners(self._console.view)
        args = dict(request.query_params)
        return self.render(request, "runs.html", runs=found, teams=teams, args=args)

    def run(self, request: Request) -> Response:
        found = run_document(self._console, request)
        if found is None:
            return self._problem(request, "No such run in the view (kept 14 days).", 404)
        return self.render(request, "run.html", page=found)


def stored_audit(console: Console, request: Request) -> dict[str, Any] | None:
    audit_id = request.path_params["audit_id"]
    # Ids are the view's BIGINTs: a larger number names no audit (and would not fit a query).
    return audits.audit(console.view, audit_id) if 0 <= audit_id < 2**63 else None


def dead_letters_document(console: Console, request: Request) -> list[dict[str, Any]]:
    """The latest dead letters; a reason (which may quote a job's output or a definition's
    values) only to the users of the team the schedule's runs were fired for."""
    viewer = identity_of(request)
    letters = queries.dead_letters(console.view)
    for letter in letters:
        letter["dead_lettered_at"] = documents.instant_text(letter["dead_lettered_at"])
        if not sees_secrets(viewer, letter.pop("owner")):
            letter["reason"] = runs.HIDDEN_REASON
    return letters


def run_filter(console: Console, request: Request) -> runs.RunFilter:
    args = request.query_params
    state = args.get("state") or None
    if state is not None and state not in runs.STATES:
        raise BadRequestError(f"state {state!r} is not one of {', '.join(runs.STATES)}")
    now = console.clock()
    try:
        start = parse_time(args.get("from") or "-24h", now)
        end = parse_time(args.get("to") or "+1h", now)
    except TimeArgumentError as error:
        raise BadRequestError(f"{error}; e.g. 2027-03-14T07:00:00Z, now or -2h") from None
    return runs.RunFilter(
        start, end, args.get("team") or None, state, args.get("schedule", "").strip() or None
    )


def runs_document(console: Console, request: Request) -> list[dict[str, Any]]:
    found = runs.runs_list(console.view, run_filter(console, request), identity_of(request))
    return [_instants(run) for run in found]


def run_document(console: Console, request: Request) -> dict[str, Any] | None:
    found = runs.run_page(console.view, request.path_params["run_id"], identity_of(request))
    if found is None:
        return None
    _instants(found["run"])
    for event in found["events"]:
        event["at"] = documents.instant_text(event["at"])
    found["same_occurrence"] = [_instants(other) for other in found["same_occurrence"]]
    return found


def _instants(run: dict[str, Any]) -> dict[str, Any]:
    for key in ("nominal_at", "fired_at", "finished_at"):
        run[key] = documents.instant_text(run[key])
    return run
