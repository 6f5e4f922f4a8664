"""Turn a target's prelude (src/prelude_c.h, src/prelude_cuda.h) into a C
string (build/gen/*_gen.h) that the code generator puts at the top of every
generated kernel file.  A line `#include "name.h"` naming a file beside the
header (the functions both targets share, src/prelude.h, and the special
functions it includes, src/special.h) is replaced by that file's text, its
own such lines replaced in turn, so a generated kernel needs no include path.
Run by setup.py and the Makefile; the output is a build product, never
committed."""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')


def splice(path: str, seen: tuple = ()) -> str:
    """The text of path with its local includes pasted in, recursively (a file
    that includes itself, directly or not, is an error)."""
    if path in seen:
        raise ValueError(f"{path} includes itself")
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    out = []
    for ln in lines:
        m = INCLUDE.match(ln)
        inc = os.path.join(os.path.dirname(path), m.group(1)) if m else None
        if inc and os.path.exists(inc):
            text = splice(inc, seen + (path,))
            out.append(f"/* ---- {m.group(1)}, pasted by tools/embed.py ---- */\n")
            out.append(text if text.endswith("\n") else text + "\n")
            out.append(f"/* ---- end of {m.group(1)} ---- */\n")
        else:
            out.append(ln)
    return "".join(out)


def embed(src: str, dst: str, name: str = "em_prelude") -> None:
    if os.path.exists(src):
        text = splice(src)
    else:  # a build without the file fails when the target is used, not before
        text = f"#error {os.path.basename(src)} was missing when ember was built\n"
    lines = [f"/* generated from {os.path.basename(src)} by tools/embed.py: do not edit */",
             f"static const char {name}[] ="]
    for ln in text.splitlines(keepends=True):
        esc = ln.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        lines.append(f'  "{esc}"')
    lines.append("  ;")
    out = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    old = open(dst, encoding="utf-8").read() if os.path.exists(dst) else None
    if old != out:
        with open(dst, "w", encoding="utf-8") as f:
            f.write(out)


if __name__ == "__main__":
    embed(sys.argv[1], sys.argv[2], *sys.argv[3:4])
