# The local half of landing a draft notebook N (24 or 25) after drafts/h200_24j.sh ran on an H200:
#   bash drafts/land_nb.sh N FILES_AT       (FILES_AT: where the run's $OUT came back)
# Refuses unless the run was an H200's with a clean nbval pass and N is the next notebook of the series.
# Moves the notebook in with its H200 outputs, raises the counts of tests/test_lessons_structure.py and
# tests/test_series_memory.py and the README's "notebooks 00-NN", and copies the run's log to
# results/h200/experiments/nbNN.txt. The README's sentence on kernels whose notebooks are drafts is prose:
# rewrite it by hand, then run `python -m attnlab.prose` and the CPU tests.
set -e
N=${1:?usage: bash drafts/land_nb.sh N FILES_AT}; F=${2:?usage: bash drafts/land_nb.sh N FILES_AT}
NB=$(cd drafts && ls ${N}_*.ipynb 2>/dev/null | head -1)
[ -n "$NB" ] || { echo "land_nb: no drafts/${N}_*.ipynb"; exit 1; }
head -1 "$F/nb$N.txt" | grep -q "H200" || { echo "land_nb: $F/nb$N.txt is not an H200's run: not landing"; exit 1; }
grep -q " passed" "$F/nb$N.txt" && ! grep -q "failed\|error" "$F/nb$N.txt" \
    || { echo "land_nb: $F/nb$N.txt shows no clean nbval pass: not landing"; cat "$F/nb$N.txt"; exit 1; }
last=$(ls notebooks/[0-9][0-9]_*.ipynb | sed 's#notebooks/##' | cut -c1-2 | sort -n | tail -1)
[ $((10#$last + 1)) -eq $((10#$N)) ] || { echo "land_nb: notebook $N is not the next after $last: land them in order"; exit 1; }
python3 - "$last" "$N" <<'PY'
import re, sys
from pathlib import Path
last, n = int(sys.argv[1]), int(sys.argv[2])
text = {}
def sub(path, pattern, repl):      # in memory: nothing is written unless every pattern matches once
    s = text.get(path) or Path(path).read_text()
    text[path], k = re.subn(pattern, repl, s)
    assert k == 1, (path, pattern, k)
sub("tests/test_lessons_structure.py", rf"\(03-{last:02d}\)", f"(03-{n:02d})")
sub("tests/test_lessons_structure.py", rf"<= {last}\)", f"<= {n})")
sub("tests/test_lessons_structure.py", r"def test_(there_are_\w+_kernel_notebooks|the_kernel_notebooks_are_03_to_the_last)\(",
    "def test_the_kernel_notebooks_are_03_to_the_last(")
sub("tests/test_lessons_structure.py", rf"range\(3, {last + 1}\)", f"range(3, {n + 1})")
sub("tests/test_series_memory.py", rf"00-{last:02d}\)", f"00-{n:02d})")
sub("tests/test_series_memory.py", r"def test_(there_are_\w+_notebooks|the_notebooks_are_00_to_the_last)\(",
    "def test_the_notebooks_are_00_to_the_last(")
sub("tests/test_series_memory.py", rf"range\({last + 1}\)", f"range({n + 1})")
sub("README.md", rf"notebooks 00-{last:02d} in reading order", f"notebooks 00-{n:02d} in reading order")
for path, s in text.items():
    Path(path).write_text(s)
PY
git mv drafts/$NB notebooks/        # after the counts were raised, so that a refusal above leaves nothing half done
cp "$F/nb/$NB" notebooks/
cp "$F/nb$N.txt" results/h200/experiments/nb$N.txt
git status --short
echo "land_nb: now rewrite the README's sentence on the kernels whose notebooks are drafts, then: python -m attnlab.prose"
