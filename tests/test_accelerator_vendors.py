"""AMD, Intel and Apple devices, read from what their tools printed on real machines
(tests/data/accelerators/, each file's origin in its README), and `query()` end to end through a
stand-in executable of the tool's name, alone on PATH, that prints those captures."""

from __future__ import annotations

import json
import platform
import stat
import time
from pathlib import Path

import pytest

from autoresearch_skills.accelerators import amd, apple, intel
from autoresearch_skills.accelerators.device import Device

DATA = Path(__file__).parent / "data" / "accelerators"
MIB = 2**20
AMD_SMI_FAILURE = "ERROR:root:Driver not initialized (amdgpu not found in modules)"


def capture(name: str) -> str:
    return (DATA / name).read_text()


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """A PATH holding only the stand-ins a test writes: `tools(name, body)` makes one (sh)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))

    def write(name: str, body: str) -> None:
        script = bin_dir / name
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(script.stat().st_mode | stat.S_IXUSR)

    return write


def answers(expected: dict[str, str]) -> str:
    """A stand-in body that prints a capture for each exact argument list, and fails otherwise."""
    cases = "".join(f'  "{args}") /bin/cat "{DATA / name}" ;;\n' for args, name in expected.items())
    return f'case "$*" in\n{cases}  *) echo "unexpected arguments: $*" >&2; exit 2 ;;\nesac\n'


def args(command: list[str]) -> str:
    return " ".join(command[1:])


# --- AMD: amd-smi ------------------------------------------------------------------------------


def test_amd_smi_on_an_rx6600_gives_its_name_memory_use_and_driver():
    devices = amd.parse_amd_smi(capture("amd-smi-rx6600-static.json"), capture("amd-smi-rx6600-metric.json"))
    assert devices == [
        Device("amd", 0, "Navi 23 [Radeon RX 6600/6600 XT", 8176.0, "7.0.0-3-pve", "amd-smi",
               free_mib=7974.0, used_mib=202.0)
    ]  # fmt: skip


def test_amd_smi_without_its_metric_answer_lists_the_gpu_with_use_unknown():
    (device,) = amd.parse_amd_smi(capture("amd-smi-rx6600-static.json"), None)
    assert (device.name, device.memory_mib, device.used_mib, device.free_mib) == (
        "Navi 23 [Radeon RX 6600/6600 XT", 8176.0, None, None,
    )  # fmt: skip


def test_amd_smi_26_gpu_data_wrapper_reads_like_the_list_it_wraps():
    # amd-smi 26 (ROCm 7) prints {"gpu_data": [...]}; no capture of it was found, so the real
    # RX 6600 answers are wrapped the way that version wraps them.
    static, metric = (
        json.dumps({"gpu_data": json.loads(capture(name))})
        for name in ("amd-smi-rx6600-static.json", "amd-smi-rx6600-metric.json")
    )
    assert amd.parse_amd_smi(static, metric) == amd.parse_amd_smi(
        capture("amd-smi-rx6600-static.json"), capture("amd-smi-rx6600-metric.json")
    )


def test_amd_smi_warning_lines_before_the_json_are_skipped():
    text = "WARNING: User is missing the following required groups: render, video\n"
    assert amd.parse_amd_smi(text + capture("amd-smi-rx6600-static.json"))[0].memory_mib == 8176.0


@pytest.mark.parametrize(
    "text", ["", "not json", "[]", '{"gpu_data": "N/A"}', '[{"gpu": 0}]', '[{"gpu": "x"}]']
)
def test_amd_smi_output_it_cannot_read_gives_no_gpu_and_no_error(text):
    assert amd.parse_amd_smi(text, text) == []


# --- AMD: rocm-smi -----------------------------------------------------------------------------


def test_rocm_smi_on_four_mi100_gives_each_card_its_index_name_and_memory():
    devices = amd.parse_rocm_smi(capture("rocm-smi-mi100-x4-all.json"))
    assert [d.index for d in devices] == [0, 1, 2, 3]
    assert {d.name for d in devices} == {"Arcturus GL-XL [Instinct MI100]"}
    assert {(d.memory_mib, d.used_mib, d.driver, d.source) for d in devices} == {
        (34342961152 / MIB, 6750208 / MIB, "6.3.6", "rocm-smi")
    }
    assert devices[0].free_mib == pytest.approx((34342961152 - 6750208) / MIB)


def test_rocm_smi_from_rocm_6_1_reads_the_card_series_with_a_capital_s():
    (device,) = amd.parse_rocm_smi(capture("rocm-smi-rx6700xt-all.json"))
    assert (device.index, device.name, device.memory_mib, device.used_mib, device.driver) == (
        0, "Navi 22 [Radeon RX 6700/6700 XT / 6800M]", 12868124672 / MIB, 1572745216 / MIB, "6.3.6",
    )  # fmt: skip


def test_rocm_smi_without_the_driver_query_leaves_the_driver_unknown():
    (device,) = amd.parse_rocm_smi(capture("rocm-smi-rx7900xt-product-use-vram.json"))
    assert (device.name, device.memory_mib, device.used_mib, device.driver) == (
        "Radeon RX 7900 XT", 21458059264 / MIB, 27856896 / MIB, None,
    )  # fmt: skip


@pytest.mark.parametrize(
    "text", ["", "WARNING: No JSON data to report", "[]", '{"card0": "N/A"}', '{"cardx": {}}']
)
def test_rocm_smi_output_it_cannot_read_gives_no_gpu_and_no_error(text):
    assert amd.parse_rocm_smi(text) == []


# --- AMD: query ---------------------------------------------------------------------------------


def test_amd_query_reads_amd_smi_static_and_metric(tools):
    tools("amd-smi", answers({args(amd.STATIC): "amd-smi-rx6600-static.json", args(amd.METRIC): "amd-smi-rx6600-metric.json"}))  # fmt: skip
    devices, where = amd.query()
    assert where == "amd-smi"
    assert [(d.name, d.memory_mib, d.used_mib) for d in devices] == [
        ("Navi 23 [Radeon RX 6600/6600 XT", 8176.0, 202.0)
    ]


def test_amd_query_without_either_tool_names_both(tools):
    assert amd.query() == ([], "amd-smi not found; rocm-smi not found")


def test_amd_query_falls_back_to_rocm_smi_when_amd_smi_fails(tools):
    tools("amd-smi", f'echo "{AMD_SMI_FAILURE}"\necho "second line" >&2\nexit 9\n')
    tools("rocm-smi", answers({args(amd.ROCM_SMI): "rocm-smi-mi100-x4-all.json"}))
    devices, where = amd.query()
    assert where == "rocm-smi"
    assert [d.index for d in devices] == [0, 1, 2, 3]


def test_amd_query_that_fails_everywhere_quotes_amd_smi_first_line(tools):
    tools("amd-smi", f'echo "{AMD_SMI_FAILURE}"\necho "second line" >&2\nexit 9\n')
    assert amd.query() == ([], f"amd-smi failed: {AMD_SMI_FAILURE}; rocm-smi not found")


def test_amd_query_with_a_failing_metric_still_lists_the_gpu(tools):
    tools("amd-smi", f'[ "$1" = static ] && exec /bin/cat "{DATA / "amd-smi-rx6600-static.json"}"\necho "{AMD_SMI_FAILURE}"\nexit 9\n')  # fmt: skip
    devices, where = amd.query()
    assert where == f"amd-smi (memory in use unknown: amd-smi failed: {AMD_SMI_FAILURE})"
    assert [(d.memory_mib, d.used_mib) for d in devices] == [(8176.0, None)]


def test_amd_query_gives_up_on_a_hanging_amd_smi_within_its_time_limit(tools):
    tools("amd-smi", "exec /bin/sleep 30\n")
    start = time.monotonic()
    devices, where = amd.query(timeout=1)
    assert time.monotonic() - start < 5
    assert (devices, where) == ([], "amd-smi did not answer within 1s; rocm-smi not found")


# --- Intel: xpu-smi -----------------------------------------------------------------------------


def test_xpu_smi_discovery_dump_lists_each_device_by_id_and_name():
    devices = intel.parse_discovery(capture("xpu-smi-flex170-discovery-dump.csv"))
    assert devices == [
        Device("intel", i, "Intel(R) Graphics [0x56c0]", None, None, "xpu-smi") for i in (0, 1)
    ]


def test_xpu_smi_dump_of_metric_18_gives_the_memory_each_device_holds():
    assert intel.parse_used(capture("xpu-smi-a770-x4-dump-first-rows.csv")) == {
        0: 17.52,
        1: 17.52,
        2: 49.21,
        3: 17.52,
    }


def test_xpu_smi_dump_without_the_memory_column_holds_no_figure():
    assert intel.parse_used(capture("xpu-smi-max1550-x6-dump.csv")) == {}


def test_xpu_smi_used_memory_without_a_total_leaves_free_unknown():
    devices = intel.with_used(
        intel.parse_discovery(capture("xpu-smi-flex170-discovery-dump.csv")), {0: 17.52}
    )
    assert [(d.used_mib, d.free_mib) for d in devices] == [(17.52, None), (None, None)]


@pytest.mark.parametrize(
    "text", ["", "Device ID,Device Name\n", 'Device ID,Device Name\nx,"N/A"\n', "garbage\n1,2,3\n"]
)
def test_xpu_smi_output_it_cannot_read_gives_no_device_and_no_error(text):
    assert intel.parse_discovery(text) == [] and intel.parse_used(text) == {}


def test_intel_query_reads_discovery_and_one_dump_sample(tools):
    tools("xpu-smi", answers({args(intel.DISCOVERY): "xpu-smi-flex170-discovery-dump.csv", args(intel.USED): "xpu-smi-a770-x4-dump-first-rows.csv"}))  # fmt: skip
    devices, where = intel.query()
    assert where == "xpu-smi"
    assert [(d.index, d.used_mib) for d in devices] == [(0, 17.52), (1, 17.52)]


def test_intel_query_without_xpu_smi_says_so(tools):
    assert intel.query() == ([], "xpu-smi not found")


def test_intel_query_quotes_the_first_line_of_a_failing_xpu_smi(tools):
    tools("xpu-smi", 'echo "Error: Level Zero initialization failed"\necho "second line"\nexit 9\n')
    assert intel.query() == ([], "xpu-smi failed: Error: Level Zero initialization failed")


def test_intel_query_with_a_failing_dump_still_lists_the_devices(tools):
    tools("xpu-smi", f'[ "$1" = discovery ] && exec /bin/cat "{DATA / "xpu-smi-flex170-discovery-dump.csv"}"\necho "dump failed"\nexit 9\n')  # fmt: skip
    devices, where = intel.query()
    assert where == "xpu-smi (memory in use unknown: xpu-smi failed: dump failed)"
    assert [d.index for d in devices] == [0, 1]


def test_intel_query_gives_up_on_a_hanging_xpu_smi_within_its_time_limit(tools):
    tools("xpu-smi", "exec /bin/sleep 30\n")
    start = time.monotonic()
    assert intel.query(timeout=1) == ([], "xpu-smi did not answer within 1s")
    assert time.monotonic() - start < 5


# --- Apple --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "chip"), [("sysctl-m1-machdep-cpu.txt", "Apple M1"), ("sysctl-m1pro-machdep-cpu.txt", "Apple M1 Pro")])  # fmt: skip
def test_sysctl_names_the_one_mps_device_after_the_chip(name, chip):
    assert apple.parse(capture(name)) == [Device("apple", 0, chip, None, None, "sysctl")]


def test_sysctl_memsize_is_the_devices_unified_memory():
    # hw.memsize's line as sysctl prints it; no real capture holds it beside the chip's name.
    (device,) = apple.parse(capture("sysctl-m1-machdep-cpu.txt") + "hw.memsize: 17179869184\n")
    assert (device.memory_mib, device.used_mib, device.free_mib) == (16384.0, None, None)


@pytest.mark.parametrize(
    "text", ["", "sysctl: unknown oid 'machdep.cpu.brand_string'", "hw.memsize: 17179869184\n"]
)
def test_sysctl_output_without_a_chip_gives_no_device(text):
    assert apple.parse(text) == []


@pytest.mark.skipif(platform.system() == "Darwin", reason="off a Mac only")
def test_apple_query_off_a_mac_gives_no_device_and_says_why():
    devices, why = apple.query()
    assert devices == []
    assert why == f"not a Mac with Apple silicon ({platform.system()} {platform.machine()})"
