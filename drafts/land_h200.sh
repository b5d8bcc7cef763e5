# The local half of landing after drafts/h200_run.sh ran on an H200 (from the repository root):
#   bash drafts/land_h200.sh FILES_AT       (FILES_AT: where the run's $OUT came back, e.g. /work/.device/N)
# Moves notebook 22 in with its H200 outputs; raises the two tests that count notebooks; names notebook 22 in
# the README; commits the run's files to results/h200/; adds kernel 23 to the README's one-run table and
# prints that table again from the new fused_ladder_vs_torch.json. What stays by hand: the README's prose
# under the table (`python -m attnlab.prose README.md` lists the numbers that no longer match), and
# notebook 23 (drafts/README).
set -e
F=${1:?usage: bash drafts/land_h200.sh FILES_AT}
grep -q "14 passed\|passed" "$F/nb22.txt" || { echo "land_h200: $F/nb22.txt shows no nbval pass: not landing notebook 22"; exit 1; }
git mv drafts/22_fused_backward_no_drain.ipynb notebooks/
cp "$F/nb/22_fused_backward_no_drain.ipynb" notebooks/
cp "$F/fused_ladder_vs_torch.json" "$F/fused_ladder_vs_torch.txt" "$F/fused_ladder_23.json" "$F/fused_ladder_23.txt" results/h200/
for f in k22_k23_sanitize.txt gpu_tests_fused.txt dmon_h200_run.txt nb22.txt; do
    [ -f "$F/$f" ] && cp "$F/$f" "results/h200/experiments/${f%.txt}_19th.txt"
done
python3 - <<'PY'
from pathlib import Path
def sub(path, old, new):
    p = Path(path); s = p.read_text()
    assert s.count(old) == 1, (path, old)
    p.write_text(s.replace(old, new))
sub("tests/test_lessons_structure.py", "(03-19)", "(03-22)")
sub("tests/test_lessons_structure.py", "<= 21)", "<= 22)")
sub("tests/test_lessons_structure.py", "def test_there_are_nineteen_kernel_notebooks", "def test_there_are_twenty_kernel_notebooks")
sub("tests/test_lessons_structure.py", "range(3, 22)", "range(3, 23)")
sub("tests/test_series_memory.py", "00-19)", "00-22)")
sub("tests/test_series_memory.py", "def test_there_are_22_notebooks", "def test_there_are_23_notebooks")
sub("tests/test_series_memory.py", "range(22)", "range(23)")
sub("README.md", "built once per tile; kernel 22: kernel 21", "built once per tile; notebook 22: kernel 21")
sub("README.md", "notebooks 00-21 in reading order", "notebooks 00-22 in reading order")
sub("attnlab/report.py", '("fused22 tf32", "22 TF32"),', '("fused22 tf32", "22 TF32"), ("fused23 tf32", "23 TF32"),')
PY
python3 - <<'PY'
from pathlib import Path
from attnlab import report
readme = Path("README.md"); lines = readme.read_text().split("\n")
start = next(i for i, l in enumerate(lines) if l.startswith("| T | 9 TF32 |"))
end = start
while end < len(lines) and lines[end].startswith("|"):
    end += 1
lines[start:end] = report.ladder_table().split("\n")
readme.write_text("\n".join(lines))
PY
git status --short
python -m attnlab.prose README.md | tail -5
