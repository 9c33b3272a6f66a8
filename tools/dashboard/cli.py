"""`ars dashboard`: serve the live page of every campaign under a folder. Starlette, uvicorn and
Jinja2 (the `dashboard` extra) are imported only once it serves, so `ars --help` never loads them."""

from __future__ import annotations

import secrets
import socket
import sys
import threading
import webbrowser
from pathlib import Path

import click

from autoresearch_skills.errors import BadInput, run_cli

LOOPBACK = ("127.0.0.1", "localhost", "::1")
EXTRA = "pip install 'autoresearch-skills[dashboard]'"


@click.command("dashboard")
@click.argument("folder", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("-p", "--port", default=8765, show_default=True, help="0 picks a free port")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="any other address than the loopback needs a token"
)
@click.option(
    "--token", help="required on every request (default: generated when --host is not the loopback)"
)
@click.option("--open", "open_browser", is_flag=True, help="open the page in this machine's browser")
def cli(folder: Path | None, port: int, host: str, token: str | None, open_browser: bool) -> None:
    """Serve a live page of the campaigns under FOLDER (default: the repository's
    reports/auto_research): the stop line, baseline and best, the noise, what
    runs in each slot with its log tail, the progress chart, the experiment
    tree, the timeline and the ledger. It follows the campaign files without
    taking their locks and updates open pages within a second or two.

    Read-only. It binds 127.0.0.1 by default; with any other --host every
    request needs the token printed in the URL. From a laptop, reach a GPU box
    through ssh instead of opening a port. JSON: /api/campaigns/<name>.

    \b
    Examples:
      ars dashboard
      ssh -L 8765:localhost:8765 gpu-box    # then open http://localhost:8765
      ars dashboard reports/auto_research --port 9000 --open
      ars dashboard --host 0.0.0.0          # prints a URL with its token
    """
    try:
        import jinja2  # noqa: F401
        import markdown_it  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn
    except ImportError:
        raise BadInput(f"ars dashboard needs the dashboard extra: {EXTRA}") from None
    from autoresearch_skills.dashboard import folders

    root = folder if folder is not None else folders.default_root()
    if not root.is_dir():
        raise BadInput(
            f"no campaigns folder at {root}: start a campaign with `ars campaign init`, or pass FOLDER"
        )
    loopback = host in LOOPBACK
    if not loopback and not token:
        token = secrets.token_urlsafe(18)
    listening = _listen(host, port)
    port = listening.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    click.echo(f"dashboard: {url}")
    click.echo(f"campaigns: {root.resolve()} ({len(folders.campaigns(root))} found)")
    if loopback:
        click.echo(f"from another machine: ssh -L {port}:localhost:{port} <this host>, then open {url}")
    sys.stdout.flush()
    if open_browser:
        threading.Timer(0.5, webbrowser.open, [url]).start()
    from autoresearch_skills.dashboard import server  # the engine and the report: after the URL is out

    app = server.create_app(root.resolve(), token=token, loopback=loopback)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, lifespan="off")
    uvicorn.Server(config).run(sockets=[listening])


def _listen(host: str, port: int) -> socket.socket:
    """The bound socket, or one line saying why not (a port in use, an address not of this machine)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise BadInput(
            f"cannot listen on {host}:{port}: {err.strerror}; pass another --port or --host"
        ) from None
    sock.listen(128)
    return sock


def main() -> None:
    run_cli(cli, prog_name="ars dashboard")


if __name__ == "__main__":
    main()
