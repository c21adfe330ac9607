"""`python -m arjet COMMAND ...` is `arjet COMMAND ...` (also under `accelerate launch -m arjet ...`)."""

from .cli import entry

if __name__ == "__main__":
    entry()
