"""The `ember` command line: `ember bench ...` and `ember demo`.

Installed as the console script `ember` (entry point `ember.cli:main`) and
reachable as `python -m ember`.  Each subcommand lives in its own module and
is imported only when asked for.
"""
from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

USAGE = """\
usage: {prog} <command> [options]

commands:
  demo     compile a built-in model with ember, check it against eager and time it
           (no arguments needed; about a minute on a small CPU)
  options  print ember's options (options={{...}} or EMBER_<NAME>) and the modes
  bench    benchmark eager / inductor / ember on a model zoo or on memory-bound kernels
           ({prog} bench --help for the options, {prog} bench --list for the zoo)

examples:
  {prog} demo
  {prog} bench --models builtin --backends eager,inductor,ember
  {prog} bench --models all --backends inductor,ember:reduce-overhead --train --dtype bf16
  {prog} bench --kernels --backends inductor,ember
"""


def prog_name() -> str:
    """`python -m ember` when run that way, else the script's name (`ember`)."""
    a0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "ember"
    if a0 in ("__main__.py", "-m", "-c", ""):
        return "python -m ember"
    return a0 if a0 not in ("cli.py",) else "ember"


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog_name()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE.format(prog=prog))
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd in ("--version", "version"):
        from . import __version__
        print(f"ember {__version__}")
        return 0
    if cmd == "bench":
        from .tools.bench import main as bench_main
        return bench_main(rest, prog=f"{prog} bench")
    if cmd in ("options", "--options"):
        from ._options import options
        options()
        return 0
    if cmd == "demo":
        from .tools.demo import main as demo_main
        return demo_main(rest, prog=f"{prog} demo")
    print(f"{prog}: unknown command {cmd!r}\n", file=sys.stderr)
    print(USAGE.format(prog=prog), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
