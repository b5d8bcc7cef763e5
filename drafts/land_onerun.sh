# Land the H200's new one-run table and the ladder of kernels 23-27 from a run of drafts/h200_24e.sh:
#     bash drafts/land_onerun.sh FILES_AT
# Refuses unless both ran on an NVIDIA H200 and the table's run ended with rc 0. Copies them into
# results/h200/, adds kernels 24 to 27 to report.LADDER_METHODS, and rewrites the README's table
# from the new run. The README's paragraph after the table is prose written from a run: it names
# kernel 23's numbers, so rewrite it from the new table, then run `python -m attnlab.prose`.
set -e
F=${1:?"usage: bash drafts/land_onerun.sh FILES_AT (the folder drafts/h200_24e.sh's files came back in)"}
python3 - "$F" <<'PY'
import json, sys
from pathlib import Path
F = Path(sys.argv[1])
missing = [n for n in ("fused_ladder_vs_torch.json", "fused_ladder_vs_torch.txt", "fused_ladder_27.json", "fused_ladder_27.txt")
           if not (F / n).is_file()]
if missing:
    sys.exit(f"land_onerun: {F} has no {', '.join(missing)}: give the folder drafts/h200_24e.sh's files came back in")
onerun, ladder = json.loads((F / "fused_ladder_vs_torch.json").read_text()), json.loads((F / "fused_ladder_27.json").read_text())
if onerun["device"]["name"] != "NVIDIA H200" or ladder["device"] != "NVIDIA H200":
    sys.exit(f"land_onerun: the runs are an {onerun['device']['name']}'s and an {ladder['device']}'s, not the H200's: not landing")
if "rc 0" not in (F / "fused_ladder_vs_torch.txt").read_text():
    sys.exit("land_onerun: the one-run table's run did not end with rc 0: not landing")
for k in (24, 25, 26, 27):
    if onerun["results"]["1024"].get(f"fused{k} tf32", {}).get("status") != "ok":
        sys.exit(f"land_onerun: kernel {k} has no result in the one-run table: not landing")
PY
for f in fused_ladder_vs_torch.json fused_ladder_vs_torch.txt fused_ladder_27.json fused_ladder_27.txt; do cp "$F/$f" results/h200/; done
python3 - <<'PY'
from pathlib import Path
p = Path("attnlab/report.py"); s = p.read_text()
old = '("fused22 tf32", "22 TF32"), ("fused23 tf32", "23 TF32"),'
assert s.count(old) == 1, old
p.write_text(s.replace(old, old + '\n                  ("fused24 tf32", "24 TF32"), ("fused25 tf32", "25 TF32"), ("fused26 tf32", "26 TF32"),'
                                  '\n                  ("fused27 tf32", "27 TF32"),'))
import importlib, re
import attnlab.report as report
importlib.reload(report)
readme = Path("README.md"); text = readme.read_text()
table = re.search(r"^\| T \| 9 TF32 .*?(?=\n\n)", text, re.S | re.M)
assert table, "the README's ladder table"
readme.write_text(text[:table.start()] + report.ladder_table() + text[table.end():])
PY
grep -n "24 TF32" README.md | head -2
echo "land_onerun: now rewrite the README's paragraph after the table from the new run, then: python -m attnlab.prose"
python -m attnlab.prose README.md | tail -3 || true
