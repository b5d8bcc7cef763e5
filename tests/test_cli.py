"""``python -m attnlab backward N --json`` end to end on the GPU. What the command line does
with bad arguments, without a GPU and on a wrong result (exit statuses 1-3) is
tests/test_errors.py, one test per row of docs/errors.md."""
import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "attnlab", *args], capture_output=True, text=True)


@pytest.mark.gpu
def test_backward_json_on_a_small_shape():
    p = run("backward", "8", "--B", "2", "--T", "260", "--C", "192", "--NH", "3",
            "--repeats", "2", "--block-sizes", "64,256", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["valid"] and set(out["timings_ms"]) == {"64", "256"}
    assert set(out["validation"]) == {"preatt", "att", "out", "datt", "dpreatt", "dinp"}
    assert all(v["checked"] > 0 for v in out["validation"].values())
