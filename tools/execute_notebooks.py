"""Execute notebooks in place, keeping their outputs, so they are committed with them.

    python tools/execute_notebooks.py notebooks/*.ipynb

Run on a GPU machine (the series' committed outputs come from an NVIDIA H200). Uses
nbclient (installed with jupyterlab). Stops at the first notebook whose cell raises.
"""
import argparse
import sys
import time

import nbformat
from nbclient import NotebookClient


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("notebooks", nargs="+")
    p.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = p.parse_args(argv)
    for path in args.notebooks:
        t0 = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(__import__("pathlib").Path(path).parent)}}).execute()
        nbformat.write(nb, path)
        print(f"{path}: executed in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
