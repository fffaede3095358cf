"""Test sessions. ``nox`` alone runs them all: lint, every package's tests, the run as a library's,
the integration tests, the example plugin, the documentation site and the slow runs (the
Quickstart's main job and the ``seq-digits`` figures of ``docs/results.md``).

* ``tests(<package>)``: a fresh environment holding only that package (built from its folder),
  the xder packages it declares, and pytest, then ``pytest tests/<area>``. A stray import of an
  undeclared sibling fails here, which keeps the package boundaries honest.
* ``runs``: the tests of the run as a library, ``xder_cli.runs`` (``tests/runs``), in an
  environment made as ``tests(xder-cli)``'s is; ``tests(xder-cli)`` runs those of the commands.
* ``integration``: all five packages; end-to-end runs of ``xder-run`` (``tests/integration``).
* ``lint``: ruff (lint and format check) and mypy (the five packages' sources, each with every
  flag of --strict).
* ``docs``: the documentation site (``mkdocs.yml``, ``docs/``, and the API reference read from the
  packages' sources) built with ``mkdocs build --strict`` into ``site/``: a broken link or anchor,
  a page left out of the nav or a docstring the reference cannot parse fails it.
* ``site``: the documentation site, built as ``docs`` builds it, opened from disk in headless
  Chromium (Playwright): every page of the navigation loads and the search answers. The one
  session that may install a system package: Chromium with apt-get, as root, where it is missing
  (said on the terminal); without root the browser check is skipped with a line saying so.
* ``slow``: every test marked ``slow`` (long end-to-end runs: the Quickstart's main job and the
  ``seq-digits`` table of ``docs/results.md``), all packages installed; selecting no test fails it.
* ``gpu``: the GPU script of ``benchmarks/gpu`` in its smoke mode on the CPU, in an
  environment like the lent GPU machine's: the packages' third-party dependencies without Ray,
  grad-cam, pycocotools or wandb, and the five packages from their ``src/`` folders, as
  ``run.sh`` runs them there; so the first GPU run works first time.
* ``mutants`` (not in the default run): mutation testing with mutmut of the shared parts, the
  loop's engine, X-DER, DER, DER++, ER and the metrics against their unit tests; every survivor
  killed by a test or listed as equivalent in ``tests/mutation/equivalent.toml``.
* ``plugin_example``: ``examples/plugin`` installed beside the five packages in a fresh
  environment; its method, benchmark and backbone go through ``xder-run train``, ``sweep`` (on
  Ray) and ``report`` without a line of our packages changed.

Third-party versions are pinned to ``uv.lock`` through a constraints file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
# Where the shell sets PYTHONDONTWRITEBYTECODE (many container images do), every Python process a
# session starts (each `xder-run` a test runs, each Ray worker) compiles torch's and our sources
# again: an `xder-run --help` took 13-18 s so against 7 s with cached bytecode on a two-core CPU.
# The sessions' environments are nox's own, so their bytecode is cached there.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
nox.options.sessions = [
    "lint", "docs", "site", "tests", "runs", "integration", "gpu", "plugin_example", "slow",
]  # fmt: skip

ROOT = Path(__file__).parent
PACKAGES = {
    "xder-data": "data",
    "xder-models": "models",
    "xder-methods": "methods",
    "xder-eval": "eval",
    "xder-cli": "cli",
}


def _local_requirements(package: str) -> list[str]:
    """``packages/<package>`` with all its extras, plus every xder package it declares,
    transitively (with the extras it names)."""
    seen: dict[str, str] = {}

    def visit(name: str, extras: str) -> None:
        if name in seen:
            return
        pyproject = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())
        seen[name] = f"{name}{extras} @ {(ROOT / 'packages' / name).as_uri()}"
        for requirement in pyproject["project"].get("dependencies", []):
            match = re.match(r"(xder-[a-z]+)(\[[^\]]*\])?", requirement)
            if match:
                visit(match.group(1), match.group(2) or "")

    extras = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]
    names = sorted(extras.get("optional-dependencies", {}))
    visit(package, f"[{','.join(names)}]" if names else "")
    return list(seen.values())


def _constraints(session: nox.Session) -> list[str]:
    path = ROOT / ".nox" / "constraints.txt"
    path.parent.mkdir(exist_ok=True)
    session.run_install(
        "uv",
        "export",
        "--frozen",
        "--no-hashes",
        "--all-extras",
        "--all-groups",
        "--no-emit-workspace",
        "--quiet",
        "--output-file",
        str(path),
        external=True,
    )
    return ["--constraint", str(path)]


def _install(session: nox.Session, *packages: str) -> None:
    requirements = {r for p in packages for r in _local_requirements(p)}
    session.install(*_constraints(session), *sorted(requirements), "pytest", "hypothesis")


@nox.session
@nox.parametrize("package", list(PACKAGES), ids=list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """One package's tests, with only that package and its declared dependencies installed."""
    _install(session, package)
    session.run("pytest", f"tests/{PACKAGES[package]}", *session.posargs)


@nox.session
def runs(session: nox.Session) -> None:
    """The run as a library (``xder_cli.runs``): xder-cli and its declared dependencies only."""
    _install(session, "xder-cli")
    session.run("pytest", "tests/runs", *session.posargs)


@nox.session
def integration(session: nox.Session) -> None:
    """End-to-end runs through the xder-run command."""
    _install(session, *PACKAGES)
    session.run("pytest", "tests/integration", *session.posargs)


# What the lent GPU machine's python3 has of our packages' dependencies (its image lacks Ray,
# grad-cam, pycocotools and wandb; tomli-w goes there as a wheel in benchmarks/gpu/vendor/).
GPU_MACHINE = (
    "torch",
    "torchvision",
    "numpy",
    "h5py",
    "scikit-learn",
    "pillow",
    "tqdm",
    "psutil",
    "tomli-w",
    "matplotlib",
    "pytest",
)


@nox.session
def gpu(session: nox.Session) -> None:
    """``benchmarks/gpu/run.sh --smoke --device cpu``: every phase of the GPU script at toy sizes
    (``nox -s gpu -- --phases data,tests`` picks phases)."""
    session.install(*_constraints(session), *GPU_MACHINE)
    with tempfile.TemporaryDirectory(prefix="xder-gpu-") as folder:
        session.run(
            "bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), folder, "--smoke", "--device", "cpu",
            *session.posargs, env={"PYTHON": str(Path(session.bin) / "python")}, external=True,
        )  # fmt: skip


@nox.session
def slow(session: nox.Session) -> None:
    """Long runs (marked ``slow``): the Quickstart's main job and the seq-digits figures of
    ``docs/results.md``, through the CLI, each test's time printed (``--durations``). Selecting no
    test (pytest's exit status 5) fails the session."""
    _install(session, *PACKAGES)
    session.run("pytest", "tests", "-m", "slow", "--durations=0", *session.posargs)


@nox.session
def mutants(session: nox.Session) -> None:
    """Mutation testing (mutmut) of the shared parts, the loop's engine, X-DER, DER, DER++, ER and
    the metrics against their unit tests (``tests/mutation/mutants.py``; not in the default run:
    hours on two cores). ``nox -s mutants -- parts/losses`` runs one module again (minutes),
    ``-- --survivors`` the survivors, ``-- --report`` prints the last scores."""
    _install(session, "xder-methods", "xder-eval")
    session.install(*_constraints(session), "mutmut")
    session.run("python", str(ROOT / "tests" / "mutation" / "mutants.py"), *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole tree; mypy over the five packages'
    sources (``[tool.mypy]`` in pyproject.toml), with the packages and their dependencies
    installed so that it reads their types."""
    _install(session, *PACKAGES)
    session.install(*_constraints(session), "ruff", "mypy")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site: ``mkdocs build --strict`` into ``site/`` (git-ignored). The API
    reference is read statically from ``packages/*/src`` (mkdocstrings, griffe): nothing is
    imported, so the packages need not be installed here. ``nox -s docs -- --site-dir DIR``
    builds elsewhere."""
    session.install(*_constraints(session), "mkdocs-material", "mkdocstrings[python]")
    # Material prints a banner about MkDocs 2.0 and its own end of life on every build.
    env = {"NO_MKDOCS_2_WARNING": "1"}
    site_dir = [] if "--site-dir" in session.posargs else ["--site-dir", str(ROOT / "site")]
    session.run("mkdocs", "build", "--strict", *site_dir, *session.posargs, env=env)


@nox.session
def site(session: nox.Session) -> None:
    """The documentation site built as ``docs`` builds it, then opened from disk in headless
    Chromium (``tests/site/check_site.py``, Playwright): every page of the navigation, and the
    search. Chromium is the system's (``$CHROMIUM``, else ``chromium`` on the PATH). Where it is
    missing, a root shell with apt-get installs it (the one system package any session installs,
    said on the terminal first); without root or apt-get the browser check is skipped with a line
    that says so, after the site is built; Playwright is the ``site`` group's."""
    session.install(*_constraints(session), "mkdocs-material", "mkdocstrings[python]", "playwright")
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if chromium is None and shutil.which("apt-get") and os.geteuid() == 0:
        session.log(
            "installing the system package chromium (apt-get, as root): the site check opens the pages in it"
        )
        session.run("apt-get", "install", "-y", "-qq", "chromium", external=True, silent=True)
        chromium = shutil.which("chromium")
    with tempfile.TemporaryDirectory(prefix="xder-site-") as folder:
        session.run("mkdocs", "build", "--strict", "--site-dir", folder, env={"NO_MKDOCS_2_WARNING": "1"})
        if chromium is None:
            session.skip(
                "the site was built, but not opened in a browser: no Chromium here (install it, e.g. "
                "apt-get install chromium, or set CHROMIUM to its path, to check the pages and search)"
            )
        session.run("python", str(ROOT / "tests" / "site" / "check_site.py"), folder, chromium)


@nox.session
def plugin_example(session: nox.Session) -> None:
    """The example plugin package (entry points) through xder-run train, sweep and report."""
    _install(session, *PACKAGES)
    # Its xder dependencies are the local packages installed above, not a registry's.
    session.install(*_constraints(session), "--no-deps", str(ROOT / "examples" / "plugin"))
    # Not session.create_tmp(): it points TMPDIR into .nox/, where Ray's socket paths grow past the
    # 107 bytes a Unix socket path may have and its workers die on start.
    with tempfile.TemporaryDirectory(prefix="xder-plugin-") as folder:
        _plugin_commands(session, Path(folder))


def _plugin_commands(session: nox.Session, tmp: Path) -> None:
    runs, sweep, report = tmp / "runs", tmp / "sweep", tmp / "report"
    env = {"OMP_NUM_THREADS": "1"}
    if "er_balanced" not in str(session.run("xder-run", "train", "--help", silent=True)):
        session.error("xder-run train --help does not list the plugin's method er_balanced")
    for method in ("er_balanced", "er"):
        session.run(
            "xder-run", "train", "--method", method, "--benchmark", "seq-stripes", "--device", "cpu",
            "--out", str(runs), env=env,
        )  # fmt: skip
    grid = tmp / "grid.toml"
    grid.write_text(
        'method = "er_balanced"\nbenchmark = "seq-stripes"\nseeds = [0]\n'
        '[set]\n"train.epochs" = 1\n"run.device" = "cpu"\n[grid]\n"method.power" = [0.0, 1.0]\n'
    )
    session.run("xder-run", "sweep", str(grid), "--out", str(sweep), "--max-concurrent", "1", env=env)
    session.run("xder-run", "report", str(runs), str(sweep / "trials"), "--out", str(report))
    table = (report / "table.md").read_text()
    summary = json.loads((sweep / "sweep.json").read_text())
    if "er_balanced" not in table or any(t["status"] != "finished" for t in summary["trials"]):
        session.error(f"the plugin's method is missing from the report or a trial failed:\n{table}")
