"""Sampler options: declared once on the sampler, read by the registry's schema and the object's own checks;
every spec option typed, bounded and named in errors; sizes bounded by the grid."""

import pytest

from arjet import samplers
from arjet.samplers import SJD, SJD2, SJDPAC, Lantern, Sampler, ZipAR, options_of, registry


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
    assert samplers.options("sjd")[:3] == options_of(SJD)
    assert samplers.options("sjd-pac") == options_of(SJDPAC)
    assert samplers.options("lantern")[:5] == options_of(Lantern)
    assert SJD().window == options_of(SJD)[0].default == 16
    assert samplers.get("lantern").acceptance == Lantern()


BAD_SPECS = [
    (
        "sjd:windw=8",
        "bad arguments for sampler 'sjd': no option 'windw'; valid options: window, init, coupling, acceptance",
    ),
    ("mc-sjd:coupling=false", "no option 'coupling'; valid options: window, init, acceptance"),
    ("ar:window=4", "no option 'window'; valid options: none (it takes no options)"),
    ("sjd:window=16,window=32", "option window is given twice in 'window=16,window=32'; give it once"),
    ("sjd:coupling=maybe", "coupling must be true or false, got 'maybe'"),
    ("sjd:coupling=1", "coupling must be true or false, got '1'"),
    ("sjd2:coupling=yes", "coupling must be true or false, got 'yes'"),
    ("sjd:acceptance=foo", "acceptance must be one of exact, lantern; got 'foo'"),
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


@pytest.mark.parametrize(("spec", "message"), BAD_SPECS, ids=[spec for spec, _ in BAD_SPECS])
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
    assert samplers.get("mc-sjd").coupling is True


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
