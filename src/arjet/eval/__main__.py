"""`python -m arjet.eval ...` = `arjet eval ...`; also `accelerate launch [...] -m arjet.eval ...`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
