"""Build the series as a static HTML site from the committed notebooks (nothing is executed,
no GPU is needed); needs `pip install -e ".[site]"`:

    python tools/build_site.py            # -> site/_build/html/index.html

Sphinx reads only below its source folder, so this copies README.md, notebooks/, docs/,
kernels/, results/ and site/{conf.py,index.md,_static} into site/_build/src, writes a page
per kernel source, puts MathJax 3 into _static/mathjax (from $ATTNLAB_MATHJAX, a folder
holding MathJax 3's es5/ files, or else from the npm registry with `npm pack`, once, cached
in site/_build; without either, the pages load MathJax from a CDN and the build says so),
then runs Sphinx with MyST-NB. Exit status: Sphinx's (0 when the site was built).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# results/: the measurements the notebooks read, so that a link to one of its files works on the
# site too (Sphinx makes a link to a file that is no page a download)
CONTENT = ["README.md", "notebooks", "docs", "kernels", "results", "site/conf.py", "site/index.md",
           "site/_static"]
SKIP = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc", "conftest.py")
MATHJAX = "mathjax@3.2.2"
MATHJAX_ENTRY = "tex-mml-chtml.js"           # the one combined file the pages load
# MathJax's other combined files and its SVG output: 12 MB that the pages never load
MATHJAX_UNUSED = {"mml-chtml.js", "mml-svg.js", "tex-chtml.js", "tex-chtml-full.js",
                  "tex-chtml-full-speech.js", "tex-mml-svg.js", "tex-svg.js", "tex-svg-full.js",
                  "node-main.js", "svg"}


def stage(src):
    """Copy the site's sources into src (emptied first), keeping file times so that Sphinx
    rebuilds only the pages whose source changed; add one page per kernel source."""
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for name in CONTENT:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / path.name, ignore=SKIP)
        else:
            shutil.copy2(path, src / path.name)
    for source in sorted((src / "kernels").glob("*.cu*")):
        (src / "kernels" / f"{source.name}.md").write_text(
            f"# kernels/{source.name}\n\n```{{literalinclude}} {source.name}\n:language: cuda\n```\n")


def fetch_mathjax(cache):
    """MathJax's es5/ folder from the npm registry, unpacked into cache once; None (with the
    reason printed) if it cannot be had."""
    es5 = cache / MATHJAX / "es5"
    if (es5 / MATHJAX_ENTRY).exists():
        return es5
    npm = shutil.which("npm")
    if npm is None:
        print(f"site: npm is not installed, so {MATHJAX} cannot be fetched")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([npm, "pack", MATHJAX, "--silent", "--pack-destination", tmp],
                             capture_output=True, text=True)
        tarballs = list(Path(tmp).glob("*.tgz"))
        if run.returncode != 0 or not tarballs:
            print(f"site: `npm pack {MATHJAX}` failed: {run.stderr.strip()[-500:]}")
            return None
        with tarfile.open(tarballs[0]) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith("package/es5/")]
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.10.12+
            tar.extractall(tmp, members=members, **safe)
        shutil.rmtree(es5.parent, ignore_errors=True)
        es5.parent.mkdir(parents=True)
        shutil.move(Path(tmp) / "package" / "es5", es5)
    return es5


def place_mathjax(src, cache):
    """Copy MathJax 3 into src/_static/mathjax, from $ATTNLAB_MATHJAX or the npm registry."""
    given = os.environ.get("ATTNLAB_MATHJAX")
    if given and not (Path(given) / MATHJAX_ENTRY).is_file():
        sys.exit(f"site: ATTNLAB_MATHJAX={given!r} has no {MATHJAX_ENTRY}; expected the "
                 f"es5/ folder of MathJax 3")
    es5 = Path(given) if given else fetch_mathjax(cache)
    if es5 is not None:
        shutil.copytree(es5, src / "_static" / "mathjax",
                        ignore=lambda folder, names: MATHJAX_UNUSED.intersection(names))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "site" / "_build",
                        help="the folder for the copied sources, Sphinx's cache, MathJax and "
                             "the HTML, which goes to its html/ (default: site/_build)")
    args = parser.parse_args(argv)
    missing = [name for name in ("sphinx", "myst_nb", "furo") if find_spec(name) is None]
    if missing:
        sys.exit(f"site: {', '.join(missing)} not installed: pip install -e \".[site]\"")
    build = args.build.resolve()
    src, html = build / "src", build / "html"
    stage(src)
    place_mathjax(src, build)
    status = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q",
                             "-d", str(build / "doctrees"), str(src), str(html)]).returncode
    if status == 0:
        print(f"site: built {html / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
