"""nvcc's messages about the student's source, with the lines numbered as in the notebook cell
the source was written in."""
import re
from pathlib import Path

from .spec import FILENAME


def cell_line_offset(source, history=None):
    """How many lines of the notebook cell come before ``source``, or None if not found.

    The cell is looked up in IPython's input history (``history``: the cells' texts, newest
    last; by default the running IPython's). Line n of the source is line n + offset of
    that cell, which is what Jupyter shows when line numbers are on.
    """
    if not source.strip():
        return None
    if history is None:
        try:
            from IPython import get_ipython
            ip = get_ipython()
            history = list(ip.history_manager.input_hist_raw) if ip is not None else []
        except Exception:
            history = []
    for cell in reversed(list(history)):
        i = cell.find(source)
        if i >= 0:
            return cell.count("\n", 0, i)
    return None


# nvcc's front end writes "file(12): error: ...", its preprocessor (gcc) "file:12:5: error: ..."
_ENTRY = re.compile(r"^(?P<file>.*?)\((?P<line>\d+)\): (?P<sev>error|warning)(?: #[\w-]+)?: "
                    r"(?P<msg>.*)$")
_ENTRY_GCC = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+): "
                        r"(?P<sev>fatal error|error|warning): (?P<msg>.*)$")


def entry(line):
    """{file, line, sev ("error" | "warning"), col, msg, raw} of one message line, or None."""
    m = _ENTRY.match(line.strip()) or _ENTRY_GCC.match(line.strip())
    if not m:
        return None
    d = m.groupdict()
    d["sev"] = "error" if "error" in d["sev"] else "warning"
    d["col"] = int(d["col"]) if d.get("col") else None
    d["raw"] = line
    return d


def entries(text):
    """[(entry, lines that follow it: the echoed source line and the caret)] of nvcc's output."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = entry(lines[i])
        i += 1
        if not m:
            continue
        follow = []
        while i < len(lines) and not entry(lines[i]) and \
                (lines[i].startswith(" ") or lines[i].strip().startswith("^")):
            follow.append(lines[i])
            i += 1
        out.append((m, follow))
    return out


def without_file(nvcc_text, filename):
    """nvcc's output without the messages about ``filename`` (and the lines that follow them:
    the echoed source line and the caret); every other line is kept."""
    keep, skipping = [], False
    for line in nvcc_text.splitlines():
        m = entry(line)
        if m:
            skipping = m["file"] == filename
        elif not (skipping and (line.startswith(" ") or line.strip().startswith("^"))):
            skipping = False
        if not skipping:
            keep.append(line)
    return "\n".join(keep)


def format_compile_error(nvcc_text, source, filename=FILENAME, offset=None, max_errors=3):
    """nvcc's output turned into a short report about the student's own lines.

    Keeps the first ``max_errors`` errors (warnings are counted, not shown). For an error
    in ``filename`` it shows the line number as in the cell (line + ``offset`` when the
    cell is known), the source line, and nvcc's caret under the right column.
    """
    found = entries(nvcc_text)
    errors = [(m, f) for m, f in found if m["sev"] == "error"]
    n_warn = sum(1 for m, _ in found if m["sev"] == "warning")
    where = ("line numbers as in the cell where your kernel is written" if offset is not None
             else "line numbers count from the first line of your kernel's source"
             if Path(filename).name == FILENAME else f"line numbers as in {filename}")
    out = [f"your kernel does not compile. nvcc says ({where}):"]
    if not errors:
        lines = nvcc_text.splitlines()
        other = [ln for ln in lines[1:] if ln.strip()] or lines
        return "\n".join(out + ["  " + ln for ln in other[:12]])
    src_lines = source.splitlines()
    for m, follow in errors[:max_errors]:
        out += _error_lines(m, follow, src_lines, filename, offset)
    if len(errors) > max_errors:
        out.append(f"  ... and {len(errors) - max_errors} more error(s): fix the first one first, "
                   f"the others often follow from it")
    if n_warn:
        out.append(f"  ({n_warn} warning(s) not shown)")
    return "\n".join(out)


def _error_lines(m, follow, src_lines, filename, offset):
    """One error: its line as in the cell, the student's line and a caret under the column."""
    line = int(m["line"])
    if Path(m["file"]).name != Path(filename).name:
        return [f"  {m['file']}({line}): error: {m['msg']}"] + ["  " + f for f in follow[:2]]
    shown = line + (offset or 0)
    out = [f"  line {shown}: error: {m['msg']}"]
    src = src_lines[line - 1] if 0 < line <= len(src_lines) else None
    if src is None:
        return out
    out.append(f"  {shown:>5} | {src.rstrip()}")
    if m["col"] is not None:                        # the preprocessor gives the column
        col = m["col"] - 1 if 0 < m["col"] <= len(src) + 1 else None
    else:
        echo = next((f for f in follow if f.strip() and set(f.strip()) != {"^"}), None)
        caret = next((f for f in follow if f.strip() == "^"), None)
        col = _caret_column(src, echo, caret)
    if col is not None:
        out.append(f"  {'':>5} | {' ' * col}^")
    if m["msg"].startswith("expected a \";\"") and line > 1:
        out.append(f"  {'':>5}   (nvcc reports a missing ';' where the next statement starts: "
                   f"look at the end of line {shown - 1})")
    return out


def _caret_column(src, echo, caret):
    """The column in the student's line of the token nvcc's caret points at, or None.

    nvcc echoes the line after the preprocessor (BLOCK_SIZE already replaced by 256, say),
    so the column is found by the token under the caret, not by counting.
    """
    if echo is None or caret is None:
        return None
    at = caret.index("^")
    shift = (len(src) - len(src.lstrip())) - (len(echo) - len(echo.lstrip()))
    if echo.strip() == src.strip():
        col = at + shift
        return col if 0 <= col <= len(src) else None
    m = re.match(r"\w+|\S", echo[at:]) if at < len(echo) else None
    if not m:
        return None
    spots = [i.start() for i in re.finditer(re.escape(m.group()), src)]
    if not spots:
        return None
    return min(spots, key=lambda i: abs(i - (at + shift)))
