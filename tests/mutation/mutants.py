"""Mutation testing of the formulas with mutmut: ``nox -s mutants`` (not in the default run).

mutmut changes one thing at a time in a function (an operator, a constant, an argument, a
comparison) and runs the tests that call that function; a mutant the tests do not fail
*survives*. Every survivor is either killed by a new test or listed in ``equivalent.toml`` with
the reason no test can tell it from the original (e.g. a branch that differs only on an exact
float tie). This script stages the modules in scope and their fast unit tests in ``.mutants/``
(git-ignored; mutmut keeps its results there and resumes where it stopped), runs mutmut and
prints each module's score: killed / (mutants - listed equivalents).

    python tests/mutation/mutants.py                  # every module in scope (hours on two cores)
    python tests/mutation/mutants.py parts/losses     # one module (minutes): all its mutants again
    python tests/mutation/mutants.py --survivors      # only the mutants that survived, again
    python tests/mutation/mutants.py --survivors parts  # ... of the modules named only
    python tests/mutation/mutants.py --report         # the scores of the last runs, nothing run

Exit status 1 when a survivor is neither killed nor listed (or a listed one no longer survives:
the list is kept exact), 0 otherwise.
"""

from __future__ import annotations

import argparse
import filecmp
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGE = ROOT / ".mutants"
EQUIVALENT = Path(__file__).with_name("equivalent.toml")
# The modules in scope (package source paths, globs) and the unit tests that must kill their
# mutants: the shared parts, the loop's engine, the rehearsal methods X-DER is compared with, the
# metrics. Module-level code is not mutated (mutmut 3 mutates function bodies).
SCOPE = {
    "xder_methods/parts/*.py": "tests/methods",
    "xder_methods/core/base.py": "tests/methods",
    "xder_methods/core/evaluation.py": "tests/methods",
    "xder_methods/core/loop.py": "tests/methods",
    "xder_methods/core/schedule.py": "tests/methods",
    "xder_methods/methods/xder.py": "tests/methods",
    "xder_methods/methods/der.py": "tests/methods",
    "xder_methods/methods/derpp.py": "tests/methods",
    "xder_methods/methods/er.py": "tests/methods",
    "xder_eval/metrics.py": "tests/eval",
    "xder_eval/calibration.py": "tests/eval",
}
# Statements left alone (regular expressions on their first line): what an error says, which the
# commands' tests check where it reaches a user; the condition that raises it is mutated.
DO_NOT_MUTATE = [r"^\s*raise "]
PACKAGES = {"xder_methods": "packages/xder-methods/src", "xder_eval": "packages/xder-eval/src"}
# What a mutmut exit code means (mutmut.stats.status_by_exit_code), as this report counts it.
KILLED = {"killed", "timeout", "segfault", "caught by type check"}


@dataclass(frozen=True)
class Mutant:
    name: str  # mutmut's: module.x_function__mutmut_N (methods: module.xǁClassǁmethod__mutmut_N)
    module: str
    status: str
    removed: tuple[str, ...]  # the changed lines, before and after, stripped
    added: tuple[str, ...]

    @property
    def function(self) -> str:
        """``function`` or ``Class.method``."""
        mangled = self.name[len(self.module) + 1 :].partition("__mutmut_")[0]
        if mangled.startswith("xǁ"):
            owner, _, method = mangled[2:].partition("ǁ")
            return f"{owner}.{method}"
        return mangled.removeprefix("x_")


def in_scope(relative: str) -> bool:
    return any(fnmatch.fnmatch(relative, pattern) for pattern in SCOPE)


def stage() -> None:
    """Copy the packages' sources and the tests into the stage; a file is rewritten only where
    it changed, so that mutmut re-mutates and re-tests only what changed."""
    for package, src in PACKAGES.items():
        sync(ROOT / src / package, STAGE / "src" / package)
    for folder in sorted(set(SCOPE.values())):
        sync(ROOT / folder, STAGE / folder)
    for name in ("conftest.py", "structure.py"):
        sync(ROOT / "tests" / name, STAGE / "tests" / name)
    sync(ROOT / "docs", STAGE / "docs")  # pages some unit tests hold against the code
    only = [f"src/{pattern}" for pattern in SCOPE]
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    structure = [f"--ignore={folder}/test_structure.py" for folder in sorted(set(SCOPE.values()))]
    write_if_changed(
        STAGE / "pyproject.toml",
        "\n".join(
            [
                "[tool.mutmut]",
                'source_paths = ["src"]',
                f"only_mutate = {json.dumps(only)}",
                f"pytest_add_cli_args_test_selection = {json.dumps(sorted(set(SCOPE.values())))}",
                'also_copy = ["docs"]',  # into mutmut's own copy of the stage, beside src and tests
                # The structure tests read the sources, which mutmut rewrites; no cache files.
                f"pytest_add_cli_args = {json.dumps([*structure, '-p', 'no:cacheprovider'])}",
                # Workers forked from a process that never imported torch (mutmut's advice for torch).
                'process_isolation = "forkserver"',
                # Not the numbers: a raise statement's message (its condition is mutated).
                f"do_not_mutate_patterns = {json.dumps(DO_NOT_MUTATE)}",
                "",
                "[tool.pytest.ini_options]",
                f"addopts = {json.dumps(pytest_options['addopts'])}",
                f"markers = {json.dumps(pytest_options['markers'])}",
                f"filterwarnings = {json.dumps(pytest_options['filterwarnings'])}",
                "",
            ]
        ),
    )


def sync(source: Path, target: Path) -> None:
    if source.is_file():
        if not target.exists() or not filecmp.cmp(source, target, shallow=False):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        return
    for path in source.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            sync(path, target / path.relative_to(source))
    for path in target.rglob("*.py"):  # files removed from the source
        if not (source / path.relative_to(target)).exists():
            path.unlink()


def write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def mutmut(*args: str, jobs: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *args]
    subprocess.run(command, cwd=STAGE, env=env, check=False)


def collect() -> list[Mutant]:
    """Every mutant of the modules in scope with its status and changed lines (mutmut's own
    result files, read with mutmut's own functions, in the stage)."""
    os.chdir(STAGE)
    sys.path.insert(0, str(STAGE / "mutants" / "src"))
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    mutants = []
    for path in sorted(Path("src").rglob("*.py")):
        relative = path.relative_to("src").as_posix()
        if not in_scope(relative):
            continue
        data = SourceFileMutationData(path=path)
        data.load()
        module = relative.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        for name, exit_code in sorted(data.exit_code_by_key.items()):
            status = status_by_exit_code[exit_code]
            removed: tuple[str, ...] = ()
            added: tuple[str, ...] = ()
            if status not in KILLED:
                diff = get_diff_for_mutant(name, path=path).splitlines()[2:]
                removed = tuple(line[1:].strip() for line in diff if line.startswith("-"))
                added = tuple(line[1:].strip() for line in diff if line.startswith("+"))
            mutants.append(Mutant(name, module, status, removed, added))
    return mutants


def listed_equivalents() -> list[dict[str, str]]:
    return tomllib.loads(EQUIVALENT.read_text()).get("equivalent", [])


def matches(entry: dict[str, str], mutant: Mutant) -> bool:
    return (
        entry["module"] == mutant.module
        and entry["function"] == mutant.function
        and entry["from"].strip() == " ".join(mutant.removed)
        and entry["to"].strip() == " ".join(mutant.added)
    )


def report(mutants: list[Mutant], modules: list[str] | None, toml: bool = False) -> int:
    equivalents = listed_equivalents()
    shown = [
        m for m in mutants if modules is None or any(f"{m.module}.".startswith(f"{x}.") for x in modules)
    ]
    rows, unexplained, used, unfinished = {}, [], set(), set()
    for mutant in shown:
        row = rows.setdefault(mutant.module, {"mutants": 0, "killed": 0, "equivalent": 0, "left": 0})
        row["mutants"] += 1
        if mutant.status == "not checked":
            unfinished.add(mutant.module)
        if mutant.status in KILLED:
            row["killed"] += 1
            continue
        listed = [i for i, entry in enumerate(equivalents) if matches(entry, mutant)]
        if listed and mutant.status == "survived":
            row["equivalent"] += 1
            used.update(listed)
        else:
            row["left"] += 1
            unexplained.append(mutant)
    width = max((len(module) for module in rows), default=6)
    print(f"\n{'module':<{width}}  mutants  killed  equivalent  left  score")
    for module, row in sorted(rows.items()):
        scored = row["mutants"] - row["equivalent"]
        score = 100 * row["killed"] / scored if scored else 100.0
        print(
            f"{module:<{width}}  {row['mutants']:7d}  {row['killed']:6d}  {row['equivalent']:10d}"
            f"  {row['left']:4d}  {score:5.1f}%"
        )
    (STAGE / "scores.json").write_text(json.dumps(rows, indent=1, sort_keys=True))
    for mutant in unexplained:
        if mutant.status != "not checked":
            print(f"\n{mutant.status}: {mutant.name} ({mutant.function})")
            lines = [*(f"- {line}" for line in mutant.removed), *(f"+ {line}" for line in mutant.added)]
            print("\n".join(lines))
            if toml:  # an entry of equivalent.toml, its reason to be written
                entry = {"module": mutant.module, "function": mutant.function}
                entry |= {"from": " ".join(mutant.removed), "to": " ".join(mutant.added), "why": "..."}
                print("[[equivalent]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in entry.items()))
    # An entry is stale once its module has been run to the end and the mutant did not survive.
    finished = set(rows) - unfinished
    stale = [entry for i, entry in enumerate(equivalents) if i not in used and entry["module"] in finished]
    if unfinished:
        print(f"\nnot yet run to the end: {', '.join(sorted(unfinished))}")
    for entry in stale:
        print(
            f"\nlisted as equivalent but no longer surviving: {entry['module']}.{entry['function']}: "
            f"{entry['from']!r} -> {entry['to']!r}"
        )
    left = sum(mutant.status != "not checked" for mutant in unexplained)
    print(f"\n{left} mutants neither killed nor listed; {len(stale)} stale entries in {EQUIVALENT.name}")
    return 1 if unexplained or stale else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "modules", nargs="*", help="modules to run again, e.g. parts/losses or xder_eval/metrics"
    )
    parser.add_argument("--survivors", action="store_true", help="run the survivors of earlier runs again")
    parser.add_argument("--report", action="store_true", help="print the scores of earlier runs only")
    parser.add_argument("--fresh", action="store_true", help="forget earlier runs (delete .mutants/)")
    parser.add_argument(
        "--toml", action="store_true", help="print each survivor as an equivalent.toml entry too"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="mutants tested at once")
    args = parser.parse_args()
    if args.fresh:
        shutil.rmtree(STAGE, ignore_errors=True)
    STAGE.mkdir(exist_ok=True)
    names = [f"{module.replace('/', '.').removesuffix('.py')}.*" for module in args.modules]
    names = [name if name.startswith("xder_") else f"xder_methods.{name}" for name in names]
    if not args.report:
        stage()
        if args.survivors:
            cwd = Path.cwd()
            wanted = [name.removesuffix("*") for name in names]  # modules given: theirs only
            survivors = [
                m.name
                for m in collect()
                if m.status not in KILLED and (not wanted or any(m.name.startswith(w) for w in wanted))
            ]
            os.chdir(cwd)
            if survivors:
                mutmut(*survivors, jobs=args.jobs)
        else:
            mutmut(*names, jobs=args.jobs)
    modules = [name.removesuffix(".*") for name in names] or None
    return report(collect(), modules, toml=args.toml)


if __name__ == "__main__":
    sys.exit(main())
