# The local half of landing notebook 23 after drafts/h200_21b.sh ran on an H200 (from the repository root):
#   bash drafts/land_nb23.sh FILES_AT       (FILES_AT: where the run's $OUT came back)
# Moves notebook 23 in with its H200 outputs; raises the two tests that count notebooks; names notebook 23 in
# the README; commits the run's experiment files to results/h200/experiments/. Refuses unless the run's nbval passed.
set -e
F=${1:?usage: bash drafts/land_nb23.sh FILES_AT}
NB=23_fused_backward_float4_reductions.ipynb
grep -q " passed" "$F/nb23.txt" && ! grep -q "failed\|error" "$F/nb23.txt" \
    || { echo "land_nb23: $F/nb23.txt shows no clean nbval pass: not landing notebook 23"; cat "$F/nb23.txt"; exit 1; }
git mv drafts/$NB notebooks/
cp "$F/nb/$NB" notebooks/
for f in tma_wgmma_check.txt k23_pdl.txt k23_tma.txt k23_cli.txt; do
    [ -f "$F/$f" ] && cp "$F/$f" results/h200/experiments/
done
cp "$F/nb23.txt" results/h200/experiments/nb23.txt
python3 - <<'PY'
from pathlib import Path
def sub(path, old, new):
    p = Path(path); s = p.read_text()
    assert s.count(old) == 1, (path, old)
    p.write_text(s.replace(old, new))
sub("tests/test_lessons_structure.py", "(03-22)", "(03-23)")
sub("tests/test_lessons_structure.py", "<= 22)", "<= 23)")
sub("tests/test_lessons_structure.py", "def test_there_are_twenty_kernel_notebooks", "def test_there_are_twenty_one_kernel_notebooks")
sub("tests/test_lessons_structure.py", "range(3, 23)", "range(3, 24)")
sub("tests/test_series_memory.py", "00-22)", "00-23)")
sub("tests/test_series_memory.py", "def test_there_are_23_notebooks", "def test_there_are_24_notebooks")
sub("tests/test_series_memory.py", "range(23)", "range(24)")
sub("README.md", "kernel 23, whose notebook is still a draft: kernel 22 adding dQ from\nregisters", "notebook 23: kernel 22 adding dQ from\nregisters")
sub("README.md", "notebooks 00-22 in reading order", "notebooks 00-23 in reading order")
PY
git status --short
python -m attnlab.prose README.md notebooks/$NB | tail -3
