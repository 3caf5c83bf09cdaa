"""The CPU run's memory figure (executor/record.py): the RSS high water's growth over the process
before the model, without the file-backed pages (library code) mapped in since."""
import mmap

from executor.record import cpu_peak_rss_bytes, cpu_rss_baseline, cpu_rss_growth_bytes, reset_cpu_peak_rss

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
