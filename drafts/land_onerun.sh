# Land the H200's new one-run table (and any ladder run beside it) with new kernels in the README's table:
#     bash drafts/land_onerun.sh FILES_AT K [K ...]      e.g. after drafts/h200_26c.sh: ... FILES_AT 29
# Refuses unless the table ran on an NVIDIA H200, its run ended with rc 0 and each kernel K has a result
# at T=1024. Copies fused_ladder_vs_torch.{json,txt} (and fused_ladder_*.{json,txt}) into results/h200/, adds
# each K after the last TF32 entry of report.LADDER_METHODS, and rewrites the README's table from the new
# run. The README's paragraph after the table is prose written from a run: rewrite it from the new
# table, then run `python -m attnlab.prose`. (Its first form, in the twenty-fourth session, added
# kernels 24-27 from drafts/h200_24e.sh's run.)
set -e
F=${1:?"usage: bash drafts/land_onerun.sh FILES_AT K [K ...]"}; shift
[ $# -gt 0 ] || { echo "land_onerun: name the kernels to add to the README's table"; exit 1; }
python3 - "$F" "$@" <<'PY'
import json, sys
from pathlib import Path
F, ks = Path(sys.argv[1]), [int(k) for k in sys.argv[2:]]
missing = [n for n in ("fused_ladder_vs_torch.json", "fused_ladder_vs_torch.txt") if not (F / n).is_file()]
if missing:
    sys.exit(f"land_onerun: {F} has no {', '.join(missing)}: give the folder the run's files came back in")
onerun = json.loads((F / "fused_ladder_vs_torch.json").read_text())
if onerun["device"]["name"] != "NVIDIA H200":
    sys.exit(f"land_onerun: the table ran on an {onerun['device']['name']}, not the H200: not landing")
if "rc 0" not in (F / "fused_ladder_vs_torch.txt").read_text():
    sys.exit("land_onerun: the one-run table's run did not end with rc 0: not landing")
for k in ks:
    if onerun["results"]["1024"].get(f"fused{k} tf32", {}).get("status") != "ok":
        sys.exit(f"land_onerun: kernel {k} has no result in the one-run table: not landing")
PY
for f in "$F"/fused_ladder_vs_torch.json "$F"/fused_ladder_vs_torch.txt "$F"/fused_ladder_[0-9]*.json "$F"/fused_ladder_[0-9]*.txt; do
  [ -f "$f" ] && cp "$f" results/h200/
done
python3 - "$@" <<'PY'
import importlib, re, sys
from pathlib import Path
p = Path("attnlab/report.py"); s = p.read_text()
import attnlab.report as report
last = [m for m, _ in report.LADDER_METHODS if m.endswith(" tf32")][-1]
old = f'("{last}", "{last.split()[0][5:]} TF32"),'
assert s.count(old) == 1, old
new = "".join(f'\n                  ("fused{k} tf32", "{k} TF32"),' for k in sys.argv[1:] if f'"fused{k} tf32"' not in s)
p.write_text(s.replace(old, old + new))
importlib.reload(report)
readme = Path("README.md"); text = readme.read_text()
table = re.search(r"^\| T \| 9 TF32 .*?(?=\n\n)", text, re.S | re.M)
assert table, "the README's ladder table"
readme.write_text(text[:table.start()] + report.ladder_table() + text[table.end():])
PY
echo "land_onerun: now rewrite the README's paragraph after the table from the new run, then: python -m attnlab.prose"
python -m attnlab.prose README.md | tail -3 || true
