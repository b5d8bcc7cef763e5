"""The README's Colab cell, exactly as the README holds it, run here with git and pip recorded
instead of run: until REPO is filled in it stops with a message before any command; filled in,
it clones and installs with argument lists (no shell reads REPO); a folder is used as it is."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import attnlab.environment

README = Path(__file__).resolve().parent.parent / "README.md"
PLACEHOLDER = "https://github.com/<owner>/attnlab"
URL = "https://github.com/someone/attnlab"


def colab_cell():
    """The ```python block of the README's "Run in a hosted notebook (Colab)" section."""
    section = README.read_text().split("### Run in a hosted notebook (Colab)")[1].split("\n## ")[0]
    (cell,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return cell


class Recorder:
    """Stands in for subprocess.run, os.chdir and environment.report: records, runs nothing."""

    def __init__(self, returncode=0, stderr=""):
        self.commands, self.chdirs, self.reports = [], [], 0
        self.returncode, self.stderr = returncode, stderr

    def run(self, command, **kwargs):
        assert not kwargs.get("shell"), "the cell must not run a shell"
        self.commands.append(list(command))
        return subprocess.CompletedProcess(command, self.returncode, "", self.stderr)

    def report(self, *a, **k):
        self.reports += 1
        return False


@pytest.fixture
def recorder(monkeypatch):
    r = Recorder()
    monkeypatch.setattr(subprocess, "run", r.run)
    monkeypatch.setattr(os, "chdir", r.chdirs.append)
    monkeypatch.setattr(attnlab.environment, "report", r.report)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return r


def run_cell(repo=None):
    cell = colab_cell()
    if repo is not None:
        cell = cell.replace(f'REPO = "{PLACEHOLDER}"', f"REPO = {repo!r}", 1)
        assert f"REPO = {repo!r}" in cell
    exec(compile(cell, "README's Colab cell", "exec"), {})


def test_the_cell_is_plain_python_with_the_placeholder():
    cell = colab_cell()
    assert cell.startswith(f'REPO = "{PLACEHOLDER}"')
    assert not re.search(r"^\s*[!%]", cell, re.M), "no shell escapes or magics"


def test_as_written_it_stops_with_a_message_before_any_command(recorder):
    with pytest.raises(ValueError) as e:
        run_cell()
    assert str(e.value) == (f"REPO is still '{PLACEHOLDER}': put the address of the attnlab "
                            f"repository you use (or the path of an attnlab folder on this "
                            f"machine) in REPO, then run this cell again")
    assert recorder.commands == [] and recorder.chdirs == [] and recorder.reports == 0


def test_a_filled_in_address_is_cloned_and_installed(recorder):
    if os.path.isdir("/content/attnlab"):
        pytest.skip("/content/attnlab exists here: the cell would use it without cloning")
    run_cell(URL)
    assert recorder.commands == [
        ["git", "clone", "-q", URL, "/content/attnlab"],
        [sys.executable, "-m", "pip", "install", "-q", "-e", "/content/attnlab[gpu]"]]
    assert sys.path[0] == "/content/attnlab"
    assert recorder.chdirs == ["/content/attnlab/notebooks"] and recorder.reports == 1


def test_a_folder_is_installed_as_it_is(recorder, tmp_path):
    run_cell(str(tmp_path))
    assert recorder.commands == [[sys.executable, "-m", "pip", "install", "-q", "-e",
                                  f"{tmp_path}[gpu]"]]
    assert sys.path[0] == str(tmp_path)
    assert recorder.chdirs == [str(tmp_path / "notebooks")] and recorder.reports == 1


def test_a_failed_clone_stops_the_cell_with_git_s_message(recorder):
    if os.path.isdir("/content/attnlab"):
        pytest.skip("/content/attnlab exists here: the cell would use it without cloning")
    recorder.returncode, recorder.stderr = 128, "fatal: repository not found\n"
    with pytest.raises(RuntimeError) as e:
        run_cell(URL)
    assert str(e.value) == (f"git clone -q {URL} /content/attnlab failed:\n"
                            f"fatal: repository not found\n")
    assert len(recorder.commands) == 1 and recorder.chdirs == [] and recorder.reports == 0
