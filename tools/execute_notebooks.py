"""Execute notebooks, keeping their outputs, so they are committed with them.

    python tools/execute_notebooks.py notebooks/*.ipynb            # in place
    python tools/execute_notebooks.py --out DIR notebooks/*.ipynb  # executed copies in DIR

Run on a GPU machine (the series' committed outputs come from an NVIDIA H200). Uses
nbclient (installed with jupyterlab). Every notebook is executed to its end even when a
cell raises (the error is kept in that cell's output); the run then lists the cells that
raised and exits with status 1.
"""
import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def errors(nb):
    """(cell index, error name, message) of every cell whose output is an error."""
    return [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(nb.cells)
            if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("notebooks", nargs="+")
    p.add_argument("--out", help="write the executed notebooks here instead of in place")
    p.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = p.parse_args(argv)
    failed = []
    for path in map(Path, args.notebooks):
        t0 = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=args.timeout, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        target = Path(args.out) / path.name if args.out else path
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        bad = errors(nb)
        failed += [(path.name, *e) for e in bad]
        print(f"{path}: executed in {time.perf_counter() - t0:.1f} s"
              + (f", {len(bad)} cell(s) raised" if bad else ""), flush=True)
    for name, i, ename, evalue in failed:
        print(f"FAILED {name} cell {i}: {ename}: {evalue}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
