"""`ars dashboard`'s web app (Starlette): the page, its JSON, and its live updates.

    GET /                              the current campaign's page (or the first one)
    GET /c/<name>                      a campaign's page, with a picker of the others
    GET /api/campaigns                 every campaign: name, verdict, attempted, best
    GET /api/campaigns/<name>          `ars campaign status --json` plus rows, tree, chart data
    GET /api/campaigns/<name>/events   Server-Sent Events: the page's sections that changed

Read-only: no route writes, runs a command, or opens a path the client gave; a name is looked up
among the campaigns under the folder served, a log is one the campaign's state names
(`reading.log_tail`). A token, when set, is required on every request, events included (`?token=`
or `Authorization: Bearer`); on a loopback bind the Host header must name the loopback, so a web
page elsewhere cannot reach the API through a DNS name that points at 127.0.0.1.

Live: one `Watch` per campaign with open pages polls its files' mtimes and sizes every half
second (`reading.signature`), takes no lock, reads and renders once per change in a worker
thread, and hands the changed sections to every page; a page that falls behind gets them merged
(one pending update per page, whatever the rate), so memory stays flat however long it runs.
While the campaign goes on, the page is refreshed every few seconds too (elapsed times, time left).
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from autoresearch_skills.dashboard import folders, page, reading

POLL_SECONDS = 0.5  # how often the files are looked at; a change reaches pages within about this
TICK_SECONDS = 5.0  # while the campaign goes on: elapsed times and time left move without a file change
KEEPALIVE_SECONDS = 15.0  # a comment line, so proxies and ssh tunnels keep an idle stream open
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


@dataclass
class Update:
    """Sections that changed, sent to every page as one event (serialised once for all of them)."""

    sections: dict[str, str]
    updated_at: str

    @functools.cached_property
    def payload(self) -> bytes:
        data = json.dumps({"sections": self.sections, "updated_at": self.updated_at})
        return f"data: {data}\n\n".encode()

    def merged(self, later: Update) -> Update:
        return Update({**self.sections, **later.sections}, later.updated_at)


@dataclass(eq=False)
class Client:
    """One open page: at most one pending update (later ones merged into it)."""

    pending: Update | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, update: Update) -> None:
        self.pending = update if self.pending is None else self.pending.merged(update)
        self.wake.set()

    async def next(self) -> Update:
        await self.wake.wait()
        self.wake.clear()
        update, self.pending = self.pending, None
        assert update is not None
        return update


class Watch:
    """One campaign's poller, shared by every page open on it; runs while a page is open."""

    def __init__(self, folder: Path, poll: float = POLL_SECONDS) -> None:
        self.folder = folder
        self.reader = reading.Reader(folder)
        self.poll = poll
        self.clients: set[Client] = set()
        self.sections: dict[str, str] = {}
        self.facts: dict[str, Any] = {}
        self.task: asyncio.Task | None = None

    def subscribe(self) -> Client:
        client = Client()
        if self.sections:
            client.push(Update(dict(self.sections), self.facts.get("updated_at", "")))
        self.clients.add(client)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())
        return client

    def unsubscribe(self, client: Client) -> None:
        self.clients.discard(client)

    async def _run(self) -> None:
        seen: tuple | None = None
        logs_seen: tuple | None = None
        last_read = 0.0
        while self.clients:
            found = await asyncio.to_thread(reading.signature, reading.campaign_files(self.folder))
            logs = await asyncio.to_thread(reading.signature, reading.log_files(self.facts))
            ticking = self.facts.get("should_continue") and time.monotonic() - last_read >= TICK_SECONDS
            try:
                if found != seen or ticking:
                    seen, last_read = found, time.monotonic()
                    await self.refresh()
                    logs = await asyncio.to_thread(reading.signature, reading.log_files(self.facts))
                elif logs != logs_seen:
                    await self.refresh(logs_only=True)
                logs_seen = logs
            except Exception as err:  # noqa: BLE001 one bad picture must not stop the updates
                print(f"dashboard: {self.folder.name}: {type(err).__name__}: {err}", file=sys.stderr)
            await asyncio.sleep(self.poll)
        self.task = None

    async def refresh(self, logs_only: bool = False) -> None:
        """Read and render again: everything, or (`logs_only`) the log tails and the slots."""
        if logs_only:
            facts = await asyncio.to_thread(self.reader.with_new_logs, self.facts)
            sections = {**self.sections, **await asyncio.to_thread(page.sections, facts, ("slots", "logs"))}
        else:
            facts = await asyncio.to_thread(self.reader.read)
            sections = await asyncio.to_thread(page.sections, facts)
        changed = {k: v for k, v in sections.items() if self.sections.get(k) != v}
        self.facts, self.sections = facts, sections
        if changed:
            update = Update(changed, facts.get("updated_at", ""))
            for client in list(self.clients):
                client.push(update)


class Dashboard:
    """The served folder, the token, and one Watch per campaign (made on first use, kept: a
    handful of campaigns, each holding its latest sections only)."""

    def __init__(self, root: Path, token: str | None = None, poll: float = POLL_SECONDS) -> None:
        self.root = root
        self.token = token
        self.poll = poll
        self.watches: dict[str, Watch] = {}
        self.lock = threading.Lock()

    def folder(self, name: str) -> Path | None:
        """The campaign called `name` under the root; None for any other name (`..` included)."""
        return folders.campaigns(self.root).get(name)

    def watch(self, name: str, folder: Path) -> Watch:
        with self.lock:  # the warm-up thread asks too
            found = self.watches.get(name)
            if found is None or found.folder != folder:
                found = self.watches[name] = Watch(folder, self.poll)
            return found

    def warm(self) -> None:
        """Read every campaign and render its sections once, in the background as the server
        starts: the first page opened is then as quick as the next (templates compiled, rows parsed)."""
        for name, folder in folders.campaigns(self.root).items():
            page.sections(self.watch(name, folder).reader.read())

    def href(self, path: str) -> str:
        return f"{path}?token={quote(self.token)}" if self.token else path


def create_app(
    root: Path, token: str | None = None, loopback: bool = True, poll: float = POLL_SECONDS
) -> Starlette:
    """The app serving every campaign under `root` (or `root` itself when it is a campaign folder)."""
    board = Dashboard(root, token, poll)

    def missing(name: str) -> JSONResponse:
        return JSONResponse({"error": f"no campaign {name!r} under {root}"}, status_code=404)

    async def index(request: Request) -> Response:
        names = list(folders.campaigns(root))
        chosen = folders.current(root, names)
        if chosen is None:
            return HTMLResponse(
                f"<!doctype html><meta charset='utf-8'><title>ars dashboard</title>"
                f"<p>No campaign under {_escape(str(root))} yet: start one with <code>ars campaign init</code>.</p>"
            )
        return RedirectResponse(board.href(f"/c/{quote(chosen, safe='')}"), status_code=303)

    async def campaign_page(request: Request) -> Response:
        name = request.path_params["name"]
        folder = board.folder(name)
        if folder is None:
            return missing(name)
        facts = await asyncio.to_thread(board.watch(name, folder).reader.read)
        nonce = secrets.token_urlsafe(12)
        listed = [{"name": n, "href": board.href(f"/c/{quote(n, safe='')}")} for n in folders.campaigns(root)]
        html = await asyncio.to_thread(
            page.render_page,
            facts,
            events=board.href(f"/api/campaigns/{quote(name, safe='')}/events"),
            campaigns=listed,
            nonce=nonce,
        )
        return HTMLResponse(
            html, headers={"Content-Security-Policy": _policy(nonce), "Cache-Control": "no-store"}
        )

    async def campaign_list(request: Request) -> Response:
        out = []
        for name, folder in folders.campaigns(root).items():
            facts = await asyncio.to_thread(board.watch(name, folder).reader.read)
            keys = ("name", "folder", "verdict", "should_continue", "attempted", "best", "error")
            out.append({**{k: facts[k] for k in keys if k in facts}, "name": name})  # the name its URL takes
        return JSONResponse(out)

    async def campaign_json(request: Request) -> Response:
        name = request.path_params["name"]
        folder = board.folder(name)
        if folder is None:
            return missing(name)
        facts = await asyncio.to_thread(board.watch(name, folder).reader.read)
        body = json.dumps(facts, default=str)  # as `ars campaign status --json` writes its values
        return Response(body, media_type="application/json", status_code=500 if "error" in facts else 200)

    async def events(request: Request) -> Response:
        name = request.path_params["name"]
        folder = board.folder(name)
        if folder is None:
            return missing(name)
        watch = board.watch(name, folder)
        client = watch.subscribe()

        async def stream():
            try:
                yield b"retry: 1000\n\n"  # EventSource reconnects after a second when the server went away
                while True:
                    try:
                        update = await asyncio.wait_for(client.next(), KEEPALIVE_SECONDS)
                    except asyncio.TimeoutError:
                        yield b": keepalive\n\n"
                        continue
                    yield update.payload
            finally:
                watch.unsubscribe(client)

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    routes = [
        Route("/", index),
        Route("/c/{name}", campaign_page),
        Route("/api/campaigns", campaign_list),
        Route("/api/campaigns/{name}", campaign_json),
        Route("/api/campaigns/{name}/events", events),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(Guard, token=token, loopback=loopback)
    threading.Thread(target=board.warm, daemon=True, name="dashboard-warm-up").start()
    return app


class Guard:
    """Every request: GET or HEAD only (nothing here changes anything), the token when one is set,
    and on a loopback bind a Host header that names the loopback."""

    def __init__(self, app: Any, token: str | None, loopback: bool) -> None:
        self.app, self.token, self.loopback = app, token, loopback

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refused = self.refusal(request)
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, request: Request) -> Response | None:
        if request.method not in ("GET", "HEAD"):
            return JSONResponse({"error": "read-only: only GET is served"}, status_code=405)
        if self.loopback and (request.url.hostname or "") not in LOOPBACK_HOSTS:
            return JSONResponse(
                {"error": "this dashboard answers on 127.0.0.1 or localhost only"}, status_code=400
            )
        if self.token is None:
            return None
        given = request.query_params.get("token") or ""
        bearer = request.headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            given = given or bearer[7:].strip()
        if not secrets.compare_digest(given.encode(), self.token.encode()):
            return JSONResponse(
                {"error": "a token is required: open the URL `ars dashboard` printed (…?token=…)"},
                status_code=401,
            )
        return None


def _policy(nonce: str) -> str:
    """The page's Content-Security-Policy: its own inline script (by nonce) and styles, data: images,
    events from itself; nothing else loads or runs, whatever a text slipped past escaping says."""
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; img-src data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def _escape(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))
