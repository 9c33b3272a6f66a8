"""`ars dashboard` on real campaigns: campaigns made by `ars campaign run` on a tiny target in a
real git repository, the real server as `ars dashboard` starts it, its API over HTTP, its page in
Debian's chromium (Playwright drives it; the page tests skip, saying why, without them)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dashboard_helpers import (
    HOSTILE,
    Served,
    append_rows,
    ars_env,
    campaign_repo,
    chromium_path,
    write_campaign,
)

from autoresearch_skills import ledger
from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.dashboard import reading

try:
    from playwright.sync_api import expect
except ImportError:  # the page tests skip: the browser fixture says why
    expect = None

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")

STOPPED = "stop condition met: 3/3 attempted"  # the finished campaign's verdict
# Timings here are printed and bounded only to catch a hang: on a loaded CI machine they vary tenfold.
# The speed goals (start-up < 1 s, a new row on open pages < 2 s, 2,000 rows served < 1 s, flat
# memory) are measured by bench/bench_dashboard.py.
HANG_S = 30.0
HANG_MS = int(HANG_S * 1000)  # Playwright's timeouts


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished campaign (the baseline and 2 LR changes, the first described in hostile HTML and
    Markdown, and the reruns the noise rule asked for), made by `ars campaign run`; its repository."""
    base = tmp_path_factory.mktemp("finished")
    repo = campaign_repo(base / "project")
    config = write_campaign(repo, lrs=(0.02, 0.05))
    subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(config)],
                   cwd=repo, env=ars_env(base / "state"), check=True, capture_output=True, timeout=120)  # fmt: skip
    return repo


@pytest.fixture
def copy_of(finished: Path, tmp_path: Path):
    """A copy of the finished campaign's folder under a folder of its own, to change freely."""

    def make(name: str = "dash") -> Path:
        target = tmp_path / "campaigns" / name
        shutil.copytree(finished / CAMPAIGNS_DIR / "dash", target)
        return target

    return make


@pytest.fixture
def served(finished: Path, tmp_path: Path):
    started: list[Served] = []

    def start(*args: str, cwd: Path = finished, port: int = 0) -> Served:
        server = Served(cwd, *args, env=ars_env(tmp_path / "state"), port=port)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def rows_of(repo: Path) -> list[ledger.Row]:
    return ledger.read(repo / CAMPAIGNS_DIR / "dash" / "results.tsv")


def raw_get(port: int, path: str) -> tuple[int, str]:
    """GET `path` exactly as written (an HTTP library would fold `..` away before sending it)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.request("GET", path)
    answer = connection.getresponse()
    found = (answer.status, answer.read().decode(errors="replace"))
    connection.close()
    return found


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    path = chromium_path()
    if path is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    sync_api.expect.set_options(timeout=HANG_MS)  # every expect() without a timeout of its own
    with sync_api.sync_playwright() as playwright:
        found = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield found
        found.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.dialogs = []
    opened.on("dialog", lambda dialog: (opened.dialogs.append(dialog.message), dialog.dismiss()))
    yield opened
    context.close()


def screenshot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def ledger_rows(page) -> int:
    return page.locator("#ledger tr.row").count()


# ---------------------------------------------------------------- the command


def test_dashboard_prints_its_url_at_once_and_serves_the_current_campaign(served, finished: Path):
    server = served()
    printed = server.printed - server.started
    answer = httpx.get(server.base + "/", follow_redirects=True, timeout=HANG_S)
    answered = time.monotonic() - server.started
    assert answer.status_code == 200 and STOPPED in answer.text
    assert str(answer.url).endswith("/c/dash")
    print(
        f"ars dashboard: URL printed {printed:.2f}s and the page served {answered:.2f}s after it was started"
    )
    assert printed < HANG_S  # the goal (< 1 s) is bench/bench_dashboard.py's


def test_help_shows_an_example_and_ars_help_loads_no_web_library(finished: Path):
    helped = subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "dashboard", "--help"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "Examples:" in helped and "ssh -L 8765:localhost:8765 gpu-box" in helped
    probe = (
        "import sys\nfrom autoresearch_skills.cli import cli\n"
        "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('starlette', 'uvicorn', 'jinja2', 'markdown_it') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip().splitlines()[-1] == "[]"


def test_without_the_extra_it_names_the_install_command_and_exits_2(finished: Path, tmp_path: Path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "starlette.py").write_text("raise ImportError('No module named starlette')\n")
    result = subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "dashboard"], cwd=finished,
                            capture_output=True, text=True, env={**ars_env(tmp_path), "PYTHONPATH": str(shadow)})  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "Error: ars dashboard needs the dashboard extra: pip install 'autoresearch-skills[dashboard]'"
    ]


# ---------------------------------------------------------------- one source of facts


def test_the_api_holds_what_ars_campaign_status_json_prints_plus_the_rows(
    served, finished: Path, tmp_path: Path
):
    folder = finished / CAMPAIGNS_DIR / "dash"
    status = json.loads(subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "status", "--campaign", str(folder), "--json"],
        cwd=finished, capture_output=True, text=True, env=ars_env(tmp_path / "state"),
    ).stdout)  # fmt: skip
    server = served()
    facts = httpx.get(server.base + "/api/campaigns/dash", timeout=5).json()
    assert {key: facts[key] for key in status} == status
    assert [r["index"] for r in facts["rows"]] == [r.index for r in rows_of(finished)]
    assert HOSTILE in [r["description"] for r in facts["rows"]]
    assert all("holdout" not in r for r in facts["rows"])
    assert facts["best_experiment"] == status["best_row"]["index"]
    tree = json.loads(subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "tree", "--campaign", str(folder), "--json"],
        cwd=finished, capture_output=True, text=True, env=ars_env(tmp_path / "state"),
    ).stdout)  # fmt: skip
    assert facts["experiments"] == tree["experiments"]
    listed = httpx.get(server.base + "/api/campaigns", timeout=5).json()
    assert [(c["name"], c["verdict"]) for c in listed] == [("dash", status["verdict"])]


# ---------------------------------------------------------------- the page in a browser


def test_the_page_shows_the_rows_the_stop_line_and_a_hostile_description_as_text(
    served, page, finished: Path, tmp_path: Path
):
    rows = rows_of(finished)
    server = served()
    page.goto(server.url)
    page.wait_for_selector("#ledger tr.row")
    assert ledger_rows(page) == len(rows) > 3  # 3 experiments and the reruns the noise rule asked for
    assert STOPPED in page.inner_text("#head")
    assert page.locator("#progress svg .point").count() == len(rows)
    assert page.locator("#tree svg g.node").count() == 3
    assert page.locator("#timeline svg g.bar").count() == len(rows)
    hostile = next(n for n, r in enumerate(rows) if r.description == HOSTILE)
    description = page.locator("#ledger tr.row").nth(hostile).locator("td.desc").inner_text()
    assert description.startswith(HOSTILE)  # as written: no element made, no Markdown applied
    assert page.locator("img").count() == 0 and page.dialogs == []
    page.click("#ledger th:nth-child(3)")  # sort by the metric, best first
    values = [float(v) for v in page.locator("#ledger tr.row td:nth-child(3)").all_inner_texts() if v != "-"]
    assert values == sorted(values)
    screenshot(page, tmp_path, "dashboard-finished.png")


def test_a_campaign_running_in_tmux_shows_live_and_a_new_row_appears_without_a_reload(
    served, page, server, tmp_path: Path
):
    repo = campaign_repo(tmp_path / "project", sleep=0.3)  # 5 steps: 1.5 s a run
    config = write_campaign(repo, name="live", lrs=(0.02,), launcher="tmux", tmux_socket=server.name)
    loop = subprocess.Popen([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(config)],
                            cwd=repo, env=ars_env(tmp_path / "state"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        folder = repo / CAMPAIGNS_DIR / "live"
        deadline = time.monotonic() + 30
        while not (folder / "state.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        dashboard = served(cwd=repo)  # the repository's campaigns folder, by default
        page.goto(dashboard.url)
        expect(page.locator("#slots tr.slot")).to_have_count(1, timeout=HANG_MS)
        expect(page.locator("#logs pre")).to_contain_text("step 1", timeout=HANG_MS)  # the log, followed
        before = len(ledger.read(folder / "results.tsv"))
        while len(ledger.read(folder / "results.tsv")) == before:
            assert time.monotonic() < deadline + 30, "no run finished"
            time.sleep(0.02)
        written = time.monotonic()
        # no reload: an event; the goal (< 2 s) is bench/bench_dashboard.py's
        expect(page.locator("#ledger tr.row")).to_have_count(before + 1, timeout=HANG_MS)
        print(
            f"a new ledger row reached the open page {time.monotonic() - written:.2f}s after it was written"
        )
        expect(page.locator("#slots tr.slot")).to_have_count(1, timeout=HANG_MS)  # the next run
        expect(page.locator("#logs pre")).to_contain_text("step", timeout=HANG_MS)
        assert page.locator("#progress svg .point").count() >= before + 1
        assert page.locator("#timeline svg g.bar").count() >= before + 1
        assert page.locator("#tree svg g.node").count() >= 1
        screenshot(page, tmp_path, "dashboard-live.png")
        loop.wait(timeout=60)  # the campaign runs to its stop condition
        expect(page.locator("#head")).to_contain_text("stop condition met", timeout=HANG_MS)  # its end state
        expect(page.locator("#slots tr.slot")).to_have_count(0, timeout=HANG_MS)
        expect(page.locator("#ledger tr.row")).to_have_count(
            len(ledger.read(folder / "results.tsv")), timeout=HANG_MS
        )
        assert page.inner_text("#live") == "live" and page.dialogs == []
    finally:
        if loop.poll() is None:
            loop.send_signal(signal.SIGTERM)
        loop.wait(timeout=30)


def test_the_page_reconnects_after_the_server_restarts(served, page, copy_of, tmp_path: Path):
    folder = copy_of("again")
    rows = len(ledger.read(folder / "results.tsv"))
    first = served(str(folder.parent))
    page.goto(first.url)
    expect(page.locator("#live")).to_have_text("live")
    first.stop()
    expect(page.locator("#live")).to_have_text("reconnecting", timeout=HANG_MS)
    served(str(folder.parent), port=first.port)
    append_rows(folder / "results.tsv", 1, start=rows)
    expect(page.locator("#ledger tr.row")).to_have_count(rows + 1, timeout=HANG_MS)
    expect(page.locator("#live")).to_have_text("live")


def test_report_html_is_the_same_page_with_no_markdown_syntax_in_its_text(
    finished: Path, page, tmp_path: Path
):
    out = tmp_path / "report"
    subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "report", "dash", "-o", str(out)], cwd=finished,
                   check=True, capture_output=True, env=ars_env(tmp_path / "state"))  # fmt: skip
    html = (out / "report.html").read_text()
    assert "<script src" not in html and "<link" not in html  # self-contained: nothing to fetch
    page.goto((out / "report.html").as_uri())
    text = page.inner_text("body")
    shown = text.replace(HOSTILE, "")  # the ledger shows the description as written, its marks included
    leftover = [line for line in shown.splitlines() if "`" in line or "**" in line]
    assert leftover == []
    assert HOSTILE in text and page.dialogs == [] and page.locator("img[src=x]").count() == 0
    rows = len(rows_of(finished))
    assert (
        page.locator("#ledger tr.row").count() == rows
        and page.locator("#progress svg .point").count() == rows
    )
    assert page.locator("#report h2", has_text="All attempts").count() == 1
    assert page.locator("#report img[alt=progress]").count() == 1  # progress.png inline
    screenshot(page, tmp_path, "report-html.png")


# ---------------------------------------------------------------- safety


def test_a_non_loopback_bind_needs_the_token_on_every_request(served, tmp_path: Path):
    server = served("--host", "0.0.0.0")
    token = server.url.split("token=", 1)[1]
    assert len(token) >= 20
    base = f"http://127.0.0.1:{server.port}"
    for path in ("/", "/c/dash", "/api/campaigns", "/api/campaigns/dash", "/api/campaigns/dash/events"):
        assert httpx.get(base + path, timeout=5).status_code == 401, path
        assert httpx.get(base + path + "?token=wrong", timeout=5).status_code == 401, path
    assert httpx.get(f"{base}/api/campaigns/dash?token={token}", timeout=5).json()["name"] == "dash"
    bearer = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{base}/api/campaigns", headers=bearer, timeout=5).status_code == 200
    with httpx.stream("GET", f"{base}/api/campaigns/dash/events?token={token}", timeout=5) as events:
        assert events.status_code == 200
        assert next(line for line in events.iter_lines() if line.startswith("data: "))


def test_given_token_and_loopback_host_header_are_enforced(served):
    server = served("--token", "s3cret")
    assert server.url.endswith("?token=s3cret")
    assert httpx.get(server.base + "/api/campaigns", timeout=5).status_code == 401
    assert httpx.get(server.base + "/api/campaigns?token=s3cret", timeout=5).status_code == 200
    rebound = httpx.get(
        server.base + "/api/campaigns?token=s3cret", headers={"Host": "evil.example"}, timeout=5
    )
    assert rebound.status_code == 400  # a DNS name pointed at 127.0.0.1 reaches nothing


def test_nothing_outside_the_campaigns_is_served_and_nothing_is_written(served, copy_of, tmp_path: Path):
    folder = copy_of()
    server = served(str(folder.parent))
    for path in ("/c/..", "/c/..%2F..%2Fetc", "/api/campaigns/..%2Fcampaigns%2Fdash", "/api/campaigns/%2Fetc%2Fpasswd",
                 "/api/campaigns/dash/../../../../etc/passwd", "/c/dash/..%2F..%2F..%2Fetc%2Fpasswd"):  # fmt: skip
        status, body = raw_get(server.port, path)
        assert status == 404 and "root:" not in body, path
    assert httpx.post(server.base + "/api/campaigns/dash", timeout=5).status_code == 405
    outside = tmp_path / "secret.log"
    outside.write_text("password=hunter2\n")
    (folder / "runs" / "link.log").symlink_to(outside)
    for log in (
        str(outside),
        str(folder / "runs" / "link.log"),
        str(folder / "runs" / ".." / ".." / "secret.log"),
    ):
        tail = reading.log_tail(folder, log)
        assert tail.lines == [] and tail.refused.startswith("refused"), log
    inside = sorted((folder / "runs").glob("*/run.log"))[0]
    assert reading.log_tail(folder, str(inside)).lines[-1].startswith("val_bpb:")


def test_a_corrupt_campaign_folder_shows_a_clear_line_beside_the_others(served, copy_of, page):
    copy_of("dash")
    folder = copy_of("broken")
    (folder / "campaign.yaml").write_text("name: [unclosed\n")
    server = served(str(folder.parent))
    answer = httpx.get(server.base + "/api/campaigns/broken", timeout=5)
    assert answer.status_code == 500 and answer.json()["error"].startswith("campaign broken cannot be read:")
    listed = httpx.get(server.base + "/api/campaigns", timeout=5).json()
    assert [(c["name"], "error" in c) for c in listed] == [("broken", True), ("dash", False)]
    page.goto(server.base + "/c/broken")
    shown = page.inner_text("#head")
    assert shown.startswith("campaign broken cannot be read:") and "Traceback" not in page.content()
    page.click("nav.picker a:text('dash')")  # the campaign picker
    expect(page.locator("#head")).to_contain_text(STOPPED)


# ---------------------------------------------------------------- under load


def test_fifty_open_pages_all_get_a_new_row(served, copy_of):
    folder = copy_of("load")
    rows = len(ledger.read(folder / "results.tsv"))
    server = served(str(folder.parent))
    url = server.base + "/api/campaigns/load/events"

    async def follow(client: httpx.AsyncClient, ready: asyncio.Event, counted: list[int]) -> float:
        async with client.stream("GET", url) as events:
            first = True
            async for line in events.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if first:
                    first = False
                    counted.append(1)
                    if len(counted) == 50:
                        ready.set()
                    continue
                if f"idea {rows}" in json.loads(line[6:])["sections"].get("ledger", ""):
                    return time.monotonic()
        raise AssertionError("the stream ended")

    async def main() -> tuple[float, list[float]]:
        ready, counted = asyncio.Event(), []
        limits = httpx.Limits(max_connections=60)
        async with httpx.AsyncClient(timeout=HANG_S * 2, limits=limits) as client:
            pages = [asyncio.create_task(follow(client, ready, counted)) for _ in range(50)]
            await asyncio.wait_for(ready.wait(), HANG_S)
            written = time.monotonic()
            append_rows(folder / "results.tsv", 1, start=rows)
            return written, await asyncio.wait_for(asyncio.gather(*pages), HANG_S)

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # the browser's loop runs in this thread
        written, received = pool.submit(asyncio.run, main()).result()
    latest = max(received) - written
    print(
        f"50 event streams: all had the new row {latest:.2f}s after it was written; {time.monotonic() - started:.1f}s in all"
    )
    assert latest < HANG_S  # the goal (< 2 s) is bench/bench_dashboard.py's


def test_a_campaign_of_two_thousand_rows_serves_and_shows_every_row(served, copy_of, page, tmp_path: Path):
    folder = copy_of("big")
    rows = len(ledger.read(folder / "results.tsv"))
    append_rows(folder / "results.tsv", 2000 - rows, start=rows)
    server = served(str(folder.parent))
    timings = []
    for _ in range(2):  # the first may still share the machine with the server's own warm-up
        started = time.monotonic()
        answer = httpx.get(server.base + "/c/big", timeout=HANG_S)
        timings.append(time.monotonic() - started)
        assert answer.status_code == 200 and answer.text.count('<tr class="row') == 2000
    started = time.monotonic()
    page.goto(server.base + "/c/big", wait_until="load", timeout=HANG_MS)
    shown_in = time.monotonic() - started
    assert ledger_rows(page) == 2000
    print(
        f"2,000 rows: served in {timings[0]:.2f}s then {timings[1]:.2f}s; chromium loaded the page in {shown_in:.2f}s"
    )
    # the goals (second request < 1 s, chromium < 3 s) are bench/bench_dashboard.py's
    assert timings[1] < HANG_S and shown_in < HANG_S
