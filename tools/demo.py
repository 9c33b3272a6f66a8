"""`make demo`: a real research campaign on the tiny-lm target, start to finish, on a CPU.

Every step is an `ars` command a user could type, run as a subprocess and shown:
    ars init tiny-lm demo/run-<time>          a fresh git repo with the starter target
    ars memory start --goal ...               the session record
    ars campaign run campaign.yaml            baseline + queued hypotheses, in tmux, under timeouts
    ars report                                report.md, report.html, progress.png
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.resources import resource_dir

GOAL = "lower val_bpb of tiny-lm within its fixed time budget: baseline plus the queued hypotheses"


def step(title: str, args: list[str], cwd: Path, env: dict) -> None:
    print(f"\n$ ars {' '.join(args)}", flush=True)
    result = subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", *args], cwd=cwd, env=env)
    if result.returncode not in (0, 1):  # 1 is a verdict ("stop condition met"), not a failure
        sys.exit(f"demo: `{title}` failed with exit code {result.returncode}")


def main() -> None:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    root = Path(os.environ.get("ARS_DEMO_DIR", "demo")).resolve()
    scratch = root / f"run-{stamp}"
    socket = f"ars-demo-{stamp}"
    # `python train.py` in the campaign must find this environment's torch, also inside tmux.
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "")}
    env.setdefault("GIT_AUTHOR_NAME", "autoresearch-skills demo")
    env.setdefault("GIT_AUTHOR_EMAIL", "demo@localhost")
    env.setdefault("GIT_COMMITTER_NAME", env["GIT_AUTHOR_NAME"])
    env.setdefault("GIT_COMMITTER_EMAIL", env["GIT_AUTHOR_EMAIL"])
    root.mkdir(parents=True, exist_ok=True)

    step("init", ["init", "tiny-lm", str(scratch)], root, env)
    config = (resource_dir("templates") / "campaign.yaml").read_text()
    launcher = "tmux" if shutil.which("tmux") else "local"
    config = config.replace("launcher: tmux ", f"launcher: {launcher} ", 1)
    config += f"\ntmux_socket: {socket}        # the demo's private tmux server (tmux -L {socket} ls)\n"
    (scratch / "campaign.yaml").write_text(config)
    print(f"campaign file: {scratch / 'campaign.yaml'} (launcher: {launcher})")

    try:
        step("memory", ["memory", "start", "--goal", GOAL, "--skill", "auto-research"], scratch, env)
        step("campaign", ["campaign", "run", "campaign.yaml"], scratch, env)
        step("report", ["report"], scratch, env)
        step("status", ["campaign", "status"], scratch, env)
    finally:
        if launcher == "tmux":  # the demo's own server only; never the user's
            from autoresearch_skills.launch.tmuxcmd import Tmux

            Tmux(socket).kill_server()

    folder = scratch / CAMPAIGNS_DIR / "tiny-lm-demo"
    print("\nDone. Look at:")
    print(f"  ledger:  {folder / 'results.tsv'}")
    print(f"  report:  {folder / 'report.md'}  (and report.html)")
    print(f"  chart:   {folder / 'progress.png'}")
    print(f"  live:    ars dashboard {folder}   (http://127.0.0.1:8765; ssh -L 8765:localhost:8765)")
    print(f"  branches: git -C {scratch} branch --list 'autoresearch/*'")
    print(f"  memory:  ars memory resume   (run inside {scratch})")


if __name__ == "__main__":
    main()
