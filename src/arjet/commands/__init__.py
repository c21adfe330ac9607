"""Command-line commands (`arjet generate`, `arjet bench`); see `arjet.cli`."""
