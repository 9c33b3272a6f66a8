"""Atomic whole-file writes: the file never goes missing, the backup holds the previous version."""

from __future__ import annotations

import threading
from pathlib import Path

from autoresearch_skills.atomicfile import write_text_atomic


def test_backup_keeps_the_previous_version(tmp_path: Path):
    target = tmp_path / "state.json"
    write_text_atomic(target, "one\n", backup=True)
    assert not (tmp_path / "state.json.bak").exists()
    write_text_atomic(target, "two\n", backup=True)
    assert target.read_text() == "two\n"
    assert (tmp_path / "state.json.bak").read_text() == "one\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.bak"]


def test_a_polling_reader_never_sees_the_file_missing_or_partial(tmp_path: Path):
    target = tmp_path / "state.json"
    payloads = [f"version {n}\n" * 200 for n in range(300)]
    write_text_atomic(target, payloads[0], backup=True)
    seen: list[str] = []
    failures: list[BaseException] = []
    done = threading.Event()

    def read_until_done():
        while not done.is_set():
            try:
                seen.append(target.read_text())
            except BaseException as err:  # noqa: BLE001 - recorded for the assertion below
                failures.append(err)
                return

    reader = threading.Thread(target=read_until_done)
    reader.start()
    for text in payloads[1:]:
        write_text_atomic(target, text, backup=True)
    done.set()
    reader.join()
    assert failures == []
    assert seen and set(seen) <= set(payloads)
    assert (tmp_path / "state.json.bak").read_text() == payloads[-2]
