"""A checkpoint that runs code when unpickled: what safe loading must refuse."""

from pathlib import Path


def _mark(path: str) -> None:
    Path(path).write_text("unpickled")


class Payload:
    """Unpickling this runs `_mark`: a stand-in for a malicious object inside a checkpoint."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return _mark, (str(self.marker),)
