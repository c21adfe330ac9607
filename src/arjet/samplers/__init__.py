"""Decoding algorithms over a session's grid of image codes, registered by name.

`available()` lists the names; `get("sjd")` builds the default configuration and `get("sjd:window=32,
init=repeat_vertical")` passes options, typed and range-checked by the sampler's own declarations
(`options("sjd")`); a sampler object (`SJD(window=32)`) can be passed anywhere a name can.

Where things are (`docs/architecture.md` has the table): one file per method (`ar.py`, `sjd.py`, `mc_sjd.py`,
`sjd_pac.py`, `eagle.py`, `eagle2.py`, `sjd2.py`, `zipar.py`, `pjd.py`; the relaxed acceptance rules `lantern.py`,
`gsd.py`, `entropy.py`, `cool_sd.py`), the pieces they share in `jacobi.py` (drafts, acceptance rules, verify,
resample, redraft, couple, initial guesses), the contract in `base.py` (what a sampler declares) and
`decode.py` (what `run(decode)` receives: the policy, the random streams, the trace and the loop), options in
`options.py`, names in `registry.py` (composites
`method[+verifier][+rule]` such as `zipar+sjd+lantern`, and the paper names that are aliases of one).
"""

from __future__ import annotations

from .ar import AR
from .base import Part, Sampler, requirements
from .cool_sd import CoolSD
from .decode import (
    Decode,
    DecodeStats,
    DecodeStatus,
    DecodeTrace,
    ImageRandom,
    Interrupted,
    LogitsPolicy,
    LogitsProcessor,
    SamplingOptions,
    Stepper,
    StopFlag,
    Temperature,
    TopK,
    TopP,
    sample,
)
from .eagle import Eagle
from .eagle2 import Eagle2
from .entropy import Entropy
from .gsd import GSD
from .jacobi import INIT_SCHEMES, AcceptanceRule, Exact, RuleContext
from .lantern import BOUNDS, Lantern
from .mc_sjd import MCSJD
from .options import MAX_SIZE, Option, option, options_of, parse_options
from .pjd import PJD
from .registry import available, get, label, options, register
from .sjd import SJD
from .sjd2 import SJD2
from .sjd_pac import SJDPAC
from .zipar import SCHEDULES, ZipAR

__all__ = [
    "AR",
    "BOUNDS",
    "INIT_SCHEMES",
    "MAX_SIZE",
    "MCSJD",
    "PJD",
    "SCHEDULES",
    "SJD",
    "SJD2",
    "SJDPAC",
    "AcceptanceRule",
    "CoolSD",
    "Decode",
    "Eagle",
    "Eagle2",
    "DecodeStats",
    "DecodeStatus",
    "DecodeTrace",
    "Entropy",
    "Exact",
    "GSD",
    "ImageRandom",
    "Interrupted",
    "Lantern",
    "LogitsPolicy",
    "LogitsProcessor",
    "Option",
    "Part",
    "RuleContext",
    "Sampler",
    "Stepper",
    "StopFlag",
    "SamplingOptions",
    "Temperature",
    "TopK",
    "TopP",
    "ZipAR",
    "available",
    "get",
    "label",
    "option",
    "options",
    "options_of",
    "parse_options",
    "register",
    "requirements",
    "sample",
]
