"""Argument checks shared by the library, the command line and the demo.

One place says what a valid integer, number, flag, choice, seed or device is. Every check raises a
`ValueError` that names the argument, shows the bad value and says what is allowed. The command line wraps
the same checks as `argparse` types (`arjet.cli.types`), so a bad option ends as `arjet CMD: error:
argument --NAME: ...` with exit status 2, before anything is loaded.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import reprlib
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# seeds key one 63-bit random stream per image: image i of a call with `seed=s` uses s + i
SEED_LIMIT = 2**63
# a JSON, tokenizer or prompt file read whole: the largest tokenizer.json of the supported families is ~11 MB
MAX_TEXT_FILE_BYTES = 256 * 2**20


def is_integer(value: Any) -> bool:
    """An `int` that is not a `bool` (`True` is an int in Python, never a meaningful count or seed)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An `int` or `float` that is not a `bool`."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _short_repr() -> reprlib.Repr:
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother, short.maxlist, short.maxdict = 2, 60, 60, 4, 4
    return short


_SHORT_REPR = _short_repr()


def shown(value: Any) -> str:
    """`value` as an error message quotes it (its repr), short however long or deeply nested it is: text
    and other values cut to 60 characters around a `...`, 4 items of a list or dict, 2 levels. A message
    that echoes what a user sent (a request field, a sampler spec) stays a line, not the size of the input."""
    return _SHORT_REPR.repr(value)


def _show(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def range_text(minimum: float | None, maximum: float | None, exclusive_minimum: bool = False) -> str:
    """How an error message states a range: `>= 1`, `from 1 to 64`, `in (0, 1]`."""
    low = ">" if exclusive_minimum else ">="
    if minimum is not None and maximum is not None:
        if exclusive_minimum:
            return f"in ({_show(minimum)}, {_show(maximum)}]"
        return f"from {_show(minimum)} to {_show(maximum)}"
    if minimum is not None:
        return f"{low} {_show(minimum)}"
    if maximum is not None:
        return f"<= {_show(maximum)}"
    return ""


def integer(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """`value` as an int within [minimum, maximum]; ValueError naming `name` otherwise."""
    if (
        not is_integer(value)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        bounds = range_text(minimum, maximum)
        raise ValueError(f"{name} must be an integer{' ' + bounds if bounds else ''}, got {shown(value)}")
    return value


def optional_integer(
    name: str, value: Any, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    return None if value is None else integer(name, value, minimum, maximum)


def finite_within(
    value: float, minimum: float | None, maximum: float | None, exclusive_minimum: bool = False
) -> bool:
    """`value` is finite (an integer too large for a float is not) and inside the bounds."""
    try:
        if not math.isfinite(value):
            return False
    except OverflowError:  # an int beyond 1.8e308, e.g. 10**4000
        return False
    if minimum is not None and not (value > minimum if exclusive_minimum else value >= minimum):
        return False
    return maximum is None or value <= maximum


def number(
    name: str,
    value: Any,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    exclusive_minimum: bool = False,
    note: str = "",
) -> float:
    """`value` as a finite float within the bounds; ValueError naming `name` otherwise (NaN and infinities
    never pass)."""
    if not (is_number(value) and finite_within(value, minimum, maximum, exclusive_minimum)):
        bounds = range_text(minimum, maximum, exclusive_minimum)
        hint = f" ({note})" if note else ""
        raise ValueError(
            f"{name} must be a finite number{' ' + bounds if bounds else ''}{hint}, got {shown(value)}"
        )
    return float(value)


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {shown(value)}")
    return value


def choice(name: str, value: Any, choices: Iterable[str]) -> str:
    allowed = tuple(choices)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {shown(value)}")
    return value


def seed(name: str, value: Any, count: int = 1) -> int:
    """A seed `s` for `count` images (`s`, `s + 1`, ..., `s + count - 1`), each in `0 <= seed < 2**63`."""
    if not is_integer(value) or not 0 <= value <= SEED_LIMIT - count:
        if count == 1:
            raise ValueError(f"{name} must be an integer from 0 to 2**63 - 1, got {shown(value)}")
        raise ValueError(
            f"{name} must be an integer with 0 <= {name} and {name} + {count - 1} < 2**63 (image i of {count} "
            f"uses {name} + i), got {shown(value)}"
        )
    return value


def text(name: str, value: str) -> str:
    """`value` if it is text that UTF-8 can hold: a lone surrogate (how Python keeps a byte that was not UTF-8,
    e.g. from a command line in another encoding) is a ValueError naming it and where it is."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(value[error.start])
        stand_in = (
            f" (Python's stand-in for a byte 0x{code - 0xDC00:02x} that was not UTF-8)"
            if code >= 0xDC80
            else ""
        )
        raise ValueError(
            f"{name} holds U+{code:04X} at character {error.start}, a lone surrogate{stand_in}; it is not "
            "text: write it in UTF-8"
        ) from None
    return value


# -- numbers written as text ------------------------------------------------------------------------
# ASCII only: Python's int() and float() also take "1_6" and other scripts' digits ("８"), which no one
# types on purpose into a command line or a sampler spec. Each pattern splits a text one way only, so a
# match fails in time linear in the text (digits in two adjacent repeats, as `[0-9]+\.?[0-9]*`, take
# quadratic time on a long run of digits that ends badly: hours for the 900,000 a request body holds)
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_NUMBER_TEXT = re.compile(
    r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)", re.IGNORECASE
)


def integer_from_text(text: str) -> int | None:
    """The integer `text` spells in ASCII digits (an optional sign, surrounding spaces allowed), else None."""
    stripped = text.strip()
    if not _INTEGER_TEXT.fullmatch(stripped):
        return None
    try:
        return int(stripped)
    except ValueError:  # more digits than Python converts (4,300): no bound admits it anyway
        return None


def integers_from_text(text: str) -> list[int] | None:
    """The integers of a comma-separated list in ASCII digits (`"1,2,3"`), else None."""
    values = [integer_from_text(piece) for piece in text.split(",")]
    return None if any(value is None for value in values) else values


def number_from_text(text: str) -> float:
    """The number `text` spells in ASCII (`1.5`, `-2e3`, `inf`, `nan`), else NaN (which no range admits)."""
    stripped = text.strip()
    return float(stripped) if _NUMBER_TEXT.fullmatch(stripped) else math.nan


# -- JSON from files arjet did not write (or that anyone may have edited) ----------------------------------
# Python's parser recurses once per nested array or object and fails with a RecursionError near 1,000
# levels; what reads the value afterwards (comparisons, copies, transformers' configs) recurses too. No
# config, record or index arjet reads nests beyond a handful of levels.
MAX_JSON_DEPTH = 64


def json_value(data: str | bytes, where: str) -> Any:
    """The value of the JSON document `data` (a file's contents, a line of a log); a ValueError naming
    `where` for anything else: bytes that are not UTF-8, text that is not JSON, arrays or objects nested
    deeper than `MAX_JSON_DEPTH`, a number Python will not read (more than 4,300 digits)."""
    import json

    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise ValueError(
                f"{where} is not UTF-8 text (the byte 0x{data[error.start]:02x} at offset {error.start})"
            ) from None
    too_deep = ValueError(
        f"{where} holds JSON nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects, which no file "
        "arjet reads has"
    )
    try:
        value = json.loads(data)
    except json.JSONDecodeError as error:
        line = f"line {error.lineno}, " if error.lineno > 1 else ""
        raise ValueError(f"{where} is not valid JSON ({error.msg} at {line}column {error.colno})") from None
    except RecursionError:
        raise too_deep from None
    except ValueError as error:
        raise ValueError(f"{where} is not JSON that arjet can read ({error})") from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise too_deep
    return value


def json_depth(value: Any) -> int:
    """How deep lists and dicts nest in `value` (a scalar: 0), counted level by level without recursion."""
    depth, level = 0, [value] if isinstance(value, (list, dict)) else []
    while level:
        depth += 1
        level = [
            item
            for container in level
            for item in (container.values() if isinstance(container, dict) else container)
            if isinstance(item, (list, dict))
        ]
    return depth


def read_text_file(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of the text file `path` (a config, a tokenizer, a prompt list, a run's records): ValueError
    naming it when it is not a regular file (a FIFO or a device would block the read or never end it) or
    holds more than `limit` bytes (default `MAX_TEXT_FILE_BYTES`; refused before reading, never read past);
    OSError for one that cannot be read."""
    path, limit = Path(path), MAX_TEXT_FILE_BYTES if limit is None else limit
    check_text_file(path, limit)
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise ValueError(f"{path} holds more than {limit:,} bytes")
    return data


def check_text_file(path: str | os.PathLike, limit: int | None = None) -> None:
    """`read_text_file`'s refusals without the read, for a file another library reads whole: a path that
    exists but is not a regular file, or one of more than `limit` bytes (default `MAX_TEXT_FILE_BYTES`)."""
    path, limit = Path(path), MAX_TEXT_FILE_BYTES if limit is None else limit
    if path.exists() and not path.is_file():
        raise ValueError(f"{path} is not a regular file (a directory, FIFO, socket or device); give a file")
    if path.exists() and path.stat().st_size > limit:
        raise ValueError(f"{path} holds more than {limit:,} bytes, the most arjet reads from such a file")


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value in the file `path` (`json_value`'s ValueError, naming the file, for anything else;
    `read_text_file`'s for a file that is not regular or too large); OSError for one that cannot be read."""
    return json_value(read_text_file(path), str(path))


def read_json_lines(path: str | os.PathLike) -> list[Any]:
    """The values of a JSON-lines file, one per line that is not blank (`json_value`'s ValueError naming
    the file and the line for anything else); OSError for a file that cannot be read."""
    lines = enumerate(read_text_file(path).splitlines(), 1)
    return [json_value(line, f"{path}, line {number}") for number, line in lines if line.strip()]


# -- devices -------------------------------------------------------------------------------------------
def check_device(text: Any, name: str = "device") -> str:
    """`text` if it names a torch device present on this machine; ValueError saying what is there."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{name} {text!r} is not a torch device; use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"{name} {text!r}: this machine has no CUDA GPU; use cpu")
        if device.index is not None and device.index >= count:
            raise ValueError(
                f"{name} {text!r}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}"
            )
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"{name} {text!r}: MPS is not available on this machine; use cpu")
    elif device.type != "cpu":
        raise ValueError(f"{name} {text!r} is not supported; use cpu or cuda")
    if device.type in ("cpu", "mps") and device.index not in (None, 0):
        # torch takes "cpu:99" and runs on the one CPU device anyway: a typo, or a GPU index meant for cuda
        raise ValueError(
            f"{name} {text!r}: this machine has one {device.type} device, {device.type} (or {device.type}:0)"
        )
    return str(text)


# -- checkpoint folders --------------------------------------------------------------------------------
# transformers, diffusers and open_clip read a folder's files deep inside their loaders, where a file cut
# short or malformed ends as the library's own exception (safetensors' "incomplete metadata", a
# RecursionError from JSON) and a traceback. Checked first, each file by name, from its header only.
TORCH_ZIP_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


# sentencepiece, merges / vocab lists, tiktoken, chat templates: files a tokenizer library reads whole
TOKENIZER_SUFFIXES = (".model", ".txt", ".tiktoken", ".jinja")


def check_checkpoint_files(name: str, folder: str | os.PathLike) -> None:
    """Refuse a checkpoint folder whose files (its own and its component folders', two levels down) a loader
    could not read: a JSON file `json_value` refuses, a safetensors file whose header is unreadable or
    describes more bytes than the file holds (cut short), a torch zip file without its directory (cut
    short), any of those that is not a regular file, a tokenizer's file that is not regular or is larger than
    `MAX_TEXT_FILE_BYTES`. ValueError naming `name`, the
    folder and the file. Reads headers only, never a tensor."""
    root = Path(folder).expanduser()
    try:
        _check_component_folders(root)
    except ValueError as error:
        raise ValueError(f"{name} {str(folder)!r}: {error}") from None
    for path in sorted([*root.glob("*"), *root.glob("*/*"), *root.glob("*/*/*")]):
        suffix = path.suffix.lower()
        if suffix not in (".json", ".safetensors", *TORCH_ZIP_SUFFIXES, *TOKENIZER_SUFFIXES):
            continue
        try:
            if suffix in TOKENIZER_SUFFIXES:
                check_text_file(path)  # a FIFO blocks the tokenizer's read; a huge file fills memory
            elif not path.is_file():  # a loader's read of a FIFO or a device blocks, or never ends
                raise ValueError(f"{path} is not a regular file (a directory, FIFO, socket or device)")
            elif suffix == ".json":
                index = read_json(path)
                if path.name.endswith(".index.json"):
                    _check_shard_index(path, index)
            elif suffix == ".safetensors":
                _check_safetensors_header(path)
            else:
                _check_torch_zip(path)
        except ValueError as error:
            raise ValueError(f"{name} {str(folder)!r}: {error}") from None


def _check_component_folders(root: Path) -> None:
    """Each component `model_index.json` names must be a folder when present: a loader given a FIFO or a
    device in its place blocks, or takes the path for a hub id and blames its spelling."""
    index_path = root / "model_index.json"
    if not index_path.is_file():
        return
    index = read_json(index_path)
    if not isinstance(index, dict):
        return  # the loop over the folder's JSON files names it
    for component, value in index.items():
        path = root / component
        if isinstance(value, list) and (path.exists() or path.is_symlink()) and not path.is_dir():
            raise ValueError(
                f"{path} is not a folder (it is a file, FIFO, socket, device or broken link): model_index.json "
                f"names {component!r} as a component, whose files belong in a folder of that name"
            )


def _check_shard_index(path: Path, index: Any) -> None:
    """A sharded checkpoint's index names its shards as files beside it: a name that is absolute or climbs
    out of the folder (`../../etc/passwd`) would have a loader read a file the folder does not hold."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise ValueError(f"{path} has no weight_map object naming its shards")
    for shard in weight_map.values():
        inside = isinstance(shard, str) and not Path(shard).is_absolute() and ".." not in Path(shard).parts
        if not inside or not shard:
            raise ValueError(
                f"{path} names the shard {shard!r}, which is not a file inside its folder (a relative name "
                "without '..' is allowed)"
            )
        if not (path.parent / shard).is_file():  # a FIFO or a device would block the loader's read
            raise ValueError(f"{path} names the shard {shard!r}, which is not a regular file beside it")


def _check_safetensors_header(path: Path) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy"):
            pass
    except Exception as error:  # safetensors raises its own SafetensorError for any malformed file
        raise ValueError(f"{path} is not a readable safetensors file ({error})") from None


def _check_torch_zip(path: Path) -> None:
    """A torch file in the zip layout (torch >= 1.6) must end with the zip directory; an older layout (a
    bare pickle) has no header to check."""
    import zipfile

    with open(path, "rb") as handle:
        if handle.read(4) != b"PK\x03\x04":
            return
    try:
        zipfile.ZipFile(path).close()
    except (zipfile.BadZipFile, OSError) as error:
        raise ValueError(f"{path} is a torch file cut short or damaged ({error})") from None


# -- output paths -------------------------------------------------------------------------------------
# What a command may write to: a regular file (new, or one it may overwrite) and folders. Checked before any
# model work by really creating a file in the folder (`os.access` says yes for root on /sys, read-only
# mounts and /proc alike), never by writing the output itself. Nothing is created by a check.


def image_suffixes() -> tuple[str, ...]:
    """File extensions PIL can write (`.png`, `.jpg`, ...; not `.psd`, which it only reads)."""
    import PIL.Image

    PIL.Image.init()
    return tuple(
        sorted(ext for ext, fmt in PIL.Image.registered_extensions().items() if fmt in PIL.Image.SAVE)
    )


def output_file(
    name: str,
    value: Any,
    *,
    suffixes: Iterable[str] | None = None,
    image: bool = False,
    new_folders: bool = False,
) -> Path:
    """The path a command will write a file to, checked before any work: a new name in a writable folder, or a
    regular file there that may be overwritten; never a folder, a device, a FIFO or a socket. The folder
    must exist unless `new_folders` (then it must be makeable). A symbolic link is written through only to
    a regular file (or a new name) with an allowed extension, and the path returned is then the link's
    target; a link to anything else is refused, so its target is never overwritten by surprise."""
    path = _path(name, value)
    if path.is_dir():
        raise ValueError(
            f"{name} {str(value)!r} is a folder; give a file name, e.g. {str(path / 'out.png')!r}"
        )
    allowed = image_suffixes() if image else tuple(suffixes or ())
    _check_suffix(name, value, path, allowed, image)
    target = path
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        if (allowed and target.suffix.lower() not in allowed) or (target.exists() and not target.is_file()):
            raise ValueError(
                f"{name} {str(value)!r} is a symbolic link to {str(target)!r}, which is not "
                f"{'an image' if image else 'a'} file arjet may overwrite; remove the link or name another file"
            )
    if target.exists():
        if not target.is_file():
            raise ValueError(
                f"{name} {str(value)!r} is not a regular file (a device, FIFO or socket); give a file name"
            )
        _check_overwritable(name, value, target)
    elif new_folders:
        output_dir(name, target.parent, shown=value)
    else:
        _check_folder_exists(name, value, target.parent)
        _check_can_create(name, value, target.parent)
    return target


def output_dir(name: str, value: Any, *, empty: bool = False, shown: Any = None, why_empty: str = "") -> Path:
    """The path of a folder a command will write into, checked before any work: an existing folder where a
    file can be created (with `empty`, holding nothing yet), or a new one whose nearest existing parent is
    such a folder (the command makes it, with any missing parents). `shown`: the value to name in errors;
    `why_empty`: said when a folder that must be empty is not."""
    path = _path(name, value)
    shown = value if shown is None else shown
    if path.exists():
        if not path.is_dir():
            raise ValueError(
                f"{name} {str(shown)!r} is a file, not a folder; give a folder (new or empty) instead"
            )
        held = sorted(entry.name for entry in itertools.islice(path.iterdir(), 5)) if empty else []
        if held:
            listed = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
            raise ValueError(
                f"{name} {str(shown)!r} is a folder that is not empty (it holds {listed}); "
                f"{why_empty + '; ' if why_empty else ''}give a new or empty folder"
            )
        _check_can_create(name, shown, path)
        return path
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise ValueError(
            f"{name} {str(shown)!r}: {str(existing)!r} is a file, so no folder can be made there"
        )
    _check_can_create(name, shown, existing)
    return path


def missing_folders(path: str | os.PathLike) -> list[Path]:
    """`path` and those of its parents that do not exist yet, the deepest first (what making it creates)."""
    path = Path(path).expanduser()
    existing = _nearest_existing(path)
    return [path, *path.parents][: len(path.parts) - len(existing.parts)]


def _nearest_existing(path: Path) -> Path:
    """`path`, or its nearest parent that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _path(name: str, value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise ValueError(f"{name} must be a path, got {shown(value)}")
    if "\0" in str(value):
        raise ValueError(f"{name} must be a path, got {shown(value)} (it holds a NUL character)")
    return Path(value).expanduser()


def _check_suffix(name: str, value: Any, path: Path, allowed: tuple[str, ...], image: bool) -> None:
    if allowed and path.suffix.lower() not in allowed:
        shown = ", ".join(s for s in allowed if s in (".png", ".jpg", ".json", ".webp")) or ", ".join(allowed)
        kind = "an image extension arjet can write" if image else "one of"
        raise ValueError(f"{name} must end in {kind} ({shown}), got {str(value)!r}")


def _check_folder_exists(name: str, value: Any, folder: Path) -> None:
    if folder.is_dir():
        return
    existing = _nearest_existing(folder)
    if existing.exists() and not existing.is_dir():
        raise ValueError(
            f"{name} {str(value)!r}: {str(existing)!r} is a file, so no folder can be made there"
        )
    raise ValueError(
        f"{name} {str(value)!r}: the folder {str(folder)!r} does not exist; create it first "
        "(arjet makes no folders for an output file)"
    )


def _check_can_create(name: str, value: Any, folder: Path) -> None:
    """Create (and remove) an empty file in `folder`: the one test that holds for root, /proc, /sys and
    read-only file systems alike."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".arjet-probe-", dir=folder)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ValueError(
            f"{name} {str(value)!r}: no file can be written in {str(folder)!r} ({reason})"
        ) from None
    os.close(handle)
    os.unlink(probe)


def _check_overwritable(name: str, value: Any, path: Path) -> None:
    try:
        os.close(os.open(path, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0)))  # opens, truncates nothing
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ValueError(f"{name} {str(value)!r} exists and cannot be overwritten ({reason})") from None
