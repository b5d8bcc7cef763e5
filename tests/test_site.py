"""The site (tools/build_site.py) builds from the committed notebooks without a warning, and every
page of it works in a real browser: headless Chromium, through tests/site_check.py, which must
also report a page broken on purpose.

Skipped where Sphinx/MyST-NB, Playwright or Chromium are missing, with what to install; with
ATTNLAB_REQUIRE_SITE=1 (set by .ci/run) they fail instead, so CI cannot skip them."""
import os
import re
import shutil
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="reading the notebooks needs nbformat (the [notebooks] extra)")

from site_check import check_site, missing_tools, report

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = os.environ.get("ATTNLAB_REQUIRE_SITE") == "1"
KERNEL_NOTEBOOK = "notebooks/10_backward_kernel8_streaming.html"

CODE = re.compile(r"^(```|~~~).*?^\1|`[^`\n]*`", re.S | re.M)     # fenced blocks, inline code
MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$(?=\S)[^$]+?(?<=\S)\$(?!\d)|\\begin\{", re.S)


def unavailable(what):
    """Skip, naming what to install; under ATTNLAB_REQUIRE_SITE=1, fail instead."""
    if REQUIRED:
        pytest.fail(f"ATTNLAB_REQUIRE_SITE=1, but the site test cannot run: {what}")
    pytest.skip(what)


def page_of(source):
    """The site's page (relative path) for a source file of the repository."""
    relative = source.relative_to(ROOT).with_suffix(".html").as_posix()
    return "index.html" if relative == "README.html" else relative


def sources():
    """The repository's files that become pages of the site, with their markdown text."""
    for path in sorted(ROOT.glob("notebooks/**/*.ipynb")):
        if ".ipynb_checkpoints" not in path.parts:
            cells = nbformat.read(path, as_version=4).cells
            yield path, "\n".join(c.source for c in cells if c.cell_type == "markdown")
    for path in [ROOT / "README.md", *ROOT.glob("docs/*.md"), ROOT / "notebooks/exercises/README.md"]:
        yield path, path.read_text()


def pages_with_math():
    """The pages whose source has $...$, $$...$$ or \\begin{...} outside code."""
    return {page_of(path) for path, text in sources() if MATH.search(CODE.sub("", text))}


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The site, built once per session by the README's command; (html folder, its output)."""
    missing = [name for name in ("sphinx", "myst_nb", "furo") if find_spec(name) is None]
    if missing:
        unavailable(f"building the site needs {', '.join(missing)}: pip install -e \".[site]\"")
    build = tmp_path_factory.mktemp("site")
    start = time.perf_counter()
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "build_site.py"), "--build", str(build)],
                         capture_output=True, text=True, timeout=900)
    output = run.stdout + run.stderr
    print(f"site built in {time.perf_counter() - start:.1f} s")
    assert run.returncode == 0, f"tools/build_site.py failed (exit {run.returncode}):\n{output}"
    return build / "html", output


def test_the_site_builds_without_a_warning(site):
    _, output = site
    problems = [line for line in output.splitlines() if re.search(r"WARNING|ERROR|CRITICAL", line)]
    assert not problems, "the site's build warned:\n" + "\n".join(problems)


def test_every_notebook_exercise_doc_and_kernel_has_a_page(site):
    html, _ = site
    expected = {page_of(path) for path, _ in sources()}
    expected |= {f"kernels/{p.name}.html" for p in ROOT.glob("kernels/*.cu*")}
    missing = sorted(page for page in expected if not (html / page).is_file())
    assert not missing, f"pages missing from the site: {missing}"


def test_kernel_sources_are_highlighted_as_cuda_and_notebooks_link_to_each_other(site):
    html, _ = site
    kernel_page = (html / KERNEL_NOTEBOOK).read_text()
    assert 'class="highlight-cuda' in kernel_page, f"{KERNEL_NOTEBOOK}: no CUDA-highlighted block"
    assert 'href="exercises/e4_tune_kernel8.html' in kernel_page, \
        f"{KERNEL_NOTEBOOK}: its link to exercise 4 is not a link to that exercise's page"


def test_markdown_tables_are_rendered_as_tables(site):
    """Notebook 11's summary table is a text/markdown output: it must not show as raw pipes."""
    html, _ = site
    raw = {page: len(re.findall(r"<p>\|[^<]*\|", (html / page).read_text()))
           for page in sorted(p.relative_to(html).as_posix() for p in html.rglob("*.html"))}
    assert not any(raw.values()), f"markdown tables shown as text: { {p: n for p, n in raw.items() if n} }"
    assert "<table" in (html / "notebooks/11_summary.html").read_text()


def test_mathjax_is_served_by_the_site_itself(site):
    html, output = site
    if "no local MathJax" in output:
        unavailable("the site loads MathJax from a CDN, as the build said: install npm "
                    "(or set ATTNLAB_MATHJAX) so that it gets a copy:\n" + output)
    assert (html / "_static" / "mathjax" / "tex-mml-chtml.js").is_file()
    assert "_static/mathjax/tex-mml-chtml.js" in (html / KERNEL_NOTEBOOK).read_text()


def test_every_page_works_in_chromium(site):
    if missing_tools():
        unavailable(f"the browser test needs {missing_tools()}")
    html, _ = site
    math_pages = pages_with_math()
    assert KERNEL_NOTEBOOK in math_pages and "notebooks/01_cpu_reference.html" in math_pages
    start = time.perf_counter()
    problems = check_site(html, math_pages)
    print(f"every page opened in Chromium in {time.perf_counter() - start:.1f} s")
    assert not problems, "pages of the site that are broken in Chromium:\n" + report(problems)


PLANTED = {
    "image": ('<img src="../_images/planted-missing.png" alt="planted">',
              "image did not load: ../_images/planted-missing.png"),
    "link": ('<a href="02_no_such_notebook.html">planted</a>',
             "broken link: notebooks/02_no_such_notebook.html"),
    "anchor": ('<a href="02_forward_pass.html#no-such-heading">planted</a>',
               "broken anchor: notebooks/02_forward_pass.html#no-such-heading"),
    "math": (r'<span class="math notranslate nohighlight">\(\frac{1}{2}}\)</span>',
             "MathJax error: Extra close brace or missing open brace"),
    "script": ('<script>throw new Error("planted script error")</script>',
               "page error: planted script error"),
}


def test_the_checker_reports_a_page_broken_on_purpose(site, tmp_path):
    if missing_tools():
        unavailable(f"the browser test needs {missing_tools()}")
    html, _ = site
    broken = tmp_path / "html"
    shutil.copytree(html, broken)
    page = broken / "notebooks" / "01_cpu_reference.html"
    planted = "".join(tag for tag, _ in PLANTED.values())
    page.write_text(page.read_text().replace("</article>", planted + "</article>", 1))
    # a page with math whose MathJax never loads
    no_mathjax = broken / "notebooks" / "02_forward_pass.html"
    text, removed = re.subn(r'<script[^>]*src="[^"]*mathjax[^"]*"[^>]*></script>', "",
                            no_mathjax.read_text())
    assert removed == 1, "notebooks/02_forward_pass.html: no MathJax script tag to remove"
    no_mathjax.write_text(text)
    pages = ["notebooks/01_cpu_reference.html", "notebooks/02_forward_pass.html",
             "notebooks/03_backward_kernel1_naive.html"]
    problems = check_site(broken, pages_with_math(), pages=pages)
    assert sorted(problems) == pages[:2], report(problems)
    found = problems["notebooks/01_cpu_reference.html"]
    for kind, (_, expected) in PLANTED.items():
        assert any(expected in problem for problem in found), \
            f"the planted {kind} was not reported as {expected!r}; the checker said:\n" + report(problems)
    assert any("no rendered math" in problem for problem in problems["notebooks/02_forward_pass.html"]), \
        report(problems)
