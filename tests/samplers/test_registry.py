"""The sampler registry: a spec's errors quote what it was given in a short excerpt, so a message stays a
line however long the spec (the command line, the pipe and the server all show it); composites
(`method[+verifier][+rule]`) are built from their parts, and the paper names are aliases of one."""

import pytest

from arjet import samplers
from arjet.samplers import GSD, MCSJD, SJD, SJDPAC, CoolSD, Eagle, Eagle2, Entropy, Lantern, ZipAR, options_of
from arjet.samplers.options import parse_options

LONG = 900_000
SHORT_MESSAGE = 300  # characters: the option list and an excerpt of each value, never the input

LONG_SPECS = {
    "unknown name": "x" * LONG,
    "choice value": "sjd:init=" + "x" * LONG,
    "integer value": "sjd:window=" + "9" * LONG,
    "option name": "sjd:" + "k" * LONG + "=1",
    "commas": "sjd:" + "," * LONG,
    "repeated option": "sjd:" + ",".join(["window=1"] * (LONG // 9)),
    "blank options": "sjd:" + " " * LONG,
    "boolean value": "sjd:coupling=" + "x" * LONG,
    "float value": "lantern:delta=" + "1" * LONG + "x",
}


@pytest.mark.parametrize("spec", LONG_SPECS.values(), ids=LONG_SPECS.keys())
def test_a_long_spec_is_refused_with_a_short_message(spec):
    with pytest.raises(ValueError) as refused:
        samplers.get(spec)
    message = str(refused.value)
    assert len(message) < SHORT_MESSAGE, message
    assert "..." in message  # an excerpt, cut in the middle


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x" * LONG, "unknown sampler 'xxxxx"),
        ("sjd:init=" + "x" * LONG, "init must be one of random, repeat_horizontal"),
        ("sjd:window=" + "9" * LONG, "window must be an integer from 1 to 16384, got '99999"),
        ("sjd:" + "k" * LONG + "=1", "no option 'kkkkk"),
        ("sjd:" + "," * LONG, "options look like 'key=value,key=value', got ',,,,,"),
        ("sjd:" + ",".join(["window=1"] * (LONG // 9)), "option window is given twice in 'window=1,window=1"),
    ],
)
def test_the_short_message_still_names_what_is_wrong(spec, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        samplers.get(spec)


def test_a_short_spec_is_quoted_whole():
    """The control: a spec of ordinary length is quoted as it was given, nothing cut."""
    with pytest.raises(
        ValueError, match="option window is given twice in 'window=16,window=32'; give it once"
    ):
        samplers.get("sjd:window=16,window=32")
    with pytest.raises(ValueError, match="unknown sampler 'bogus'; available: ar,"):
        samplers.get("bogus")


def test_a_long_repeated_key_without_a_schema_is_cut_too():
    """A sampler registered without a schema reads any key, so a repeated one may be of any length."""
    key = "k" * LONG
    with pytest.raises(ValueError) as refused:
        parse_options(f"{key}=1,{key}=2", None)
    assert len(str(refused.value)) < SHORT_MESSAGE and "is given twice" in str(refused.value)


# -- composites: method[+verifier][+rule]; the paper names are aliases of one ------------------------------
ALIASES = [  # (what a user types, the canonical spec it expands to, the object both build)
    ("lantern", "sjd+lantern", SJD(acceptance=Lantern())),
    ("sjd:acceptance=lantern", "sjd+lantern", SJD(acceptance=Lantern())),
    ("lantern:k=4,delta=0.3,window=5", "sjd+lantern:k=4,delta=0.3,window=5", SJD(5, acceptance=Lantern(4, 0.3))),
    ("lantern:drafter=true", "eagle2+lantern", Eagle2(acceptance=Lantern())),
    ("lantern:drafter=true,expand=2,lam=2", "eagle2+lantern:expand=2,lam=2", Eagle2(expand=2, acceptance=Lantern(lam=2))),
    ("lantern++", "sjd-pac+lantern", SJDPAC(acceptance=Lantern())),
    ("lantern++:window=none,tree_width=2", "sjd-pac+lantern:tree_width=2", SJDPAC(tree_width=2, acceptance=Lantern())),
    ("lantern++:drafter=true", "eagle+lantern", Eagle(acceptance=Lantern())),
    ("lantern++:drafter=true,chain=jacobi,window=20", "eagle+lantern:chain=jacobi,window=20",
     Eagle(window=20, chain="jacobi", acceptance=Lantern())),
    ("zipar+lantern", "zipar+sjd+lantern", ZipAR(verify=SJD(acceptance=Lantern()))),
    ("zipar+lantern:w=2,window=4,k=4", "zipar+sjd+lantern:w=2,window=4,k=4",
     ZipAR(w=2, verify=SJD(window=4, acceptance=Lantern(k=4)))),
    ("zipar+sjd:acceptance=lantern", "zipar+sjd+lantern", ZipAR(verify=SJD(acceptance=Lantern()))),
    ("mc-sjd:acceptance=lantern,window=3", "mc-sjd+lantern:window=3", MCSJD(window=3, acceptance=Lantern())),
    ("mc-sjd:coupling=gumbel,acceptance=lantern", "mc-sjd+lantern:coupling=gumbel",
     MCSJD(coupling="gumbel", acceptance=Lantern())),
    ("sjd:reuse=0.5,acceptance=lantern", "sjd+lantern:reuse=0.5", SJD(reuse=0.5, acceptance=Lantern())),
    ("gsd", "sjd+gsd", SJD(acceptance=GSD())),
    ("gsd:group=25,window=5", "sjd+gsd:group=25,window=5", SJD(5, acceptance=GSD(group=25))),
    ("sjd:acceptance=gsd", "sjd+gsd", SJD(acceptance=GSD())),
    ("sjd:acceptance=entropy", "sjd+entropy", SJD(acceptance=Entropy())),
    ("mc-sjd:acceptance=entropy", "mc-sjd+entropy", MCSJD(acceptance=Entropy())),
    ("sjd-pac+entropy:temperature=true", "sjd-pac+entropy:temperature=true",
     SJDPAC(acceptance=Entropy(temperature=True))),
    ("cool-sd", "eagle+cool-sd", Eagle(acceptance=CoolSD())),
    ("cool-sd:delta=2,chain=jacobi", "eagle+cool-sd:delta=2,chain=jacobi", Eagle(chain="jacobi", acceptance=CoolSD(2.0))),
]  # fmt: skip


@pytest.mark.parametrize(("alias", "canonical", "built"), ALIASES, ids=[alias for alias, _, _ in ALIASES])
def test_an_alias_builds_what_its_canonical_spec_builds(alias, canonical, built):
    assert samplers.get(alias) == samplers.get(canonical) == built


def test_the_registered_names_stay_the_fifteen_and_composites_are_built_unlisted():
    assert samplers.available() == [
        "ar", "cool-sd", "eagle", "eagle2", "gsd", "lantern", "lantern++", "mc-sjd", "pjd", "sjd", "sjd-pac",
        "sjd2", "zipar", "zipar+lantern", "zipar+sjd",
    ]  # fmt: skip
    schema = samplers.options("zipar+sjd+lantern")
    assert schema == (*options_of(ZipAR), *options_of(SJD), *options_of(Lantern))
    assert samplers.options("sjd-pac+lantern") == (*options_of(SJDPAC), *options_of(Lantern))
    assert samplers.get("zipar+sjd+lantern:schedule=llamagen,coupling=true,bound=tv") == ZipAR(
        schedule="llamagen", verify=SJD(coupling=True, acceptance=Lantern(bound="tv"))
    )


def test_each_alias_keeps_its_options_in_their_order():
    """A paper name takes the options of both its forms (the rule's first), as before the forms moved."""
    names = {name: [option.name for option in samplers.options(name)] for name in ("lantern", "lantern++")}
    assert names["lantern"] == [
        "k", "delta", "lam", "bound", "top", "window", "init", "coupling", "reuse", "drafter", "tree_width", "expand",
        "tree_depth", "children",
    ]  # fmt: skip
    assert names["lantern++"] == [
        "k", "delta", "lam", "bound", "top", "window", "tree_width", "tree_depth", "coupling", "init", "drafter",
        "chain",
    ]  # fmt: skip
    assert [option.name for option in samplers.options("mc-sjd")] == [
        "window",
        "init",
        "coupling",
        "acceptance",
    ]


def test_an_option_of_the_other_form_at_its_default_is_accepted():
    """`lantern:drafter=true,window=16` spells out a default; only a change is refused."""
    assert samplers.get("lantern:drafter=true,window=16,coupling=false") == samplers.get("eagle2+lantern")
    assert samplers.get("lantern:tree_width=4,expand=4,children=sample") == samplers.get("sjd+lantern")
    assert samplers.get("lantern++:chain=drafter") == samplers.get("sjd-pac+lantern")
    assert samplers.get("lantern++:drafter=true,coupling=true,init=random") == samplers.get("eagle+lantern")


def test_a_long_composite_name_is_refused_with_a_short_message():
    for spec in ("sjd+" + "x" * LONG, "x" * LONG + "+sjd"):
        with pytest.raises(ValueError) as refused:
            samplers.get(spec)
        assert len(str(refused.value)) < SHORT_MESSAGE and "..." in str(refused.value)
