import json
import subprocess
import sys

import pytest

from attnlab import has_gpu


def run(*args):
    return subprocess.run([sys.executable, "-m", "attnlab", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args, message", [
    (["backward", "0"], "kernel must be 1-9"),
    (["backward", "3", "--T", "1022"], "T must be a multiple of 4"),
    (["backward", "3", "--C", "770"], "C must be divisible by NH"),
    (["backward", "3", "--block-sizes", "32,48"], "--block-sizes must be a power of two"),
    (["forward", "--block-sizes", "x"], "--block-sizes must be comma-separated integers"),
    (["forward", "--repeats", "0"], "--repeats must be >= 1"),
])
def test_bad_arguments_exit_2_with_a_message(args, message):
    p = run(*args)
    assert p.returncode == 2
    assert message in p.stderr
    assert p.stdout == ""


@pytest.mark.skipif(has_gpu(), reason="checks the no-GPU message; this machine has a GPU")
def test_info_without_gpu_is_one_line_and_status_2():
    p = run("info")
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "needs a CUDA GPU" in p.stderr


@pytest.mark.gpu
def test_backward_json_on_a_small_shape():
    p = run("backward", "8", "--B", "2", "--T", "260", "--C", "192", "--NH", "3",
            "--repeats", "2", "--block-sizes", "64,256", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["valid"] and set(out["timings_ms"]) == {"64", "256"}
    assert set(out["validation"]) == {"preatt", "att", "out", "datt", "dpreatt", "dinp"}
    assert all(v["checked"] > 0 for v in out["validation"].values())
