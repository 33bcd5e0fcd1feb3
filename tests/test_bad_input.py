"""Bad input never crashes and never wastes work (issue 14).

Every case below is a command line that must exit 2 with exactly one stderr line naming the
input and the problem, before any simulation, leaving nothing behind.  Then: the parameter
declarations (one mechanism, one parser) and the Python API's argument checks.
"""

from __future__ import annotations

import inspect
import json
import math
import os

import pytest

from topas.cli import main
from topas.policies import build_policy, list_policies, make_policy, policy_info
from topas.policies.params import ParamError

RUN = ["run", "--workload", "toy-chain", "--tasks", "3"]
TOPAS = [*RUN, "--policy", "topas"]

YAML_BASE = """name: w
default_rate: 0.2
default_tasks: 3
agents: {A: 100}
stages:
  - {name: s1, agent: A, prompt: 100, calls: {output: OUT}}
"""


def _json_workload(output) -> str:
    return json.dumps(
        {
            "name": "w",
            "default_rate": 0.2,
            "default_tasks": 3,
            "agents": {"A": 100},
            "stages": [{"name": "s1", "agent": "A", "prompt": 100, "calls": {"output": output}}],
        }
    )


def _fixtures(d) -> None:
    """Bad files and folders under ``d`` (the cases refer to them as ``{d}/NAME``)."""
    (d / "afile").write_text("x")
    (d / "dir.jsonl").mkdir()
    (d / "dir.json").mkdir()
    (d / "tracedir").mkdir()
    (d / "trace.yaml").write_text(
        YAML_BASE.replace("default_rate: 0.2\n", "").replace("OUT", "10")
        + "arrivals: {trace: tracedir}\n"
    )
    (d / "deep.json").write_text("[" * 100_000)
    (d / "deep.yaml").write_text("[" * 100_000)
    m = "64"
    for _ in range(2000):
        m = "{mixture: [{weight: 1, dist: " + m + "}]}"
    (d / "mix.yaml").write_text(YAML_BASE.replace("OUT", m))
    (d / "bin.yaml").write_bytes(bytes(range(256)) * 8)
    (d / "bin.jsonl").write_bytes(bytes(range(256)) * 8)
    (d / "binprof.json").write_bytes(b"\xff\xfe\x00" * 100)
    (d / "big.json").write_text(_json_workload(1e30))
    (d / "bigu.json").write_text(_json_workload({"uniform": [1, 1e30]}))
    (d / "text.yaml").write_text(YAML_BASE.replace("OUT", "1e30"))
    grid = "workloads: [chain3]\npolicies: [fcfs]\nseeds: [3]\n"
    (d / "badgrid.yaml").write_text("workloads: [chain3\npolicies: fcfs\n")
    (d / "unkgrid.yaml").write_text(grid + "sedes: [3]\n")
    (d / "polgrid.yaml").write_text(grid.replace("[fcfs]", "[fcfs, nosuch]"))
    (d / "wlgrid.yaml").write_text(grid.replace("[chain3]", "[nosuch]"))
    (d / "seedgrid.yaml").write_text(grid.replace("[3]", "5..3"))
    (d / "listgrid.yaml").write_text("- chain3\n")
    (d / "okgrid.yaml").write_text(grid)
    ro = d / "readonly"
    ro.mkdir()
    ro.chmod(0o555)


#: (argv, substrings the one stderr line must contain); ``{d}`` is the fixture folder and
#: ``{o}`` an output folder that must not exist afterwards
CASES = [
    # --out: checked before the run
    ([*RUN, "--out", "{d}/afile"], ["--out", "afile", "exists and is not a directory"]),
    ([*RUN, "--out", "{d}/afile/x/y"], ["--out", "afile is not a directory"]),
    ([*RUN, "--out", "/proc/topas-bad-input/o"], ["--out", "cannot write in /proc"]),
    ([*RUN, "--out", "{d}/readonly/o"], ["--out", "readonly", "cannot write"]),
    (
        ["compare", "--workload", "toy-chain", "--tasks", "3", "--out", "{d}/afile"],
        ["--out", "exists and is not a directory"],
    ),
    # workload files
    (["run", "--workload", "{d}/dir.jsonl", "--out", "{o}"], ["dir.jsonl", "not a file"]),
    (["run", "--workload", "{d}/trace.yaml", "--out", "{o}"], ["tracedir", "not a file"]),
    (["run", "--workload", "{d}/deep.json", "--out", "{o}"], ["deep.json", "nested too deeply"]),
    (["run", "--workload", "{d}/deep.yaml", "--out", "{o}"], ["deep.yaml", "nested too deeply"]),
    (["run", "--workload", "{d}/mix.yaml", "--out", "{o}"], ["mix.yaml", "nested too deeply"]),
    (["run", "--workload", "{d}/bin.yaml", "--out", "{o}"], ["bin.yaml", "not a UTF-8 text"]),
    (["run", "--workload", "{d}/bin.jsonl", "--out", "{o}"], ["bin.jsonl line 1", "JSON"]),
    (
        ["run", "--workload", "{d}/big.json", "--out", "{o}"],
        ["big.json", "calls.output", "out of range"],
    ),
    (
        ["run", "--workload", "{d}/bigu.json", "--out", "{o}"],
        ["bigu.json", "uniform[1]", "out of range"],
    ),
    (
        ["run", "--workload", "{d}/text.yaml", "--out", "{o}"],
        ["text.yaml", "calls.output", "not a number"],
    ),
    (["run", "--workload", "{d}/missing.yaml", "--out", "{o}"], ["missing.yaml", "does not exist"]),
    (["run", "--workload", "nope", "--out", "{o}"], ["workload 'nope': unknown"]),
    # profiles
    ([*RUN, "--profile", "tpu/x", "--out", "{o}"], ["profile 'tpu/x': unknown"]),
    (
        [*RUN, "--profile", "{d}/binprof.json", "--out", "{o}"],
        ["--profile", "binprof.json", "not a UTF-8"],
    ),
    ([*RUN, "--profile", "{d}/dir.json", "--out", "{o}"], ["dir.json", "Is a directory"]),
    # policy parameters: declared type and range, errors name the policy and parameter
    ([*TOPAS, "--param", "rho=NaN", "--out", "{o}"], ["'topas'", "rho='NaN'", "finite"]),
    ([*TOPAS, "--param", "beta=inf", "--out", "{o}"], ["'topas'", "beta='inf'", "finite"]),
    ([*TOPAS, "--param", "min_gain_s=nan", "--out", "{o}"], ["min_gain_s", "finite"]),
    ([*TOPAS, "--param", "reserve_ratio=-0.1", "--out", "{o}"], ["reserve_ratio", "[0, 4]"]),
    ([*TOPAS, "--param", "M=100", "--out", "{o}"], ["M='100'", "[0, 16]"]),
    ([*TOPAS, "--param", "K=0", "--out", "{o}"], ["K='0'", "must be in [1,"]),
    ([*TOPAS, "--param", "K=2.5", "--out", "{o}"], ["K='2.5'", "integer"]),
    ([*TOPAS, "--param", "reuse=0", "--out", "{o}"], ["reuse='0'", "true or false"]),
    ([*TOPAS, "--param", "hol_block=yes", "--out", "{o}"], ["hol_block", "true or false"]),
    ([*TOPAS, "--param", "off=bogus", "--out", "{o}"], ["off='bogus'", "unknown 'bogus'"]),
    ([*TOPAS, "--param", "redo_cost=nope", "--out", "{o}"], ["redo_cost='nope'", "one of"]),
    ([*TOPAS, "--param", "name=1", "--out", "{o}"], ["unknown parameter 'name'"]),
    ([*TOPAS, "--param", "seed=-1", "--out", "{o}"], ["seed is not a policy parameter"]),
    ([*TOPAS, "--param", "novalue", "--out", "{o}"], ["--param 'novalue'", "KEY=VALUE"]),
    ([*TOPAS, "--param", "rho=1", "--param", "rho=2", "--out", "{o}"], ["rho", "twice"]),
    ([*RUN, "--param", "rho=0.5", "--out", "{o}"], ["policy 'fcfs'", "unknown parameter 'rho'"]),
    (
        [*RUN, "--policy", "autellix-las", "--param", "thresholds_s=2,1", "--out", "{o}"],
        ["thresholds_s", "ascending"],
    ),
    (
        [*RUN, "--policy", "autellix-las", "--param", "starvation_ratio=0", "--out", "{o}"],
        ["starvation_ratio='0'", "(0,"],
    ),
    ([*RUN, "--policy", "nope", "--out", "{o}"], ["policy 'nope': unknown"]),
    # compare: every policy checked before the first run
    (
        [
            "compare",
            "--workload",
            "toy-chain",
            "--tasks",
            "3",
            "--policies",
            "topas,nosuch",
            "--out",
            "{o}",
        ],
        ["policy 'nosuch': unknown"],
    ),
    (
        [
            "compare",
            "--workload",
            "toy-chain",
            "--tasks",
            "3",
            "--policies",
            "fcfs,fcfs",
            "--out",
            "{o}",
        ],
        ["--policies", "twice"],
    ),
    (["compare", "--workload", "toy-chain", "--policies", ",", "--out", "{o}"], ["--policies"]),
    # numbers on the command line
    ([*RUN, "--seed", "-1", "--out", "{o}"], ["--seed", "-1", ">= 0"]),
    ([*RUN, "--tasks", "1e20", "--out", "{o}"], ["--tasks", "1e20", "in [1,"]),
    ([*RUN, "--tasks", "0", "--out", "{o}"], ["--tasks", "0", "in [1,"]),
    ([*RUN, "--tasks", "abc", "--out", "{o}"], ["--tasks", "'abc'", "integer"]),
    ([*RUN, "--rate", "-1", "--out", "{o}"], ["--rate", "-1", "> 0"]),
    ([*RUN, "--rate", "nan", "--out", "{o}"], ["--rate", "nan", "finite"]),
    ([*RUN, "--rate", "inf", "--out", "{o}"], ["--rate", "inf", "finite"]),
    ([*RUN, "--kv-budget", "0", "--out", "{o}"], ["--kv-budget", "0", ">= 1"]),
    ([*RUN, "--kv-budget", "100", "--out", "{o}"], ["can never fit"]),
    ([*RUN, "--preemption", "bogus", "--out", "{o}"], ["--preemption", "invalid choice"]),
    # reproduce: checked before any run
    (["reproduce", "--quick", "--seeds=-4", "--out", "{o}"], ["--seeds", "-4", ">= 0"]),
    (["reproduce", "--seeds", "2", "--out", "{o}"], ["tuned"]),
    (["reproduce", "--quick", "--seeds", "3,3", "--out", "{o}"], ["--seeds", "twice"]),
    (["reproduce", "--quick", "--jobs", "0", "--out", "{o}"], ["--jobs", "0"]),
    (["reproduce", "--quick", "--workloads", "nosuch", "--out", "{o}"], ["'nosuch'"]),
    (["reproduce", "--quick", "--out", "{d}/afile"], ["--out", "exists and is not a dir"]),
    (["list", "--params", "nosuch"], ["policy 'nosuch': unknown"]),
    (
        ["reproduce", "--quick", "--executor", "dask", "--out", "{o}"],
        ["--executor", "invalid choice"],
    ),
    (
        ["reproduce", "--quick", "--ray-address", "auto", "--out", "{o}"],
        ["--ray-address auto", "only with --executor ray"],
    ),
    # sweep: the grid file is read and checked before any run
    (["sweep", "{d}/missing.yaml", "--out", "{o}"], ["missing.yaml", "does not exist"]),
    (["sweep", "{d}/tracedir", "--out", "{o}"], ["tracedir", "not a file"]),
    (["sweep", "{d}/bin.yaml", "--out", "{o}"], ["bin.yaml", "not a UTF-8"]),
    (["sweep", "{d}/badgrid.yaml", "--out", "{o}"], ["badgrid.yaml", "not valid YAML"]),
    (["sweep", "{d}/listgrid.yaml", "--out", "{o}"], ["listgrid.yaml", "must be a mapping"]),
    (["sweep", "{d}/unkgrid.yaml", "--out", "{o}"], ["unkgrid.yaml", "unknown key 'sedes'"]),
    (["sweep", "{d}/polgrid.yaml", "--out", "{o}"], ["polgrid.yaml", "policy 'nosuch': unknown"]),
    (["sweep", "{d}/wlgrid.yaml", "--out", "{o}"], ["wlgrid.yaml", "workload 'nosuch'"]),
    (
        ["sweep", "{d}/seedgrid.yaml", "--out", "{o}"],
        ["seedgrid.yaml", "seeds '5..3'", "empty range"],
    ),
    (["sweep", "{d}/okgrid.yaml", "--out", "{d}/afile"], ["--out", "exists and is not a dir"]),
    (["sweep", "{d}/okgrid.yaml", "--jobs", "0", "--out", "{o}"], ["--jobs", "0"]),
    (["sweep", "{d}/okgrid.yaml", "--executor", "dask", "--out", "{o}"], ["--executor"]),
    (
        ["sweep", "{d}/okgrid.yaml", "--ray-address", "auto", "--out", "{o}"],
        ["--ray-address auto", "only with --executor ray"],
    ),
]


@pytest.fixture(scope="module")
def bad_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    _fixtures(d)
    yield d
    (d / "readonly").chmod(0o755)


def _tree(d) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


@pytest.mark.parametrize("argv,needles", CASES, ids=[" ".join(a[:1] + a[3:7]) for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(argv, needles, bad_dir, tmp_path, capsys):
    if "{d}/readonly/o" in argv and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders (the /proc case covers it)")
    out = tmp_path / "o"
    args = [a.replace("{d}", str(bad_dir)).replace("{o}", str(out)) for a in argv]
    before = _tree(bad_dir)
    assert main(args) == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1, cap.err
    line = lines[0]
    assert line.startswith("topas ") and ": error: " in line, line
    for n in needles:
        assert n.replace("{d}", str(bad_dir)) in line, (n, line)
    assert "Traceback" not in cap.err and cap.out == ""
    assert not out.exists()
    assert _tree(bad_dir) == before  # no probe or temporary file left


@pytest.mark.parametrize("cmd", [["reproduce", "--quick"], ["sweep", "{d}/okgrid.yaml"]])
def test_executor_ray_without_ray_is_one_line_exit_2(cmd, bad_dir, tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: import fails
    out = tmp_path / "o"
    args = [a.replace("{d}", str(bad_dir)) for a in cmd]
    assert main([*args, "--executor", "ray", "--out", str(out)]) == 2
    cap = capsys.readouterr()
    (line,) = cap.err.strip().splitlines()
    assert f"topas {cmd[0]}: error: --executor ray: ray is not installed" in line
    assert "topas[ray]" in line and cap.out == "" and not out.exists()


def test_at_least_forty_cases():
    assert len(CASES) >= 40


# -- declarations: one mechanism, one parser -----------------------------------------------


def _constructor_params(cls) -> dict[str, inspect.Parameter]:
    out: dict[str, inspect.Parameter] = {}
    for c in cls.__mro__:
        if "__init__" not in c.__dict__:
            continue
        ps = inspect.signature(c.__init__).parameters
        for k, v in ps.items():
            if v.kind in (v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY):
                out.setdefault(k, v)
        if not any(v.kind == v.VAR_KEYWORD for v in ps.values()):
            break
    for k in ("self", "seed", "name"):
        out.pop(k, None)
    return out


#: parameters a registered variant fixes itself, or adds in its factory
FIXED = {"topas-base": {"reuse", "aging"}, "topas-noreuse": {"reuse"}, "topas-noaging": {"aging"}}
ADDED = {"topas": {"off"}}


@pytest.mark.parametrize("name", [p.name for p in list_policies()])
def test_every_constructor_parameter_is_declared(name):
    info = policy_info(name)
    decl = {p.name: p for p in info.params}
    sig = _constructor_params(type(make_policy(name)))
    assert set(sig) - FIXED.get(name, set()) == set(decl) - ADDED.get(name, set())
    for p in info.params:
        # each default is accepted by its own declaration and builds the policy
        assert p.parse(p.default) == (
            tuple(p.default) if isinstance(p.default, (list, tuple)) else p.default
        )
        build_policy(name, 0, {p.name: p.default})
        assert p.doc and p.type_text() and p.range_text()
        s = sig.get(p.name)
        if s is not None and name in (
            "topas-paper",
            "fcfs",
            "lpm",
            "continuum",
            "kvflow",
            "spf",
            "srpt-ca",
            "autellix-las",
            "topas-hold",
        ):
            want = s.default
            assert p.default == (tuple(want) if isinstance(want, (list, tuple)) else want), (
                name,
                p.name,
            )


def test_flagship_defaults_are_its_departures():
    from topas.policies.topas import flagship_params

    decl = {p.name: p.default for p in policy_info("topas").params}
    for k, v in flagship_params().items():
        assert decl[k] == v, k


@pytest.mark.parametrize(
    "text,value", [("true", True), ("False", False), ("FALSE", False), (True, True)]
)
def test_bools_take_true_false_only(text, value):
    assert make_policy("topas-paper", reuse=text).reuse is value


@pytest.mark.parametrize("bad", ["0", "1", "yes", "no", 0, 1, "", None])
def test_bools_reject_everything_else(bad):
    with pytest.raises(
        ParamError, match=r"policy 'topas-paper': reuse=.*(true or false|not be none)"
    ):
        make_policy("topas-paper", reuse=bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "nan", "-inf", True, "x"])
def test_numbers_reject_nan_inf_and_non_numbers(bad):
    with pytest.raises(ParamError, match="policy 'topas-paper': beta="):
        make_policy("topas-paper", beta=bad)


def test_cli_strings_and_python_values_parse_the_same():
    a = make_policy("topas", K="7", rho="0.5", H_age="none", off="holds+reserve", hol_block="true")
    b = make_policy("topas", K=7, rho=0.5, H_age=None, off=("holds", "reserve"), hol_block=True)
    for k in ("K", "rho", "H_age", "hol_block", "reserve_ratio", "holds"):
        assert getattr(a, k) == getattr(b, k), k
    assert make_policy("autellix-las", thresholds_s="1,2,4").thresholds_s == (1.0, 2.0, 4.0)


def test_list_params_prints_every_parameter(capsys):
    assert main(["list", "--params", "topas"]) == 0
    text = capsys.readouterr().out
    for p in policy_info("topas").params:
        assert p.name in text, p.name
    for word in ("type", "range", "default", "off", "[0, 16]"):
        assert word in text


def test_reuse_false_reaches_the_policy(capsys):
    assert main([*RUN, "--policy", "topas-paper", "--param", "reuse=False", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tasks"] == 3


# -- the Python API ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,exc,match",
    [
        ({"n_tasks": "3"}, TypeError, "n_tasks: must be an integer"),
        ({"n_tasks": 0}, ValueError, "n_tasks 0"),
        ({"n_tasks": True}, TypeError, "n_tasks"),
        ({"seed": -1}, ValueError, "seed -1"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"rate": math.nan}, ValueError, "rate nan"),
        ({"rate": "1"}, TypeError, "rate"),
        ({"tasks": []}, ValueError, "tasks: empty"),
        ({"tasks": [1]}, TypeError, "tasks: must hold Task"),
        ({"policy_params": {"rho": "NaN"}}, ValueError, "rho='NaN'"),
        ({"policy_params": {"seed": 1}}, ValueError, "seed is not a policy parameter"),
        ({"policy_params": [("rho", 1)]}, TypeError, "policy_params"),
        ({"profile": 3}, TypeError, "profile"),
        ({"progress": 3}, TypeError, "progress"),
    ],
)
def test_api_names_the_argument(kw, exc, match):
    from topas.api import simulate

    with pytest.raises(exc, match=match):
        simulate("toy-chain", "topas", **kw)


def test_api_rejects_non_string_workload_and_policy():
    from topas.api import simulate

    with pytest.raises(TypeError, match="workload"):
        simulate(3, "fcfs", n_tasks=2)
    with pytest.raises(TypeError, match="policy"):
        simulate("toy-chain", None, n_tasks=2)
