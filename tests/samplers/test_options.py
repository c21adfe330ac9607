"""Sampler options: declared once on the sampler, read by the registry's schema and the object's own checks;
every spec option typed, bounded and named in errors; sizes bounded by the grid."""

import dataclasses

import pytest

from arjet import samplers
from arjet.samplers import SJD, SJD2, SJDPAC, Eagle, Eagle2, Lantern, Sampler, ZipAR, options_of, registry
from arjet.samplers.jacobi import RuleSampler
from arjet.samplers.options import option as declared


@pytest.mark.parametrize("name", samplers.available())
def test_every_registered_sampler_builds_from_its_defaults_and_describes_its_options(name):
    schema = samplers.options(name)
    sampler = samplers.get(name)
    assert isinstance(sampler, Sampler)
    for option in schema:
        assert option.describe().startswith(f"{option.name} (") and option.help in option.describe()


@pytest.mark.parametrize("name", samplers.available())
def test_a_name_is_its_spec_with_every_default_spelled_out(name):
    """One source per option: the defaults the registry fills in are the ones the sampler objects declare."""
    spelled = ",".join(option.example() for option in samplers.options(name))
    assert samplers.get(name) == samplers.get(f"{name}:{spelled}" if spelled else name)
    for option in samplers.options(name):
        assert samplers.get(f"{name}:{option.example()}") == samplers.get(name)


def test_the_registry_reads_the_samplers_own_declarations():
    """An option's default and range are written on the sampler class; the schema is that declaration."""
    assert samplers.options("sjd")[:4] == options_of(SJD)
    assert samplers.options("sjd-pac")[:-1] == options_of(SJDPAC)  # then `acceptance`, as for sjd
    assert samplers.options("lantern")[:5] == options_of(Lantern)
    assert SJD().window == options_of(SJD)[0].default == 16
    assert samplers.get("lantern").acceptance == Lantern()


BAD_SPECS = [
    (
        "sjd:windw=8",
        "bad arguments for sampler 'sjd': no option 'windw'; valid options: window, init, coupling, reuse, "
        "acceptance",
    ),
    ("mc-sjd:coupling=false", "coupling must be one of maximal, gumbel; got 'false'"),
    ("mc-sjd:reuse=0.5", "no option 'reuse'; valid options: window, init, coupling, acceptance"),
    ("sjd:reuse=-0.5", "reuse must be a finite number >= 0, got '-0.5'"),
    ("sjd:reuse=inf", "reuse must be a finite number >= 0, got 'inf'"),
    ("sjd:reuse=high", "reuse must be a finite number >= 0, got 'high'"),
    (
        "sjd:coupling=true,reuse=0.5",
        "coupling=True and reuse=0.5 are two ways to re-draft a slot (MC-SJD, SJD++); give one of them",
    ),
    ("ar:window=4", "no option 'window'; valid options: none (it takes no options)"),
    ("sjd:window=16,window=32", "option window is given twice in 'window=16,window=32'; give it once"),
    ("sjd:coupling=maybe", "coupling must be true or false, got 'maybe'"),
    ("sjd:coupling=1", "coupling must be true or false, got '1'"),
    ("sjd2:coupling=yes", "coupling must be true or false, got 'yes'"),
    ("sjd:acceptance=foo", "acceptance must be one of exact, lantern, gsd, entropy; got 'foo'"),
    ("sjd:init=diagonal", "init must be one of random, repeat_horizontal"),
    ("sjd:window=0", "window must be an integer from 1 to 16384, got '0'"),
    ("sjd:window=300000", "window must be an integer from 1 to 16384, got '300000'"),
    ("sjd:window=100000000", "window must be an integer from 1 to 16384"),
    ("sjd:window=8.0", "window must be an integer from 1 to 16384, got '8.0'"),
    ("sjd:window=", "window must be an integer"),
    ("sjd:window=1_6", "window must be an integer from 1 to 16384, got '1_6'"),
    ("sjd:window=\uff18", "window must be an integer from 1 to 16384, got '\uff18'"),
    ("lantern:delta=0_1", "delta must be a finite number from 0 to 1, got '0_1'"),
    ("sjd2:window=1", "window must be an integer from 2 to 16384, got '1'"),
    ("sjd2:levels=0", "levels must be an integer from 1 to 16384, got '0'"),
    ("zipar:w=-1", "w must be an integer from 2 to 16384, got '-1'"),
    ("lantern:delta=nan", "delta must be a finite number from 0 to 1, got 'nan'"),
    ("lantern:delta=inf", "delta must be a finite number from 0 to 1, got 'inf'"),
    ("lantern:lam=0.5", "lam must be a finite number from 1 to 1e+06, got '0.5'"),
    ("lantern:k=0", "k must be an integer from 1 to 16384, got '0'"),
    ("sjd:window", "options look like 'key=value,key=value', got 'window'"),
    ("sjd:", "has a colon but no options"),
    ("warp", "unknown sampler 'warp'; available: ar"),
]


# the paper names keep their options and errors as aliases of a composite (samplers/registry.py)
BAD_ALIAS_SPECS = [
    ("lantern:drafter=true,coupling=true",
     "bad arguments for sampler 'lantern': coupling applies to Jacobi drafts; lantern with drafter=true takes no "
     "coupling"),
    ("lantern:drafter=true,window=5", "window applies to Jacobi drafts; lantern with drafter=true takes no window"),
    ("lantern:drafter=true,reuse=0.5", "reuse applies to Jacobi drafts; lantern with drafter=true takes no reuse"),
    ("lantern:drafter=true,init=repeat_vertical", "init applies to Jacobi drafts; lantern with drafter=true"),
    ("lantern:expand=2", "expand shapes a drafter's tree; lantern takes it with drafter=true only"),
    ("lantern:children=top", "children shapes a drafter's tree; lantern takes it with drafter=true only"),
    ("lantern:delta=2", "delta must be a finite number from 0 to 1, got '2'"),
    ("lantern++:drafter=true,coupling=false",
     "coupling applies to Jacobi drafts; lantern++ with drafter=true takes no coupling"),
    ("lantern++:drafter=true,init=repeat_vertical", "init applies to Jacobi drafts; lantern++ with drafter=true"),
    ("lantern++:chain=jacobi", "chain=jacobi chooses what a drafter drafts; lantern++ takes it with drafter=true only"),
    ("lantern++:window=1", "window must be an integer from 2 to 16384, got '1'"),
    ("lantern++:windw=3", "no option 'windw'; valid options: k, delta, lam, bound, top, window, tree_width, "
     "tree_depth, coupling, init, drafter, chain"),
    ("sjd:acceptance=lantern,k=4", "no option 'k'; valid options: window, init, coupling, reuse, acceptance"),
    ("zipar+sjd:acceptance=foo", "acceptance must be one of exact, lantern, gsd, entropy; got 'foo'"),
    ("zipar+lantern:acceptance=exact", "bad arguments for sampler 'zipar+lantern': no option 'acceptance'; valid "
     "options: w, schedule, window, init, coupling, reuse, k, delta, lam, bound, top"),
    ("zipar+lantern:w=1", "w must be an integer from 2 to 16384, got '1'"),
]  # fmt: skip
# a composite, method[+verifier][+rule], takes the parts its parts hold and the options they declare
BAD_COMPOSITE_SPECS = [
    ("sjd+sjd", "unknown sampler 'sjd+sjd': sjd takes +lantern or +gsd or +entropy after it, not '+sjd'"),
    ("ar+lantern", "unknown sampler 'ar+lantern': ar takes no part after it, not '+lantern'"),
    ("sjd2+lantern", "sjd2 takes no part after it, not '+lantern'"),
    ("zipar+mc-sjd", "zipar takes +sjd after it, not '+mc-sjd'"),
    ("zipar+sjd:reuse=0.5", "zipar's rows re-draft independently or with the maximal coupling only"),
    ("zipar+sjd+lantern+lantern", "lantern takes no part after it, not '+lantern'"),
    ("lantern+sjd", "unknown sampler 'lantern+sjd': no method 'lantern'"),
    ("sjd+lantern:acceptance=exact",
     "bad arguments for sampler 'sjd+lantern': no option 'acceptance'; valid options: window, init, coupling, "
     "reuse, k"),
    ("eagle2+lantern:window=4", "no option 'window'; valid options: tree_width, expand, tree_depth, children, k"),
    ("sjd-pac+lantern:tree_width=64,tree_depth=16", "make a tree of"),
    ("gsd:group=0", "group must be an integer from 1 to 256, got '0'"),
    ("gsd:prob_gap=2", "prob_gap must be a finite number from 0 to 1, got '2'"),
    ("gsd:distance=-1", "distance must be a finite number from 0 to 1e+06, got '-1' (none drops"),
    ("sjd+entropy:e=0", "e must be a finite number from 1e-06 to 1e+06, got '0'"),
    ("mc-sjd+entropy:temperature=maybe", "temperature"),
    ("sjd:acceptance=gsd,group=3", "no option 'group'"),
    ("sjd:acceptance=tight", "acceptance must be one of exact, lantern, gsd, entropy; got 'tight'"),
    ("gsd+entropy", "unknown sampler 'gsd+entropy': no method 'gsd'"),
]  # fmt: skip
ALL_BAD_SPECS = BAD_SPECS + BAD_ALIAS_SPECS + BAD_COMPOSITE_SPECS


@pytest.mark.parametrize(("spec", "message"), ALL_BAD_SPECS, ids=[spec for spec, _ in ALL_BAD_SPECS])
def test_bad_specs_name_the_option_and_what_is_allowed(spec, message):
    with pytest.raises(ValueError) as caught:
        samplers.get(spec)
    assert message in str(caught.value)


def test_specs_are_typed_by_the_schema():
    sampler = samplers.get("sjd:window=8,init=repeat_vertical,coupling=true,acceptance=lantern")
    assert (sampler.window, sampler.init, sampler.coupling) == (8, "repeat_vertical", True)
    assert isinstance(sampler.acceptance, Lantern)
    assert samplers.get("zipar:w=none").w is None and samplers.get("sjd2:levels=none").levels is None
    assert samplers.get("lantern:delta=0.2,lam=none").acceptance.delta == 0.2
    assert samplers.get("mc-sjd").coupling == "maximal"
    assert samplers.get("sjd:reuse=0.5").reuse == 0.5 and samplers.get("sjd:reuse=none").reuse is None


def test_a_sampler_registered_without_a_schema_still_refuses_repeated_and_unknown_options(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    samplers.register("test-no-schema", lambda window=4: SJD(window=window))
    assert samplers.get("test-no-schema:window=6").window == 6
    with pytest.raises(ValueError, match="given twice"):
        samplers.get("test-no-schema:window=6,window=7")
    with pytest.raises(ValueError, match="bad arguments for sampler 'test-no-schema'.*unexpected keyword"):
        samplers.get("test-no-schema:speed=3")


def test_objects_that_are_not_samplers_are_refused_by_name():
    with pytest.raises(ValueError, match="must be a name or an arjet.samplers.Sampler object, got 42"):
        samplers.get(42)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(window="16"), "window must be an integer from 1 to 16384, got '16'"),
        (dict(window=True), "window must be an integer from 1 to 16384, got True"),
        (dict(window=300000), "window must be an integer from 1 to 16384, got 300000"),
        (dict(coupling="maybe"), "coupling must be True or False, got 'maybe'"),
        (dict(acceptance="foo"), "acceptance must be an acceptance rule such as Exact"),
        (dict(init=3), "init must be one of random, repeat_horizontal.*; got 3"),
    ],
)
def test_sampler_objects_check_their_fields(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SJD(**kwargs)


@pytest.mark.parametrize(
    ("sampler", "grid", "limit", "message"),
    [
        (
            SJD(window=3000),
            (16, 16),
            None,
            "window=3000 is larger than the 256 cells of this 16x16 grid; use window <= 256",
        ),
        (SJD(window=20), (3, 3), None, "use window <= 16"),
        (SJD(window=100), (16, 16), 64, "window=100 is larger than the limit of 64"),
        (SJD2(window=10**4), (16, 16), None, "use window <= 256"),
        (SJD2(window=8, levels=9), (16, 16), None, "levels=9 is more than the window of 8"),
        (ZipAR(w=2, verify=SJD(window=1000)), (16, 16), None, "window=1000 is larger than the 256 cells"),
    ],
)
def test_sizes_are_bounded_by_the_grid(sampler, grid, limit, message):
    with pytest.raises(ValueError) as caught:
        sampler.check_grid(grid, limit)
    assert message in str(caught.value)


def test_sizes_within_the_grid_pass():
    SJD(window=16).check_grid((3, 3))  # the default window is allowed even on a grid smaller than it
    SJD(window=256).check_grid((16, 16))
    SJD2().check_grid((16, 16), 64)
    ZipAR(w=300).check_grid((3, 4))  # w >= W + 1 is raster order, and a lag allocates nothing


def test_samplers_declare_capabilities_not_names():
    from arjet.samplers import SJD, SJD2, Lantern, ZipAR, requirements

    assert requirements(samplers.get("ar")) == {} and requirements(SJD()) == {}
    assert requirements(SJD2()) == {"noise_conditioning": ""}
    relaxed = SJD(acceptance=Lantern(k=4))
    assert requirements(relaxed) == {"codebook": "the lantern acceptance rule"}
    assert requirements(ZipAR(w=2, verify=relaxed)) == {"codebook": "the lantern acceptance rule"}
    assert requirements(samplers.get("zipar+lantern")) == {"codebook": "the lantern acceptance rule"}


# -- options cannot change after a sampler is made ----------------------------------------------------------
@pytest.mark.parametrize(
    ("sampler", "name", "value"),
    [(SJD(), "window", -1), (SJD(), "init", "bogus"), (Eagle2(), "tree_depth", 10_000)],
)
def test_a_sampler_cannot_be_changed_after_it_is_made(sampler, name, value):
    """Its options were checked when it was made; an assignment would skip them (`window=-1` failed mid-decode,
    `init="bogus"` decoded silently, `tree_depth=10000` never answered). A changed copy is checked."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(sampler, name, value)
    assert getattr(sampler, name) != value
    with pytest.raises(ValueError, match=name):
        dataclasses.replace(sampler, **{name: value})


@pytest.mark.parametrize("spec", samplers.available())
def test_no_option_of_any_registered_sampler_can_be_assigned(spec):
    sampler = samplers.get(spec)
    for item in dataclasses.fields(sampler):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(sampler, item.name, getattr(sampler, item.name))


def test_a_changed_sampler_of_ones_own_is_checked_again_before_any_work():
    """A sampler class that is not frozen can still change: `get` (which every call's check goes through)
    checks its declared options again, its parts' too."""

    @dataclasses.dataclass
    class Mine(RuleSampler):
        window: int = declared(4, "draft slots", minimum=1, maximum=64)
        acceptance: object = dataclasses.field(default_factory=Lantern)

    mine = Mine()
    assert samplers.get(mine) is mine  # not frozen: its own to change, checked at every call
    mine.window = 0
    with pytest.raises(ValueError, match="window must be an integer from 1 to 64, got 0"):
        samplers.get(mine)
    mine.window, mine.acceptance = 4, "exact"
    with pytest.raises(ValueError, match="acceptance must be an acceptance rule"):
        samplers.get(mine)


@pytest.mark.parametrize(
    ("sampler", "part", "name", "value"),
    [(SJD(window=4), None, "init", "bogus"), (SJD(window=4, acceptance=Lantern()), "acceptance", "k", 1)],
)
def test_a_sampler_changed_while_it_decodes_changes_nothing(sampler, part, name, value):
    """A call decodes with a checked copy of the sampler object, taken when the call starts: options forced
    onto the caller's object mid-decode (`object.__setattr__`, past the frozen dataclass) are neither used
    unchecked (the probe's B1: SJD read `init="bogus"` at its next step and decoded other codes) nor seen."""
    from arjet.testing import tiny_pipeline

    pipe = tiny_pipeline("janus", grid=(8, 8), vocab_size=64, logit_scale=3.0)
    target = sampler if part is None else getattr(sampler, part)

    def change(p, step, forwards, tensors):
        if step == 1:
            object.__setattr__(target, name, value)
        return tensors

    before = pipe("a red circle", sampler=dataclasses.replace(sampler), seed=0, output_type="latent")
    during = pipe("a red circle", sampler=sampler, seed=0, output_type="latent", callback_on_step_end=change)
    assert getattr(target, name) == value  # the caller's object did change
    assert during.stats[0].forward_passes == before.stats[0].forward_passes
    assert during.codes.equal(before.codes)


# -- every sampler's step is bounded before any work ---------------------------------------------------------
GRID = (16, 16)
VOCAB = 512
# for each registered sampler, a spec whose step would outgrow a 16x16 grid of 512 codes, and what is said
OVERSIZED = {
    "sjd": [("sjd:window=1000", "window=1000 is larger than the 256 cells of this 16x16 grid")],
    "mc-sjd": [("mc-sjd:window=1000", "window=1000 is larger than the 256 cells")],
    "lantern": [
        ("lantern:window=1000", "window=1000 is larger than the 256 cells"),
        ("lantern:bound=tv,top=64,k=1000", "bound=tv with top=64, k=1000 gathers 32,704 neighbour masses per "
         "input, more than the defaults' top \\* k of 8000; use top \\* k <= 8000"),
        ("lantern:drafter=true,tree_width=64,expand=64,tree_depth=16",
         "tree_width=64, expand=64, tree_depth=16 make a tree of 57,409 nodes, more than the 256 cells of "
         "this 16x16 grid; use a tree of at most 256 nodes"),
        ("lantern:drafter=true,tree_width=64,expand=64,tree_depth=8", "a tree of 24,641 nodes"),
    ],
    "sjd-pac": [
        ("sjd-pac:window=1000", "window=1000 is larger than the 256 cells"),
    ],
    "eagle": [("eagle:window=1000", "window=1000 is larger than the 256 cells")],
    "cool-sd": [("cool-sd:window=1000", "window=1000 is larger than the 256 cells")],
    "gsd": [("gsd:window=1000", "window=1000 is larger than the 256 cells")],
    "eagle2": [
        ("eagle2:tree_width=64,expand=64,tree_depth=16", "make a tree of 57,409 nodes, more than the 256 cells"),
        ("eagle2:tree_width=64,expand=64,tree_depth=8", "make a tree of 24,641 nodes"),
        ("eagle2:tree_width=16,expand=2,tree_depth=9", "a tree of 241 nodes, more than the limit of 64"),
    ],
    "lantern++": [
        ("lantern++:window=1000", "window=1000 is larger than the 256 cells"),
        ("lantern++:drafter=true,window=1000", "window=1000 is larger than the 256 cells"),
        ("lantern++:bound=tv,top=1000,k=1000", "gathers 261,632 neighbour masses per input"),
    ],
    "sjd2": [("sjd2:window=1000", "window=1000 is larger than the 256 cells")],
    "zipar+sjd": [
        ("zipar+sjd:window=1000", "window=1000 is larger than the 256 cells"),
        ("zipar+sjd:w=2,window=64", "window=64 is wider than the 16 codes of a row of this 16x16 grid, and "
         "zipar\\+sjd advances each row by at most its width, with up to 16 rows in one forward; use window "
         "<= 16"),
    ],
    "pjd": [
        ("pjd:window=1000", "window=1000 is larger than the 256 cells"),
        ("pjd:c=1,window=64", "window=64 is wider than the 16 codes of a row of this 16x16 grid, and pjd "
         "advances each row by at most its width, with up to 16 rows in one forward; use window <= 16"),
    ],
    "zipar+lantern": [
        ("zipar+lantern:window=256", "window=256 is wider than the 16 codes of a row"),
        ("zipar+lantern:bound=tv,top=100", "gathers 51,100 neighbour masses per input"),
    ],
}  # fmt: skip
# samplers whose step has no size option: `ar` feeds one input per image, plain `zipar` one per running row
FIXED_STEP = {"ar", "zipar"}
LIMITED = {"eagle2:tree_width=16,expand=2,tree_depth=9": 64}  # an operator's max_window


def test_every_registered_sampler_has_its_oversized_steps_refused():
    assert set(OVERSIZED) | FIXED_STEP == set(samplers.available())


@pytest.mark.parametrize(
    ("spec", "message"), [case for cases in OVERSIZED.values() for case in cases], ids=lambda v: v[:60]
)
def test_an_oversized_step_is_refused_naming_the_options_and_the_bound(spec, message):
    sampler = samplers.get(spec)  # every option is within its own range
    with pytest.raises(ValueError, match=message):
        sampler.check_grid(GRID, LIMITED.get(spec), vocab_size=VOCAB)


@pytest.mark.parametrize("name", sorted(FIXED_STEP | set(OVERSIZED)))
def test_every_sampler_at_its_defaults_fits_a_small_grid(name):
    """The defaults always pass (on a grid smaller than them too), with the demo's limits."""
    samplers.get(name).check_grid((3, 3), 64, vocab_size=8)
    samplers.get(name).check_grid(GRID, 64, vocab_size=VOCAB)


@pytest.mark.parametrize(
    "sampler",
    [SJDPAC(tree_width=9, tree_depth=2), Eagle(tree_width=9, tree_depth=2), Eagle2(tree_width=9, expand=2)],
    ids=["sjd-pac", "eagle", "eagle2"],
)
def test_every_tree_draws_no_more_children_than_the_vocabulary_has_codes(sampler):
    """One check (`options.check_width`) for the static and the dynamic trees, one message."""
    with pytest.raises(
        ValueError,
        match="^tree_width=9 is more than the 8 codes of this model's vocabulary; use tree_width <= 8$",
    ):
        sampler.check_grid(GRID, vocab_size=8)
    sampler.check_grid(GRID, vocab_size=9)


def test_a_tree_within_the_grid_passes():
    samplers.get("eagle2:tree_width=8,expand=4,tree_depth=8").check_grid(GRID, vocab_size=VOCAB)  # 201 nodes
    samplers.get("zipar+sjd:window=16").check_grid(GRID, vocab_size=VOCAB)  # a row's width
    samplers.get("lantern:bound=tv,top=8,k=64").check_grid(GRID, vocab_size=VOCAB)
