"""The llm policies (llm, llm_diff, hybrid) against a real HTTP server on loopback that speaks the
chat-completions protocol and answers from a script: real SDK calls, real `ars campaign run`s on a
fast fake target, real git repositories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, git, make_repo

from autoresearch_skills import ledger
from autoresearch_skills.campaign import llm, llm_endpoint, settings
from autoresearch_skills.campaign.policy_settings import PolicySettings
from autoresearch_skills.campaign.proposals import Rejected, make_policy
from autoresearch_skills.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]
KEY = f"sk-test-{uuid.uuid4().hex}"  # a key no file may ever hold

TRAIN = """\
import os, sys, time
LR = 0.01               # learning rate
WIDTH = 64              # model width
if WIDTH % 2:
    raise SystemExit("WIDTH must be even")
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1 + abs(WIDTH - 96) / 1000:.6f}")
"""

# WIDTH 64 -> 96; the hunk header miscounts its lines, as models do: the policy recounts them
DIFF_WIDER = """\
slug: wider
description: a wider model fits the data better
```diff
--- a/train.py
+++ b/train.py
@@ -2,3 +2,9 @@
 LR = 0.01               # learning rate
-WIDTH = 64              # model width
+WIDTH = 96              # model width
 if WIDTH % 2:
```
"""

DIFF_FROZEN = """\
slug: easier-eval
description: a kinder evaluation
```diff
--- a/prepare.py
+++ b/prepare.py
@@ -1 +1 @@
-DATA = 'frozen'
+DATA = 'tampered'
```
"""

DIFF_NO_PRINT = """\
slug: quiet
description: less output is faster
```diff
--- a/train.py
+++ b/train.py
@@ -5,3 +5,1 @@
     raise SystemExit("WIDTH must be even")
-print("---")
-print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1 + abs(WIDTH - 96) / 1000:.6f}")
```
"""

DIFF_STALE = """\
slug: lower-lr
description: a lower learning rate
```diff
--- a/train.py
+++ b/train.py
@@ -2,1 +2,1 @@
-LR = 0.5                # learning rate
+LR = 0.001              # learning rate
```
"""

# no context and a wrong line number: git refuses it as written; the policy places the hunk
DIFF_SYNTAX = """\
slug: broken
description: a typo
```diff
--- a/train.py
+++ b/train.py
@@ -7 +7 @@
-WIDTH = 64              # model width
+WIDTH = (64             # model width
```
"""

DIFF_LARGE = "slug: big\ndescription: many constants\n```diff\n--- a/train.py\n+++ b/train.py\n@@ -1,1 +1,6 @@\n import os, sys, time\n" + "".join(f"+X{n} = {n}\n" for n in range(5)) + "```\n"  # fmt: skip


def proposals(*items: dict) -> str:
    return json.dumps({"proposals": list(items)})


# ---------------------------------------------------------------- the fake model server


class FakeModel:
    """POST /v1/chat/completions answered from `script`: each item is the reply's text, or a dict
    {content, status, delay, headers, echo_key}; every request is kept in `requests`."""

    def __init__(self) -> None:
        self.script: list[str | dict] = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with model.lock:
                    model.requests.append(
                        {"path": self.path, "authorization": self.headers.get("Authorization"), "json": body}
                    )
                    item = model.script.pop(0) if model.script else {"status": 500}
                item = {"content": item} if isinstance(item, str) else item
                time.sleep(item.get("delay", 0))
                status = item.get("status", 200)
                if status == 200:
                    content = item["content"]
                    reply = {
                        "id": f"chatcmpl-{len(model.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 100 + len(json.dumps(body["messages"])) // 4,
                            "completion_tokens": len(content) // 4,
                            "total_tokens": 100 + len(json.dumps(body["messages"])) // 4 + len(content) // 4,
                        },
                    }
                else:
                    said = (
                        f"refused ({self.headers.get('Authorization')})" if item.get("echo_key") else "busy"
                    )
                    reply = {"error": {"message": said, "type": "server_error", "code": status}}
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in item.get("headers", {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting: the timeout under test

        return Handler

    def texts(self, n: int) -> str:
        """Everything request n (0-based) sent: the messages joined."""
        return "\n".join(m["content"] for m in self.requests[n]["json"]["messages"])


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeModel]:
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    server = FakeModel()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    files = {
        "train.py": TRAIN,
        "prepare.py": "DATA = 'frozen'\n",
        "program.md": "Lower val_bpb. Only train.py may change.\n",
    }
    return make_repo(tmp_path / "project", files)


ENV = {"OPENAI_API_KEY": KEY, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def write_campaign(repo: Path, model: FakeModel, policy: dict, stop: str, **extra) -> Path:
    config = {
        "name": "llm",
        "metric": "val_bpb",
        "direction": "min",
        "preset": "karpathy",
        "command": f"{sys.executable} train.py",
        "launcher": "local",
        "keep_rule": "noise",
        "stop": stop,
        "prefix": "autoresearch/t-llm",
        "baseline_repeats": 1,  # one run per commit: these tests are about the policy, not the noise
        "policy": {
            "mutable": ["train.py"],
            "frozen": ["prepare.py"],
            "model": "fake-coder",
            "base_url": model.url,
            **policy,
        },
        **extra,
    }
    path = repo / "campaign.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(repo: Path, campaign: Path) -> str:
    return ars(repo, "campaign", "run", str(campaign), env=ENV, timeout=180).stdout


def rows(repo: Path) -> list[ledger.Row]:
    return ledger.read(repo / "reports/auto_research/llm/results.tsv")


def calls(repo: Path) -> list[dict]:
    path = repo / "reports/auto_research/llm" / llm_endpoint.LOG_NAME
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_key_written_nowhere(repo: Path) -> None:
    """Neither the campaign folder, nor the repository, nor git's history holds the key."""
    for path in repo.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert KEY.encode() not in path.read_bytes(), f"the key is in {path}"
    history = subprocess.run(["git", "log", "--all", "-p"], cwd=repo, capture_output=True, text=True).stdout
    assert KEY not in history


# ---------------------------------------------------------------- llm: knob values


def test_llm_proposals_run_through_the_loop_and_later_requests_hold_the_history(repo: Path, model: FakeModel):
    model.script = [
        proposals({"slug": "higher-lr", "description": "LR looks low", "set": {"LR": 0.02}}),
        proposals({"slug": "odd-width", "description": "an odd width", "set": {"WIDTH": 63}}),
        proposals({"slug": "best-lr", "description": "closer to the optimum", "set": {"LR": 0.03}}),
    ]
    out = run(repo, write_campaign(repo, model, {"kind": "llm"}, stop="4 experiments"))
    table = rows(repo)
    assert [(Path(r.branch).name, r.status) for r in table] == [
        ("baseline", "keep"),
        ("higher-lr", "keep"),
        ("odd-width", "crash"),
        ("best-lr", "keep"),
    ]
    assert table[1].metric_value == pytest.approx(1.132) and table[3].metric_value == pytest.approx(1.032)
    assert table[1].description.startswith("set LR=0.02: LR looks low")
    assert "stop condition met" in out
    first = model.texts(0)
    assert "Lower val_bpb. Only train.py may change." in first  # the program
    assert "LR = 0.01" in first and "WIDTH = 64" in first  # no space: every knob and its value
    assert "#0 baseline: keep val_bpb=1.232000" in first
    third = model.texts(2)  # earlier metrics, verdicts and the crash's reason
    assert "higher-lr: keep val_bpb=1.132000" in third
    assert "odd-width: crash val_bpb=none" in third and "WIDTH must be even" in third
    assert "Best so far: #1 higher-lr" in third
    assert all(r["authorization"] == f"Bearer {KEY}" for r in model.requests)
    assert {r["path"] for r in model.requests} == {"/v1/chat/completions"}
    logged = calls(repo)
    assert [c["verdict"] for c in logged] == ["accepted"] * 3
    assert all(c["outcome"] == "ok" and c["model"] == "fake-coder" and c["retries"] == 0 for c in logged)
    assert all(c["prompt_tokens"] > 100 and c["completion_tokens"] > 0 for c in logged)
    assert logged[0]["proposals"] == ["higher-lr"] and logged[0]["mode"] == "parameters"
    assert_key_written_nowhere(repo)


def test_garbage_answers_are_fed_back_then_given_up_without_a_row(repo: Path, model: FakeModel):
    model.script = [
        {"status": 400, "echo_key": True},  # not retried; its message holds the key: masked
        "Sure! I would raise the learning rate a little.",
        proposals({"slug": "dropout", "description": "regularise", "set": {"DROPOUT": 0.1}}),
        proposals({"slug": "higher-lr", "description": "LR 0.01 -> 0.02", "set": {"LR": 0.02}}),
    ]
    space = {"LR": [0.02, 0.03], "WIDTH": [64, 96]}
    out = run(repo, write_campaign(repo, model, {"kind": "llm", "space": space}, stop="2 experiments"))
    table = rows(repo)
    assert [Path(r.branch).name for r in table] == [
        "baseline",
        "higher-lr",
    ]  # a refused proposal is no attempt
    assert "proposal given up after 3 tries; not an attempt, no row" in out
    assert "DROPOUT is not a knob you may set; `set` takes LR, WIDTH" in out
    assert "answered 400" in model.texts(1) and "Bearer ***" in model.texts(1)
    assert "the answer is not JSON" in model.texts(2)
    assert "raise the learning rate" in model.texts(2)  # the rejected answer goes back with its reason
    logged = calls(repo)
    assert [(c["outcome"], c["verdict"]) for c in logged] == [
        ("http_error", None),
        ("ok", "rejected"),
        ("ok", "rejected"),
        ("ok", "accepted"),
    ]
    assert logged[0]["status"] == 400 and logged[2]["correction"] is True
    assert_key_written_nowhere(repo)


def test_429_is_retried_and_a_timeout_is_fed_back(repo: Path, model: FakeModel):
    model.script = [
        {"status": 429, "headers": {"retry-after-ms": "20"}},
        proposals({"slug": "higher-lr", "description": "LR up", "set": {"LR": 0.02}}),
        {
            "delay": 2.5,
            "content": proposals({"slug": "late", "description": "too late", "set": {"LR": 0.03}}),
        },
        {
            "delay": 2.5,
            "content": proposals({"slug": "late", "description": "too late", "set": {"LR": 0.03}}),
        },
        proposals({"slug": "best-lr", "description": "LR to the optimum", "set": {"LR": 0.03}}),
    ]
    policy = {"kind": "llm", "request_timeout": 1, "request_retries": 1}
    out = run(repo, write_campaign(repo, model, policy, stop="3 experiments"))
    assert [Path(r.branch).name for r in rows(repo)] == ["baseline", "higher-lr", "best-lr"]
    assert "did not answer within 1 s (`request_timeout`) (2 tries)" in out
    logged = calls(repo)
    assert [(c["outcome"], c["status"], c["retries"], c["verdict"]) for c in logged] == [
        ("ok", 200, 1, "accepted"),
        ("timeout", None, 1, None),
        ("ok", 200, 0, "accepted"),
    ]
    assert logged[1]["latency_s"] >= 2.0 and "did not answer" in logged[1]["reason"]
    assert "The previous proposal was rejected: the model endpoint did not answer" in model.texts(4)


def test_parallel_slots_are_filled_from_one_call(repo: Path, model: FakeModel):
    model.script = [
        proposals(
            {"slug": "lr-a", "description": "LR up", "set": {"LR": 0.02}},
            {"slug": "lr-b", "description": "LR further up", "set": {"LR": 0.03}},
        )
    ]
    campaign = write_campaign(repo, model, {"kind": "llm"}, stop="3 experiments", parallel=2)
    run(repo, campaign)
    assert sorted(Path(r.branch).name for r in rows(repo)) == ["baseline", "lr-a", "lr-b"]
    assert len(model.requests) == 1
    assert "exactly 2 proposal(s)" in model.texts(0)
    assert calls(repo)[0]["asked"] == 2 and calls(repo)[0]["proposals"] == ["lr-a", "lr-b"]


def test_cached_proposals_are_handed_out_until_a_new_result_makes_them_stale(repo: Path, model: FakeModel):
    os.environ["OPENAI_API_KEY"] = KEY  # this test calls the policy in this process
    try:
        policy = make_policy(
            PolicySettings(kind="llm", model="m", base_url=model.url, mutable=["train.py"]), set()
        )
        model.script = [
            proposals(
                *(
                    {"slug": f"lr-{n}", "description": "d", "set": {"LR": lr}}
                    for n, lr in enumerate([0.02, 0.03, 0.04])
                )
            ),  # fmt: skip
            proposals({"slug": "wider", "description": "d", "set": {"WIDTH": 96}}),
        ]
        context = fake_context(repo, free_slots=3)
        assert policy.next(context).slug == "lr-0"
        assert policy.next(context).slug == "lr-1"
        assert len(model.requests) == 1
        context["ledger"] = [{"index": 1, "branch": "b/baseline", "status": "keep", "metric_value": 1.2}]
        assert policy.next({**context, "free_slots": 1}).slug == "wider"  # lr-2 was stale
        assert len(model.requests) == 2 and "exactly 1 proposal(s)" in model.texts(1)
    finally:
        del os.environ["OPENAI_API_KEY"]


def test_values_outside_the_space_repeats_and_no_ops_are_refused(repo: Path, model: FakeModel):
    os.environ["OPENAI_API_KEY"] = KEY
    try:
        config = {"kind": "llm", "model": "m", "base_url": model.url, "mutable": ["train.py"]}
        space = {"LR": {"log_uniform": [0.001, 0.1]}, "WIDTH": [64, 96]}
        policy = make_policy(PolicySettings.from_mapping({**config, "space": space}), set())
        context = fake_context(repo)
        context["ledger"] = [
            {"index": 2, "branch": "a/higher", "status": "keep", "description": "up", "knobs": '{"LR": 0.02}'}
        ]
        # a run in flight is known by its proposal's values, whatever its description says
        context["in_flight"] = [
            {"slug": "lr-b", "description": "[hybrid: ...] faster", "proposal": {"set": {"LR": 0.03}}}
        ]
        for answer, reason in [
            (
                proposals({"set": {"LR": 0.5}}),
                "LR=0.5 is outside its range: a number from 0.001 to 0.1 (log scale)",
            ),
            (proposals({"set": {"WIDTH": 80}}), "WIDTH=80 is outside its range: one of 64, 96"),
            (proposals({"set": {"LR": 0.02}}), "set LR=0.02 was already tried (#2 higher (keep))"),
            (proposals({"set": {"LR": 0.03}}), "set LR=0.03 was already tried (lr-b, running now)"),
            (proposals({"set": {"WIDTH": 64}}), "set WIDTH=64 changes nothing"),
            ('{"proposals": {"set": {}}}', "`proposals` must be a list"),
            ("", "the model answered nothing"),
        ]:
            model.script = [answer]
            with pytest.raises(Rejected, match=reason.replace("(", r"\(").replace(")", r"\)")):
                policy.next(context)
        model.script = ['<think>LR near 0.03?</think>```json\n{"proposals": []}\n```']
        assert policy.next(context) is None  # nothing more to propose: the policy is exhausted
    finally:
        del os.environ["OPENAI_API_KEY"]


def fake_context(repo: Path, free_slots: int = 1) -> dict:
    head = git(repo, "rev-parse", "HEAD")
    return {
        "campaign": "llm",
        "metric": "val_bpb",
        "direction": "min",
        "program": "Lower val_bpb.",
        "mutable_files": {"train.py": TRAIN},
        "frozen_files": ["prepare.py"],
        "ledger": [],
        "in_flight": [],
        "free_slots": free_slots,
        "parent_commit": head,
        "workdir": str(repo),
    }


# ---------------------------------------------------------------- llm_diff


def test_diffs_are_checked_and_every_rejection_is_fed_back(repo: Path, model: FakeModel):
    model.script = [DIFF_FROZEN, DIFF_NO_PRINT, DIFF_STALE, DIFF_SYNTAX, DIFF_LARGE, DIFF_WIDER]
    policy = {"kind": "llm_diff", "required_calls": ["print"], "max_diff_lines": 4}
    out = run(repo, write_campaign(repo, model, policy, stop="2 experiments"))
    table = rows(repo)
    assert [(Path(r.branch).name, r.status) for r in table] == [("baseline", "keep"), ("wider", "keep")]
    assert "proposal rejected: patch does not apply to the parent commit" in out
    assert table[1].metric_value == pytest.approx(1.2) and table[1].description.startswith("a wider model")
    assert (
        git(repo, "show", f"{table[1].commit}:train.py") == TRAIN.replace("WIDTH = 64", "WIDTH = 96").strip()
    )
    reasons = [
        "prepare.py is frozen: proposals may only change train.py",
        "the diff removes every call to print() from train.py",
        None,  # the third rejection gives the proposal up: no row, the next one starts afresh
        "train.py does not compile after the diff: '(' was never closed at line 3",
        "the diff changes 5 lines, more than `max_diff_lines` (4)",
    ]
    for n, reason in enumerate(reasons):
        if reason:
            assert reason in model.texts(n + 1), reason
    assert "DATA = 'tampered'" in model.texts(1)  # the rejected diff itself goes back
    assert "Keep every call to print." in model.texts(0)
    assert [c["verdict"] for c in calls(repo)] == ["rejected"] * 5 + ["accepted"]
    assert all(c["mode"] == "diff" for c in calls(repo))


def test_a_diff_identical_to_a_tried_change_is_refused_before_a_branch_exists(repo: Path, model: FakeModel):
    # WIDTH 64 -> 32 is worse (discarded, so the baseline stays the parent); the same change under
    # another name comes back, is refused with the earlier attempt named, and the model moves on
    narrower = DIFF_WIDER.replace("slug: wider", "slug: narrower").replace("WIDTH = 96 ", "WIDTH = 32 ")
    again = narrower.replace("slug: narrower", "slug: slimmer")
    model.script = [narrower, again, DIFF_WIDER]
    out = run(repo, write_campaign(repo, model, {"kind": "llm_diff"}, stop="3 experiments"))
    ideas = [(Path(r.branch).name, r.status) for r in rows(repo) if not r.rerun_of]
    assert ideas == [("baseline", "keep"), ("narrower", "discard"), ("wider", "keep")]
    said = "already tried as #1 narrower: discard 1.264, from the same parent with the same change"
    assert f"proposal rejected: {said}" in out and said in model.texts(2)
    branches = git(repo, "branch", "--list", "*slimmer*")
    assert branches == ""  # nothing was created for the repeat


def test_a_diff_may_not_touch_a_file_outside_the_mutable_list(repo: Path, model: FakeModel):
    os.environ["OPENAI_API_KEY"] = KEY
    try:
        policy = make_policy(
            PolicySettings(kind="llm_diff", model="m", base_url=model.url, mutable=["train.py"]), set()
        )
        model.script = [DIFF_FROZEN.replace("prepare.py", "program.md")]
        context = {**fake_context(repo), "frozen_files": []}
        with pytest.raises(Rejected, match="program.md is not a mutable file"):
            policy.next(context)
    finally:
        del os.environ["OPENAI_API_KEY"]


# ---------------------------------------------------------------- hybrid


def test_hybrid_turns_to_diffs_on_a_stall_and_back_after_rejected_diffs(repo: Path, model: FakeModel):
    ars(repo, "memory", "start", "--goal", "lower val_bpb")
    model.script = [
        proposals({"slug": "lr-down", "description": "lower", "set": {"LR": 0.005}}),
        proposals({"slug": "lr-further-down", "description": "lower still", "set": {"LR": 0.004}}),
        DIFF_WIDER,
        DIFF_FROZEN,
        DIFF_FROZEN,
        proposals({"slug": "lr-up", "description": "higher", "set": {"LR": 0.02}}),
    ]
    policy = {"kind": "hybrid", "stall_threshold": 2, "max_rejected_diffs": 2, "required_calls": ["print"]}
    run(repo, write_campaign(repo, model, policy, stop="5 experiments"))
    table = rows(repo)
    assert [(Path(r.branch).name, r.status) for r in table] == [
        ("baseline", "keep"),
        ("lr-down", "discard"),
        ("lr-further-down", "discard"),
        ("wider", "keep"),
        ("lr-up", "keep"),
    ]
    assert [r.mode for r in table] == ["", "", "", "diff", "parameters"]  # the switches, as data
    assert table[3].description.startswith("[hybrid: diffs after 2 runs without improvement] a wider model")
    assert table[4].description.startswith("[hybrid: parameters again after 2 rejected diffs] set LR=0.02")
    assert [c["mode"] for c in calls(repo)] == ["parameters"] * 2 + ["diff"] * 3 + ["parameters"]
    assert "unified diff" in model.texts(2) and "unified diff" not in model.texts(5)
    assert "The previous proposal was rejected" not in model.texts(5)  # a diff's reason is no use to knobs
    timeline = next((repo / "session").glob("*/timeline.md")).read_text()
    assert "hybrid policy turns to diffs after 2 runs without improvement" in timeline
    assert "hybrid policy turns to parameters again after 2 rejected diffs" in timeline


def test_hybrid_after_a_resume_takes_up_the_mode_its_last_switch_wrote_in_the_ledger(
    repo: Path, model: FakeModel
):
    def row(index: int, description: str, value: float, mode: str = "") -> dict:
        status = "keep" if index == 0 else "discard"
        return {"index": index, "status": status, "metric_value": value, "commit": f"c{index}",
                "rerun_of": "", "description": description, "branch": f"x/r{index}", "mode": mode}  # fmt: skip

    stalled = [row(0, "baseline", 1.2), row(1, "set LR=0.005", 1.3), row(2, "set LR=0.004", 1.3)]
    diffs = [*stalled, row(3, "[hybrid: diffs after 2 runs without improvement] a wider model", 1.3, "diff")]
    back = [
        *diffs,
        row(4, "[hybrid: parameters again after 2 rejected diffs] set LR=0.02", 1.3, "parameters"),
    ]
    assert llm.hybrid_mode(stalled) == (llm.PARAMETERS, 0)
    assert llm.hybrid_mode(diffs) == (llm.DIFF, 0)
    assert llm.hybrid_mode(back) == (llm.PARAMETERS, 4)
    # the mode is the column's, whatever a description says
    reworded = [*stalled, row(3, "a wider model (the policy turned to diffs)", 1.3, "diff")]
    assert llm.hybrid_mode(reworded) == (llm.DIFF, 0)
    assert llm.hybrid_mode([*stalled, row(3, "[hybrid: diffs after 9 runs] x", 1.3)]) == (llm.PARAMETERS, 0)
    # the release before the `mode` column said a switch in the description: the ledger's reader reads it
    older = repo / "older.tsv"
    older.write_text("\t".join(ledger.BEFORE_CAUSE) + "\n")
    for r in [*stalled, {**diffs[3], "mode": ""}]:
        ledger.append(older, ledger.make_row(r))
    assert llm.hybrid_mode([r.to_dict() for r in ledger.read(older)]) == (llm.DIFF, 0)

    os.environ["OPENAI_API_KEY"] = KEY
    try:
        config = PolicySettings(
            kind="hybrid", model="m", base_url=model.url, mutable=["train.py"], stall_threshold=2
        )
        model.script = [DIFF_WIDER]  # a fresh policy (the resumed loop's) keeps proposing diffs
        proposal = make_policy(config, set()).next({**fake_context(repo), "ledger": diffs})
        assert proposal is not None and proposal.slug == "wider" and "[hybrid:" not in proposal.description
        assert "unified diff" in model.texts(0)

        # turned back to knob values at row 4: one row since is no stall, whatever came before
        model.script = [proposals({"slug": "lr-up", "description": "higher", "set": {"LR": 0.02}})]
        proposal = make_policy(config, set()).next({**fake_context(repo), "ledger": back})
        assert proposal is not None and proposal.slug == "lr-up" and "unified diff" not in model.texts(1)
    finally:
        del os.environ["OPENAI_API_KEY"]


def test_the_stall_counts_the_rows_since_the_best_commits_last_run():
    def row(index: int, status: str, value: float, commit: str, rerun_of: str = "") -> dict:
        return {
            "index": index,
            "status": status,
            "metric_value": value,
            "commit": commit,
            "rerun_of": rerun_of,
        }

    table = [row(1, "keep", 2.0, "a"), row(2, "keep", 1.5, "b"), row(3, "keep", 1.5, "b", "2"), row(4, "discard", 1.9, "c")]  # fmt: skip
    assert llm.runs_without_improvement(table, "min") == 1
    assert llm.runs_without_improvement([*table, row(5, "crash", 0, "d")], "min") == 2
    assert llm.runs_without_improvement([*table, row(5, "crash", 0, "d")], "min", after=4) == 1


# ---------------------------------------------------------------- the campaign file


@pytest.mark.parametrize("template", ["campaign-llm.yaml", "campaign-llm-diff.yaml", "campaign-hybrid.yaml"])
def test_the_templates_validate_on_the_tiny_lm_target(tmp_path: Path, template: str):
    target = ROOT / "templates" / "targets" / "tiny-lm"
    files = {p.name: p.read_text() for p in target.iterdir() if p.is_file()}
    repo = make_repo(tmp_path / "tiny", files)
    (repo / "campaign.yaml").write_text((ROOT / "templates" / template).read_text())
    result = ars(repo, "campaign", "validate", "campaign.yaml", env={"OPENAI_API_KEY": "x"})
    assert result.stdout.startswith("ok: campaign.yaml (") and result.stderr == ""
    without = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    missing = subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "validate", "campaign.yaml"],
        cwd=repo, capture_output=True, text=True, env=without,
    )  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        "campaign.yaml: the environment variable OPENAI_API_KEY (`policy.api_key_env`) is not set: export the "
        "endpoint's key in it before the campaign starts (any value for a server without authentication, "
        "e.g. vLLM or Ollama)"
    ]


def test_validate_names_each_endpoint_problem(repo: Path):
    config = {
        "name": "llm", "metric": "val_bpb", "direction": "min", "command": "python3 train.py",
        "launcher": "local", "keep_rule": "noise", "stop": "2 experiments",
        "policy": {"kind": "llm_diff", "base_url": "localhost:8000", "api_key_env": KEY, "mutable": ["train.py"],
                   "space": {"LR": [0.02], "DEPTH": [2]}, "required_calls": ["evaluate"]},
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    result = ars(repo, "campaign", "validate", "campaign.yaml", code=2)
    lines = result.stderr.splitlines()
    assert any("`policy.model` is required" in line for line in lines)
    assert any("`policy.base_url` must be an http(s) URL" in line for line in lines)
    assert any("`policy.api_key_env` must name an environment variable" in line for line in lines)
    assert any("policy.space: train.py has no knob DEPTH" in line for line in lines)
    assert KEY not in result.stderr + result.stdout  # a key pasted as the name is never repeated


def test_a_missing_key_refuses_the_run_before_anything_starts(repo: Path, model: FakeModel):
    campaign = write_campaign(repo, model, {"kind": "llm"}, stop="2 experiments")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(campaign)],
        cwd=repo, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "OPENAI_API_KEY" in result.stderr
    assert not (repo / "reports/auto_research/llm/results.tsv").exists() or rows(repo) == []
    assert model.requests == []


def test_make_refuses_settings_it_cannot_use():
    with pytest.raises(BadInput, match="`policy.model` is required"):
        llm.make(PolicySettings(kind="llm", mutable=["train.py"]), set())
    with pytest.raises(BadInput, match=r"`policy.space.LR`: use a list of values"):
        llm.make(PolicySettings(kind="llm", model="m", mutable=["train.py"], space={"LR": 0.1}), set())


def test_the_declared_defaults_are_the_ones_the_policies_apply():
    declared = settings.POLICY
    policy = llm.LlmPolicy(PolicySettings(kind="hybrid", model="m", mutable=["train.py"]), set())
    endpoint = policy.endpoint
    assert endpoint.api_key_env == declared["api_key_env"].default == "OPENAI_API_KEY"
    assert endpoint.request_timeout == declared["request_timeout"].default
    assert endpoint.request_retries == declared["request_retries"].default
    assert (endpoint.base_url, endpoint.temperature) == (None, None)
    assert policy.max_diff_lines == declared["max_diff_lines"].default
    assert policy.stall_threshold == declared["stall_threshold"].default
    assert policy.max_rejected_diffs == declared["max_rejected_diffs"].default
    assert set(llm.KINDS) <= set(declared["kind"].kind.choices())


def test_the_call_log_format_is_documented():
    documented = llm_endpoint.__doc__
    line = json.loads(llm_endpoint.Call("t", "llm", "parameters", 1, False, "m").line())
    assert all(f"\n    {name} " in documented for name in line)


def test_a_hunk_with_wrong_line_numbers_is_placed_where_its_lines_match():
    hunk = "--- a/train.py\n+++ b/train.py\n@@ -40,1 +40,1 @@\n-WIDTH = 64              # model width\n+WIDTH = 96              # model width\n"  # fmt: skip
    rebuilt = llm.rebuild_patch(llm.normalize_patch(hunk), {"train.py": TRAIN}.get)
    assert "@@ -1,6 +1,6 @@\n import os, sys, time\n LR = 0.01" in rebuilt
    assert "-WIDTH = 64              # model width\n+WIDTH = 96              # model width\n" in rebuilt
    unplaced = hunk.replace("WIDTH = 64 ", "WIDTH = 65 ")
    assert llm.rebuild_patch(llm.normalize_patch(unplaced), {"train.py": TRAIN}.get) == llm.normalize_patch(
        unplaced
    )
