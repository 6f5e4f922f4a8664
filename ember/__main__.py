"""`python -m ember bench ...` / `python -m ember demo`: see ember/cli.py."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
