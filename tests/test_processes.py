"""attnlab.processes.run: output, exit status, and a time limit that ends the whole group."""
import os
import sys
import time

from attnlab import processes


def test_output_and_exit_status_come_back():
    f = processes.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                      timeout=60)
    assert (f.returncode, f.stdout, f.stderr, f.timed_out) == (3, "out\n", "err\n", False)


def test_merged_stderr_is_in_stdout():
    f = processes.run([sys.executable, "-c", "import sys; print('err', file=sys.stderr)"],
                      timeout=60, merge_stderr=True)
    assert (f.stdout, f.stderr) == ("err\n", "")


def test_the_limit_ends_the_child_and_its_children(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    script = (f"import subprocess, sys, time; "
              f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
              f"open({str(pidfile)!r}, 'w').write(str(p.pid)); print('started', flush=True); "
              f"time.sleep(600)")
    t0 = time.perf_counter()
    f = processes.run([sys.executable, "-c", script], timeout=3)
    assert f.timed_out and f.returncode < 0 and "started" in f.stdout
    assert time.perf_counter() - t0 < 30
    grandchild = int(pidfile.read_text())
    for _ in range(50):                  # reaped by init once the group is gone
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the grandchild {grandchild} outlived the time limit")
