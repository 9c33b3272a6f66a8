"""The anomaly catalogue on realistic log excerpts, and incremental scanning of a growing log."""

from __future__ import annotations

import os
import re
import sys
import time

import pytest

from autoresearch_skills.anomalies import (
    CATALOGUE,
    KINDS,
    FirstStepWatch,
    LogScanner,
    StallWatch,
    classify,
    scan_text,
)

TRACEBACK_LOG = """\
step 41 | loss 2.3104 | lr 3.0e-04 | 812 ms
step 42 | loss 2.3087 | lr 3.0e-04 | 809 ms
Traceback (most recent call last):
  File "/home/user/proj/train.py", line 212, in <module>
    main()
  File "/home/user/proj/train.py", line 198, in main
    batch = next(loader)
            ^^^^^^^^^^^^
  File "/home/user/proj/data.py", line 57, in __next__
    return self.tokens[self.pos : self.pos + self.block]
           ~~~~~~~~~~~^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
KeyError: 'input_ids'
"""

CUDA_OOM_LOG = """\
[2025-03-14 02:11:07] Epoch 0 step 120 loss=1.982
Traceback (most recent call last):
  File "train.py", line 301, in <module>
    loss.backward()
  File "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py", line 581, in backward
    torch.autograd.backward(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of \
79.10 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB memory in use. \
Of the allocated memory 75.51 GiB is allocated by PyTorch, and 1.92 GiB is reserved by PyTorch but unallocated.
"""

NCCL_TIMEOUT_LOG = """\
(WorkerDict pid=48211) step:118 - actor/pg_loss:0.0123 - actor/kl_loss:0.0011
[rank3]:[E314 02:41:55.182745944 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation \
timeout: WorkNCCL(SeqNum=20518, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for \
600049 milliseconds before timing out.
[rank3]:[E314 02:41:55.183021316 ProcessGroupNCCL.cpp:1785] [PG 0 (default_pg) Rank 3] Exception (either \
an error before or watchdog timeout) detected by watchdog at work: 20518, last enqueued NCCL work: 20518.
"""

NCCL_ERROR_LOG = """\
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, \
unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
"""

NAN_LOGS = [
    "step 1200 | loss nan | lr 6.0e-04 | 805 ms",  # the "loss nan" form some loops print
    "iter 1200: loss: nan, time 805.12ms",
    "step:57 - actor/pg_loss:nan - actor/kl_loss:0.0013 - critic/score/mean:0.41",
    "{'loss': nan, 'grad_norm': nan, 'learning_rate': 1.9e-05, 'epoch': 0.42}",
    "train/loss=inf val/loss=3.21",
    "Epoch 3: loss = tensor(nan, device='cuda:0', grad_fn=<NllLossBackward0>)",
    "WARNING: non-finite loss, ending training",
]

KILLED_LOGS = [
    "Killed",
    "train.sh: line 4: 183027 Killed                  python train.py --config big.yaml",
    "torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 4121 closing signal SIGKILL",
    "[2025-03-14 03:02:11] Out of memory: Killed process 183027 (python) total-vm:412345678kB",
    "subprocess.CalledProcessError: Command '['python', 'worker.py']' died with <Signals.SIGKILL: 9>.",
]

DISK_FULL_LOGS = [
    "OSError: [Errno 28] No space left on device: '/ckpt/step_4000/model.safetensors'",
    "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1234 vs 1200 ... "
    "PytorchStreamWriter failed writing file data/12: file write failed (Disk quota exceeded)",
]

CUDA_ERROR_LOG = (
    "RuntimeError: CUDA error: device-side assert triggered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect.\n"
)

NATIVE_CRASH_LOG = (
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n"
    "run.sh: line 3:  9123 Segmentation fault      (core dumped) python train.py\n"
)

HEALTHY_LOG = """\
Loading checkpoint shards: 100%|##########| 4/4 [00:03<00:00,  1.21it/s]
step 10 | loss 4.1023 | lr 1.0e-04 | tokens/s 51234
step 20 | loss 3.8871 | lr 2.0e-04 | tokens/s 51108
NCCL INFO Channel 00/02 :    0   1   2   3
nan_policy: omit   inference_mode: true   loss_scale: 65536.0
Saving checkpoint to /ckpt/step_20 (killed_runs=0)
val_bpb:          0.997900
peak_vram_mb:     45060.2
"""


def test_every_kind_has_a_diagnosis_and_a_fix():
    assert {kind.name for kind in KINDS} == {
        "traceback", "cuda_oom", "nccl", "cuda_error", "nan_loss", "killed", "disk_full",
        "native_crash", "divergence", "stall", "first_step_timeout",
    }  # fmt: skip
    for kind in KINDS:
        assert kind.diagnosis.endswith(".") and len(kind.diagnosis) < 200
        assert kind.fix.endswith(".")


def test_prefilter_keywords_let_every_matching_line_through():
    lines = [
        *NAN_LOGS, *KILLED_LOGS, *DISK_FULL_LOGS,
        *(CUDA_OOM_LOG + NCCL_TIMEOUT_LOG + NCCL_ERROR_LOG + CUDA_ERROR_LOG + NATIVE_CRASH_LOG).splitlines(),
    ]  # fmt: skip
    for line in lines:
        first = next((kind for kind in KINDS if kind.pattern is not None and kind.pattern.search(line)), None)
        assert classify(line) is first, line
    assert all(kind.keywords for kind in KINDS if kind.pattern is not None)


def test_traceback_reports_the_exception_line():
    found = scan_text(TRACEBACK_LOG)
    assert list(found) == ["traceback"]
    assert found["traceback"].text == "KeyError: 'input_ids'"
    assert found["traceback"].line_no == 12
    assert found["traceback"].fix == CATALOGUE["traceback"].fix


def test_cuda_oom_is_named_with_its_traceback():
    found = scan_text(CUDA_OOM_LOG)
    assert set(found) == {"cuda_oom", "traceback"}
    assert found["cuda_oom"].text.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert found["traceback"].text.startswith("torch.OutOfMemoryError")
    assert "batch" in found["cuda_oom"].fix


@pytest.mark.parametrize("log", [NCCL_TIMEOUT_LOG, NCCL_ERROR_LOG])
def test_nccl_timeout_and_error(log):
    found = scan_text(log)
    assert "nccl" in found
    assert "NCCL_DEBUG=INFO" in found["nccl"].fix


@pytest.mark.parametrize("line", NAN_LOGS)
def test_nan_or_inf_loss(line):
    assert classify(line) is CATALOGUE["nan_loss"]


@pytest.mark.parametrize("line", KILLED_LOGS)
def test_killed_by_the_host(line):
    assert classify(line) is CATALOGUE["killed"]


@pytest.mark.parametrize("line", DISK_FULL_LOGS)
def test_disk_full(line):
    assert classify(line) is CATALOGUE["disk_full"]


def test_cuda_error_and_native_crash():
    assert set(scan_text(CUDA_ERROR_LOG)) == {"cuda_error"}
    assert (
        classify("RuntimeError: CUDA driver version is insufficient for CUDA runtime version").name
        == "cuda_error"
    )
    found = scan_text(NATIVE_CRASH_LOG)
    assert set(found) == {"native_crash"} and found["native_crash"].count == 2
    assert "shm" in found["native_crash"].fix


def test_healthy_log_has_no_anomalies():
    assert scan_text(HEALTHY_LOG) == {}


def test_repeated_nan_is_one_anomaly_with_a_count():
    log = "".join(f"step {i} | loss nan\n" for i in range(1, 501))
    found = scan_text(log)
    assert found["nan_loss"].count == 500
    assert found["nan_loss"].line_no == 1


def test_multi_rank_traceback_with_prefixes_and_interleaved_output():
    log = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/work/train.py", line 88, in <module>\n'
        "[rank1]: step 12 loss 2.01\n"
        "[rank0]:     trainer.fit()\n"
        "[rank0]: ValueError: expected sequence length 2048, got 4096\n"
    )
    found = scan_text(log)
    assert found["traceback"].text == "ValueError: expected sequence length 2048, got 4096"
    assert found["traceback"].line_no == 5


def test_traceback_cut_off_before_the_exception_is_still_reported():
    found = scan_text('Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n')
    assert found["traceback"].text.startswith("Traceback (most recent call last):")
    assert found["traceback"].line_no == 1


def test_scanner_reads_only_new_bytes(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("step 1 | loss 2.5\n")
    scanner = LogScanner(log)
    assert scanner.poll() == []
    consumed = scanner.offset
    assert consumed == log.stat().st_size

    with log.open("a") as handle:
        handle.write("step 2 | loss nan\nstep 3 | lo")  # the last line is still being written
    new = scanner.poll()
    assert [a.kind for a in new] == ["nan_loss"] and new[0].line_no == 2
    assert scanner.offset == log.stat().st_size  # advanced by exactly what was appended

    with log.open("a") as handle:
        handle.write("ss nan\nOSError: [Errno 28] No space left on device\n")
    new = scanner.poll()
    assert [a.kind for a in new] == ["disk_full"]  # nan_loss is not new, only counted
    assert scanner.found["nan_loss"].count == 2
    assert scanner.found["disk_full"].line_no == 4
    assert scanner.poll() == []  # nothing appended, nothing reported


def test_scanner_detects_a_line_split_across_polls(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of")
    scanner = LogScanner(log)
    assert scanner.poll() == []
    with log.open("a") as handle:
        handle.write(" memory. Tried to allocate 20.00 MiB\n")
    assert [a.kind for a in scanner.poll()] == ["cuda_oom"]


def test_last_line_without_newline_is_scanned_when_the_run_ends(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("step 1\nKilled")
    scanner = LogScanner(log)
    assert scanner.poll() == []
    assert [a.kind for a in scanner.poll(final=True)] == ["killed"]


def test_truncated_log_is_rescanned_from_the_start(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("step 1 | loss 2.0\n" * 100)
    scanner = LogScanner(log)
    scanner.poll()
    log.write_text("Killed\n")  # a rerun overwrote the log
    assert [a.kind for a in scanner.poll()] == ["killed"]
    assert scanner.found["killed"].line_no == 1


def test_progress_bar_redraws_are_scanned_as_they_complete(tmp_path):
    # karpathy's loop redraws one terminal line per step with \r and never prints a newline.
    log = tmp_path / "run.log"
    log.write_text(
        "\rstep 00001 (0.1%) | loss: 3.218 | dt: 812ms\rstep 00002 (0.2%) | loss: nan | dt: 809ms\rstep 0"
    )
    scanner = LogScanner(log)
    new = scanner.poll()
    assert [a.kind for a in new] == ["nan_loss"] and new[0].line_no == 1
    assert new[0].text == "step 00002 (0.2%) | loss: nan | dt: 809ms"


def test_line_numbers_count_newlines_not_redraws(tmp_path):
    bar = "".join(f"\r{i}%|###| {i}/100 [00:0{i % 10}<00:10]" for i in range(100))
    log = tmp_path / "run.log"
    log.write_text(bar + "\n" + "step 1 | loss inf\n")
    scanner = LogScanner(log)
    assert [a.kind for a in scanner.poll()] == ["nan_loss"]
    assert scanner.found["nan_loss"].line_no == 2


def test_first_step_pattern_is_recorded_once(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("loading model\nstep:1 - actor/kl_loss:0.001\nstep:2 - actor/kl_loss:0.002\n")
    scanner = LogScanner(log, first_step=re.compile(r"actor/kl_loss:"))
    scanner.poll()
    assert scanner.first_step_line == 2 and scanner.first_step_at is not None


def test_colour_codes_do_not_hide_anomalies():
    log = (
        "\x1b[1;31mTraceback (most recent call last):\x1b[0m\n"
        '\x1b[33m  File "train.py", line 9, in <module>\x1b[0m\n'
        "\x1b[1;35mValueError\x1b[0m: \x1b[35mbad shape\x1b[0m\n"
        "\x1b[31mKilled\x1b[0m\n"
    )
    found = scan_text(log)
    assert found["traceback"].text == "ValueError: bad shape"
    assert found["killed"].line_no == 4


def test_idle_time_starts_from_the_logs_last_write(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("step 1\n")
    hour_ago = time.time() - 3600
    os.utime(log, (hour_ago, hour_ago))
    scanner = LogScanner(log)
    scanner.poll()
    assert scanner.idle_seconds > 3500
    with log.open("a") as handle:
        handle.write("step 2\n")
    scanner.poll()
    assert scanner.idle_seconds < 60


def test_a_stall_is_reported_once_per_silence_and_again_after_output_resumes():
    # `ars watch` and a campaign's run watcher both ask this, with the seconds since the last output.
    watch = StallWatch(after=60.0)
    assert [watch.begins(idle) for idle in (10, 59.9, 60, 61, 300)] == [False, False, True, False, False]
    assert [watch.begins(idle) for idle in (0.5, 60)] == [False, True]  # output came: a new episode
    assert not StallWatch(after=None).begins(10**6)  # stall detection off


def test_a_missing_first_step_is_reported_once_and_a_seen_one_never():
    late = FirstStepWatch(limit=20.0)
    assert [late.overdue(waited, seen=False) for waited in (5, 19.9, 20, 40)] == [False, False, True, False]
    seen = FirstStepWatch(limit=20.0)
    assert not seen.overdue(3, seen=True) and not seen.overdue(60, seen=False)


def test_our_own_timeout_notice_is_not_an_anomaly(tmp_path):
    """A real run under the local launcher's timeout: its `[ars] timeout ... SIGKILL` notice and
    what the run prints while it is stopped are ours, not an OOM kill or a crash."""
    from autoresearch_skills.launch import get_launcher
    from autoresearch_skills.launch.base import RunSpec

    script = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        "    print('Killed'); raise RuntimeError('stopped from outside')\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('step 1 loss 2.5', flush=True)\n"
        "time.sleep(60)\n"
    )
    local = get_launcher("local")
    log = tmp_path / "run.log"
    run = local.start(RunSpec(command=[sys.executable, "-c", script], log_path=log, timeout=1.5, grace=2))
    state = local.wait(run, 30)
    assert state.name == "timeout"
    text = log.read_text()
    assert "[ars] timeout after" in text and "SIGKILL" in text and "RuntimeError" in text
    scanner = LogScanner(log)
    assert scanner.poll(final=True) == []
    assert scanner.found == {}


def test_our_own_cancel_and_supervisor_notices_are_skipped_but_the_runs_lines_are_not():
    log = (
        "step 1 loss 2.5\n"
        "CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "\n[ars] supervisor error: OSError(28, 'No space left on device')\n"
        "Traceback (most recent call last):\n"
        '  File "supervise.py", line 9, in main\n'
        "OSError: [Errno 28] No space left on device\n"
        "\n"
        "Segmentation fault (core dumped)\n"
        "\n[ars] cancelled: SIGTERM (`ars cancel` or a kill): stopping the process tree "
        "(SIGTERM, then SIGKILL after 10s)\n"
        "Killed\n"
    )
    assert set(scan_text(log)) == {"cuda_oom", "native_crash"}


@pytest.mark.parametrize(
    "curve, direction, diverged_",
    [
        ([5.0, 3.0, 2.0, 1.5, 6.0, 7.5, 9.0], "min", True),
        ([5.0, 3.0, 2.0, 1.5, 6.0, 1.4, 9.0], "min", False),  # came back below its start in between
        ([5.0, 5.1, 5.2, 5.3, 5.4, 5.5], "min", False),  # never improved: a slow start
        ([0.1, 0.5, 0.7, 0.05, 0.04, 0.02], "max", True),  # an accuracy that collapsed
        ([5.0, 2.0, 6.0], "min", False),  # too few points to tell
    ],
)
def test_divergence_needs_a_clear_improvement_then_a_sustained_return_past_the_start(
    curve, direction, diverged_
):
    from autoresearch_skills.anomalies import diverged

    assert (diverged(list(enumerate(curve)), direction) is not None) is diverged_


HEALTHY_LINE = "step {i} | actor/pg_loss: 0.0123 | critic/score/mean: 0.41 | response_length/mean: 512.3\n"


def _big_log(tmp_path, trouble: dict[int, str], lines: int = 40_000):
    """A log of several MB, healthy except the given lines (line number -> text)."""
    log = tmp_path / "run.log"
    log.write_text("".join(trouble.get(i, HEALTHY_LINE.format(i=i)) for i in range(1, lines + 1)))
    return log


def test_a_big_log_read_in_one_poll_finds_every_kind_on_its_line_at_any_offset(tmp_path):
    trouble = {
        1001: "step 1001 | LOSS: NaN\n",  # any case
        7777: "  x torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",  # odd offset
        9000: "Traceback (most recent call last):\n",
        9001: '  File "train.py", line 3, in <module>\n',
        9002: "ValueError: bad batch\n",
        20001: "\x1b[31mNCCL timeout\x1b[0m on rank 3\n",
        30000: "OSError: [Errno 28] No space left on device\n",
        39999: "Killed\n",
    }
    log = _big_log(tmp_path, trouble)
    assert log.stat().st_size > 3 * 2**20  # more than the block size that the sieve takes over at
    scanner = LogScanner(log)
    found = {a.kind: a.line_no for a in scanner.poll()}
    assert found == {
        "nan_loss": 1001, "cuda_oom": 7777, "traceback": 9002, "nccl": 20001, "disk_full": 30000, "killed": 39999,
    }  # fmt: skip
    assert scanner.found["traceback"].text == "ValueError: bad batch"
    assert scanner.line_no == 40_000


def test_a_big_log_shows_the_same_anomalies_whole_or_fed_line_by_line(tmp_path):
    trouble = {
        i: line for i, line in zip(range(500, 40_000, 997), (*NAN_LOGS, *KILLED_LOGS, *DISK_FULL_LOGS))
    }
    trouble |= {i + 1: "progress 10%\rprogress 20%\rloss: nan\n" for i in range(3000, 40_000, 7919)}
    log = _big_log(
        tmp_path, {i: f"{text}\n" if not text.endswith("\n") else text for i, text in trouble.items()}
    )
    whole = LogScanner(log)
    whole.poll(final=True)
    by_line = LogScanner()
    for line in log.read_bytes().splitlines(keepends=True):
        by_line.feed(line)
    by_line.feed(b"", final=True)
    assert whole.found and whole.line_no == by_line.line_no
    assert {k: (a.line_no, a.text, a.count) for k, a in whole.found.items()} == {
        k: (a.line_no, a.text, a.count) for k, a in by_line.found.items()
    }


def test_a_first_step_far_into_a_big_log_is_found_on_its_line(tmp_path):
    log = _big_log(tmp_path, {25_000: "Training started: step 1/100\n"})
    scanner = LogScanner(log, first_step=re.compile(r"step 1/\d+"))
    scanner.poll()
    assert scanner.first_step_line == 25_000
