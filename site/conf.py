"""Sphinx configuration of the attnlab site: the README, the notebooks as committed (never
executed), the exercises and docs/. tools/build_site.py copies this file, index.md and the
content into site/_build/src and builds from there; see its docstring."""
from pathlib import Path

project = "attnlab"
author = "attnlab"
copyright = "attnlab's authors"

extensions = ["myst_nb"]
nb_execution_mode = "off"          # the stored outputs of the H200 run are the content
nb_merge_streams = True            # one output block per cell, not one per print
nb_render_markdown_format = "myst"   # markdown outputs (tables, ```cuda sources) as the cells are
myst_enable_extensions = ["dollarmath", "amsmath"]   # $...$ and $$...$$ in the notebooks
myst_heading_anchors = 3           # links such as errors.md#some-heading resolve
exclude_patterns = ["README.md", "_build", "_static", "**/.ipynb_checkpoints", "**/solutions"]

html_theme = "furo"
html_title = "attnlab"
html_static_path = ["_static"]    # site.css, and MathJax where the build put it there
html_css_files = ["site.css"]
html_copy_source = False           # no _sources/ copies of the 3 MB of notebooks
html_show_sourcelink = False

# MathJax 3 from the site itself where the build placed a copy (tools/build_site.py gets it from
# the npm registry), so that the math renders offline; else from a CDN, which needs the network.
MATHJAX_CDN = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"
_local = Path(__file__).parent / "_static" / "mathjax" / "tex-mml-chtml.js"
if _local.exists():
    mathjax_path = "mathjax/tex-mml-chtml.js"     # relative to the site's _static/
else:
    print(f"site: no local MathJax at {_local}; the pages load it from {MATHJAX_CDN}")
    mathjax_path = MATHJAX_CDN
