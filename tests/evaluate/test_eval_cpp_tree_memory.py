"""A run's memory limit holds for its whole process tree: a candidate that forks children,
each under the limit, that together go over it is killed and told ``memory_limit``."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from maxcode.harness.sandbox import _descendants, _memory_of
from tests.helpers import eval_json, processes_of_this_test, write_task

# Nine children, each touching 64 MiB (one process stays well under the 256 MiB limit): the
# tree would hold 576 MiB.
FORK_AND_TOUCH = r"""
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>
int main() {
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 1;
    for (int i = 0; i < 9; i++) {
        if (fork() == 0) {
            size_t size = 64u << 20;
            volatile char* block = (volatile char*)malloc(size);
            if (!block) _exit(3);
            for (size_t at = 0; at < size; at += 4096) block[at] = 1;  // every page touched
            sleep(20);
            _exit(block[size - 1]);
        }
    }
    while (wait(nullptr) > 0) {}
    printf("%lld\n", a + b);
}
"""


def _largest_tree(stop: threading.Event, peak: list[int]) -> None:
    """The most memory the sandboxed processes of this test held at once (sampled)."""
    mine = os.environ["TMPDIR"].encode()
    while not stop.wait(0.02):
        roots = [int(pid) for pid in os.listdir("/proc") if pid.isdigit()]
        total = 0
        for pid in roots:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    argv = cmdline.read().split(b"\0")
            except OSError:
                continue
            # This test's inits (a run's folder is in its TMPDIR), not bwrap's (whose command
            # line names the init too) nor those of a test running beside it.
            if not argv[0].endswith(b"/maxcode-init") or mine not in b" ".join(argv):
                continue
            total += sum(_memory_of(child) for child in _descendants(pid))
        peak[0] = max(peak[0], total)


def test_forked_children_over_the_limit_together_are_killed(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t", toml='kind = "cpp"\ntimeout_s = 10\nmemory_mb = 256\n')
    candidate = tmp_path / "forks.cpp"
    candidate.write_text(FORK_AND_TOUCH)
    stop, peak = threading.Event(), [0]
    sampler = threading.Thread(target=_largest_tree, args=(stop, peak))
    sampler.start()
    started = time.monotonic()
    try:
        result = eval_json(str(task), str(candidate))
    finally:
        stop.set()
        sampler.join()
    assert result["correct"] is False
    assert result["error"]["kind"] == "memory_limit", result["error"]
    assert "over the limit of 256 MiB" in result["error"]["message"]
    assert time.monotonic() - started < 15  # killed, not left to sleep out its timeout
    # The tree never held much more than the limit (the watch samples every 50 ms).
    assert 128 << 20 < peak[0] < (256 + 192) << 20, peak[0] >> 20
    assert processes_of_this_test("maxcode-bin-") == []
