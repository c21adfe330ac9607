"""`python -m arjet COMMAND ...` is `arjet COMMAND ...` (also under `accelerate launch -m arjet ...`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
