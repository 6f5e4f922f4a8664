"""Turn a runtime header (src/prelude.h, src/prelude_cuda.h) into a C string
(build/gen/*_gen.h) that the code generator puts at the top of every generated
kernel file.  Run by setup.py
and the Makefile; the output is a build product, never committed."""
import os
import sys


def embed(src: str, dst: str, name: str = "em_prelude") -> None:
    if os.path.exists(src):
        with open(src, encoding="utf-8") as f:
            text = f.read()
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
