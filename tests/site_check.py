"""Open every page of a built site in headless Chromium and say what is broken on each.

    python tests/site_check.py site/_build/html     # prints the problems; exit 1 if any
    python tests/site_check.py site/_build/html --screenshots docs/screenshots

Serves the folder over http on 127.0.0.1 (a thread with http.server), drives Debian's
/usr/bin/chromium with Playwright's Python API (no browser is downloaded), and reports, per
page: a page error or console error, a request that failed or answered >= 400, a MathJax
error (`mjx-merror`), math that MathJax did not render (a Sphinx math element without an
`mjx-container`, or none at all on a page listed as having math), an image that did not
load (naturalWidth 0), and a link into the site to a file that does not exist or to an
anchor that no element of the target page has.
"""
import argparse
import contextlib
import functools
import http.server
import os
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

CHROMIUM = os.environ.get("ATTNLAB_CHROMIUM", "/usr/bin/chromium")
# As root, in a closed network: no sandbox (root), no GPU, and none of the connections that
# Chromium makes at start (QUIC, component updates, sync), which this network refuses.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
PAGE_TIMEOUT_MS = 60_000

# Runs in the page once it has loaded: waits for MathJax's typesetting and for every image,
# then returns what the checks need.
INSPECT = """async () => {
  const M = window.MathJax;
  let mathjax = "absent";
  if (M && M.startup && M.startup.promise) { await M.startup.promise; mathjax = "ran"; }
  else if (M) { mathjax = "configured, never started (its script did not load)"; }
  const images = Array.from(document.images);
  await Promise.all(images.map(img => img.complete ? null : new Promise(done => {
    img.addEventListener("load", done); img.addEventListener("error", done);
    setTimeout(done, 10000); })));
  const mathNodes = Array.from(document.querySelectorAll(".math"));
  return {
    mathjax,
    math_nodes: mathNodes.length,
    unrendered: mathNodes.filter(n => !n.querySelector("mjx-container"))
                         .map(n => n.textContent.slice(0, 60)),
    rendered: document.querySelectorAll("mjx-container").length,
    merrors: Array.from(document.querySelectorAll("mjx-merror"))
                  .map(e => e.getAttribute("data-mjx-error") || e.textContent.slice(0, 60)),
    broken_images: images.filter(img => img.naturalWidth === 0)
                         .map(img => img.getAttribute("src")),
    links: Array.from(document.querySelectorAll("a[href]")).map(a => a.href),
    ids: Array.from(document.querySelectorAll("[id], a[name]")).map(e => e.id || e.name),
  };
}"""


def missing_tools():
    """What must be installed before pages can be checked, as a sentence; None if nothing."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append('Playwright\'s Python API (pip install -e ".[site]")')
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"Chromium at {CHROMIUM} (apt-get install chromium)")
    return " and ".join(missing) or None


@contextlib.contextmanager
def serve(root):
    """Serve the folder root on 127.0.0.1 at a free port; yields the base URL."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def browser():
    """A headless Chromium (Debian's binary, a new empty profile), closed afterwards."""
    from playwright.sync_api import sync_playwright
    with tempfile.TemporaryDirectory(prefix="attnlab-chromium-") as profile, \
            sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


def page_files(root):
    """Every HTML page under root, as paths relative to it, in sorted order."""
    return sorted(p.relative_to(root).as_posix() for p in Path(root).rglob("*.html"))


def ignored(message):
    """The browser's own request for /favicon.ico, which the site does not have."""
    return message.location.get("url", "").endswith("/favicon.ico")


def target_file(root, base, url):
    """The file under root that a same-site URL names (a folder: its index.html)."""
    path = unquote(urlparse(url).path)[len(urlparse(base).path):]
    target = Path(root) / path
    return target / "index.html" if path.endswith("/") or target.is_dir() else target


def check_page(browser, root, base, name, has_math):
    """Open one page in a new tab of browser; returns (problems on it, its same-site links
    to anchors as (page, anchor), its ids)."""
    page = browser.new_page()
    events = []
    page.on("console", lambda m: m.type == "error" and not ignored(m) and events.append(
        f"console error: {m.text} (at {m.location.get('url')}:{m.location.get('lineNumber')})"))
    page.on("pageerror", lambda e: events.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: events.append(f"request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and events.append(
        f"HTTP {r.status} for {r.url}"))
    try:
        page.goto(base + name, wait_until="load", timeout=PAGE_TIMEOUT_MS)
        seen = page.evaluate(INSPECT)
        if seen["math_nodes"]:                 # MathJax's fonts: a late failure still counts
            page.wait_for_load_state("networkidle", timeout=PAGE_TIMEOUT_MS)
    finally:
        page.close()
    problems = list(events)
    problems += [f"MathJax error: {e}" for e in seen["merrors"]]
    if seen["unrendered"]:
        problems.append(f"{len(seen['unrendered'])} of {seen['math_nodes']} math elements not "
                        f"rendered (MathJax: {seen['mathjax']}), first: {seen['unrendered'][0]!r}")
    if has_math and seen["rendered"] == 0:
        problems.append(f"no rendered math (mjx-container), but its source has math "
                        f"(MathJax: {seen['mathjax']})")
    problems += [f"image did not load: {src}" for src in seen["broken_images"]]
    links = []
    for url in seen["links"]:
        if not url.startswith(base):
            continue
        address, anchor = urldefrag(url)
        target = target_file(root, base, address)
        if not target.is_file():
            problems.append(f"broken link: {url[len(base):]} (no file {target.relative_to(root)})")
        elif anchor:
            links.append((target.relative_to(root).as_posix(), unquote(anchor)))
    return problems, links, set(seen["ids"])


def check_site(root, pages_with_math=(), pages=None):
    """Open every page under root (or those named in pages, relative paths); returns
    {page: [problem, ...]} for the pages with problems.

    pages_with_math: the pages whose source has math, each of which must show rendered math.
    A link to an anchor of an opened page is checked against that page's ids."""
    root = Path(root)
    problems, links, ids = {}, {}, {}
    with serve(root) as base, browser() as chromium:
        for name in pages or page_files(root):
            found, links[name], ids[name] = check_page(chromium, root, base, name,
                                                       name in pages_with_math)
            problems[name] = found
    for name, anchored in links.items():
        for target, anchor in anchored:
            if target in ids and anchor not in ids[target]:
                problems[name].append(f"broken anchor: {target}#{anchor}")
    return {name: found for name, found in problems.items() if found}


# docs/screenshots: file -> (page, CSS selector of the element to centre in the window, or None)
SCREENSHOTS = {
    "landing.png": ("index.html", None),
    "notebook10.png": ("notebooks/10_backward_kernel8_streaming.html", None),
    "notebook10-plot.png": ("notebooks/10_backward_kernel8_streaming.html",
                            "#a-block-size-sweep-of-the-softmax-backward-alone img"),
}


def take_screenshots(root, folder):
    """Write SCREENSHOTS (1280x900 PNGs, math typeset) into folder; returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with serve(root) as base, browser() as chromium:
        page = chromium.new_page()
        for name, (address, selector) in SCREENSHOTS.items():
            page.goto(base + address, wait_until="load", timeout=PAGE_TIMEOUT_MS)
            page.evaluate(INSPECT)                  # waits for MathJax and the images
            if selector:                            # no smooth scrolling: it would be caught midway
                page.evaluate("selector => { document.documentElement.style.scrollBehavior = 'auto';"
                              " document.querySelector(selector).scrollIntoView({block: 'center'}); }",
                              selector)
            page.screenshot(path=folder / name)
    return [folder / name for name in SCREENSHOTS]


def report(problems):
    """The problems as text, one line each, under the name of its page."""
    return "\n".join(f"{name}:\n" + "\n".join(f"  - {p}" for p in found)
                     for name, found in problems.items())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. site/_build/html")
    parser.add_argument("--screenshots", type=Path, metavar="FOLDER",
                        help=f"instead of checking, write {', '.join(SCREENSHOTS)} there")
    args = parser.parse_args(argv)
    if missing_tools():
        sys.exit(f"cannot open pages: install {missing_tools()}")
    if args.screenshots:
        print("\n".join(map(str, take_screenshots(args.site, args.screenshots))))
        return 0
    found = check_site(args.site)
    print(report(found) or f"every page of {args.site} passed")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
