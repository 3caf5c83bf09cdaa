"""The CPU run's memory figure (executor/record.py): the RSS high water's growth over the process
before the model, without the file-backed pages (library code) mapped in since."""
import mmap

import pytest

from executor.record import (
    cpu_peak_rss_bytes, cpu_rss_baseline, cpu_rss_growth_bytes, cpu_wait_s, reset_cpu_peak_rss, wait_share,
)

MIB = 2**20


def test_rss_growth_counts_heap_and_not_mapped_files(tmp_path):
    code = tmp_path / "lib.so"
    code.write_bytes(b"\x01" * (32 * MIB))
    reset_cpu_peak_rss()
    baseline = cpu_rss_baseline()
    heap = b"\x02" * (64 * MIB)                    # 64 MiB written: resident, anonymous
    with open(code, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as lib:
        assert sum(lib[i] for i in range(0, len(lib), 4096)) == 32 * MIB // 4096  # 32 MiB of file pages read in
        growth = cpu_rss_growth_bytes(baseline)
        peak = cpu_peak_rss_bytes()
    assert len(heap) == 64 * MIB
    assert growth >= 64 * MIB
    if peak - baseline[0] < 128 * MIB:  # the high water was reset (clear_refs): it is this test's alone
        assert growth < (64 + 16) * MIB  # the 32 MiB of file pages are not counted


def test_wait_share_is_the_waited_part_of_the_timed_wall_time():
    """0.1 s and 0.3 s waited in two 1 s steps: 20% of the timed wall time; unknown stays unknown."""
    assert wait_share([0.1, 0.3], [1.0, 1.0]) == pytest.approx(0.2)
    assert wait_share([None, 0.3], [1.0, 1.0]) is None and wait_share([], []) is None
    assert cpu_wait_s() is not None and cpu_wait_s() >= 0  # Linux tells it (/proc/thread-self/schedstat)
