"""Small NeMo Gym collections for the reward profiling tests."""

from __future__ import annotations

import json
from pathlib import Path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def input_row(task: int, rollout: int, agent: str = "math", **extra) -> dict:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": f"question {task}"}]},
        "agent_ref": {"type": "responses_api_agents", "name": agent},
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        **extra,
    }


def result_row(task: int, rollout: int, reward: float, output_tokens: int = 10, **extra) -> dict:
    return {
        "response": {
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "answer"}]}],
            "usage": {
                "input_tokens": 100,
                "input_tokens_details": {"cached_tokens": 40},
                "output_tokens": output_tokens,
                "total_tokens": 100 + output_tokens,
            },
        },
        "reward": reward,
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        **extra,
    }


def collection(folder: Path, inputs: list[dict], results: list[dict]) -> tuple[Path, Path]:
    return (
        write_jsonl(folder / "X_materialized_inputs.jsonl", inputs),
        write_jsonl(folder / "X.jsonl", results),
    )
