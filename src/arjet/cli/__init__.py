"""The command line, `arjet COMMAND ...` (also `python -m arjet COMMAND ...`).

`main` (in `main.py`) wires one module per command: `generate`, `bench`, `eval`, `domain_report`, `app`,
`train`, `convert_vqgan`, `samplers`, `models`; `options` holds the options and checks they share. This
package is the only one that parses arguments; the library below it takes plain values.
"""

from .main import entry, main

__all__ = ["entry", "main"]
