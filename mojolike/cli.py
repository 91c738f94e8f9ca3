"""The `mojolike` command: certify backends, compare cards, list backends, train, generate.

    mojolike certify [--backend NAME|all] [--suite NAME|all] [--out DIR] [--json]
                     [--numeric-mode identical] [--threads N] [--update-reference]
    mojolike compare A B [--json]   (two cards, or two folders of cards)
    mojolike backends [--json]
    mojolike train ...              (mojolike train --help)
    mojolike generate ...           (mojolike generate --help)
    mojolike --version

Exit codes:
  certify  0 every clause holds (and, with --update-reference, every reference was
           written); 1 a clause fails or a reference was not written; 2 a usage error
           (an unknown backend or suite, a numeric mode the contract does not define),
           an unavailable backend, or --update-reference without the backends it needs
           (oracle, cpu-numba, cpu-cffi, and cuda-sim where it runs).
  compare  0 the cards are the same; 1 valid cards differ (or a card is in only one
           folder, or the two cards are of different profiles); 2 a card is invalid (the
           file and line are named) or a usage error.
  train    0 the run reached its last step (or --stop-at); 2 a usage error, a refused
           option or an unavailable backend; 130 interrupted.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

from . import __version__
from .cli_progress import LEGEND, Progress
from .core import registry


class UsageError(Exception):
    """A command line the command cannot run: said on stderr, exit status 2."""


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _choose_backends(name: str) -> tuple[list[str], list[registry.BackendInfo]]:
    infos = registry.backends()
    if name == "all":
        return [b.name for b in infos if b.available], [b for b in infos if not b.available]
    info = {b.name: b for b in infos}.get(name)
    if info is None:
        raise UsageError(f"--backend {name!r} is not a backend; choose one of "
                         f"{', '.join(registry.BACKENDS)} or all")
    if not info.available:
        raise UsageError(f"--backend {name!r} cannot run here: {info.reason}")
    return [name], []


def reference_backends() -> list[str]:
    """The backends that must agree before a reference card is written: the oracle, both CPU
    backends, and the CUDA kernels under the simulator wherever the simulator runs."""
    sim = {b.name: b for b in registry.backends()}["cuda-sim"]
    return ["oracle", "cpu-numba", "cpu-cffi"] + (["cuda-sim"] if sim.available else [])


def _missing_reference_backends(names: list[str]) -> list[str]:
    return [b for b in reference_backends() if b not in names]


def _update_reference(suite, runs) -> tuple[bool, str]:
    """Write `cards/<suite>.card` and its meta when the required backends ran, their cards
    agree and every clause holds; (written, a sentence saying what happened)."""
    from .cards import reference_path
    from .contracts import harness, provenance
    from .core import cardformat
    missing = _missing_reference_backends([r.backend for r in runs])
    bad = [f"{r.backend} {k}" for r in runs for k, c in r.clauses.items() if k != "b" and c.status == "fail"]
    bad += [f"suite {k}" for k, c in (runs[0].suite_clauses if runs else {}).items() if c.status == "fail"]
    cards_differ = len({r.card for r in runs}) > 1
    if missing or bad or cards_differ:
        why = ("backends " + ", ".join(missing) + " did not run" if missing
               else "cards differ between backends" if cards_differ
               else "failing clauses " + ", ".join(bad))
        return False, f"reference for {suite.NAME} not updated: {why}"
    path = reference_path(suite.NAME)
    old, old_note = None, ""
    if path.exists():
        try:
            old = cardformat.read(path).text
        except cardformat.CardError as e:
            old, old_note = path.read_text(errors="replace"), f"; the old card was not valid ({e})"
    first = runs[0]
    cardformat.write_atomic(path, first.card)
    cuda = next((r for r in runs if r.backend == "cuda"), None)
    cffi = next(r for r in runs if r.backend == "cpu-cffi")
    cardformat.write_json_atomic(path.with_name(f"{suite.NAME}.meta.json"), {
        "suite": suite.NAME, "profile": suite.PROFILE, "card_md5": first.card_md5,
        "records": first.records, "cases": first.cases,
        "backends": {r.backend: {"cells_compared": r.cells_compared,
                                 "numeric_mode": registry.mode_label(r.numeric_mode),
                                 "threads": r.threads,
                                 "clauses": {k: c.status for k, c in r.clauses.items() if k != "b"}}
                     for r in runs},
        "suite_clauses": {k: c.status for k, c in first.suite_clauses.items()},
        "versions": provenance.versions(), "host": provenance.host(),
        "compiler": provenance.compiler(cffi.details),
        **({"cuda": provenance.cuda_device()} if cuda else {}),
        "gpu": harness.gpu_status(suite.NAME, path.parent)})
    for r in runs:
        r.clauses["b"].detail += f"; written as the reference card {path.name}"
    if old is None:
        return True, f"reference {path} written (md5 {first.card_md5})"
    n = cardformat.count_differing_records(old, first.card)
    return True, f"reference {path} updated: {n} records changed (md5 {first.card_md5}){old_note}"


def _lacking(suite) -> str:
    """Why a suite cannot run here ('' when it can): a module it needs that is not installed."""
    need, extra = getattr(suite, "REQUIRES", (None, None))
    if need is None or importlib.util.find_spec(need) is not None:
        return ""
    if extra is None:  # a dependency missing from an install made without deps
        return f"{need} is not installed: pip install {need.replace('_', '-')}"
    return f"{need} is not installed: pip install 'mojolike[{extra}]'"


def _threads(n: int | None) -> None:
    from .training.cli import set_threads
    try:
        set_threads(n)
    except ValueError as e:
        raise UsageError(str(e)) from None


def certify(args) -> int:
    from .contracts import SUITES, harness
    if args.numeric_mode not in (None, registry.CONTRACT_MODE):
        raise UsageError(f"--numeric-mode {args.numeric_mode!r}: the contracts define the "
                         f"{registry.CONTRACT_MODE} mode only; {', '.join(registry.MODES)} exist, "
                         f"and only {registry.CONTRACT_MODE} is certified")
    if args.suite != "all" and args.suite not in SUITES:
        raise UsageError(f"--suite {args.suite!r} is not a suite; choose one of "
                         f"{', '.join(SUITES)} or all")
    _threads(args.threads)
    names, skipped = _choose_backends(args.backend)
    suites = SUITES if args.suite == "all" else (args.suite,)
    missing = _missing_reference_backends(names) if args.update_reference else []
    if missing:
        info = {b.name: b for b in registry.backends()}
        print("mojolike certify: --update-reference needs " + ", ".join(reference_backends())
              + " to agree; missing: " + ", ".join(
                  f"{b} (not selected by --backend {args.backend})" if info[b].available
                  else f"{b} (cannot run here: {info[b].reason})" for b in missing), file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    all_runs, notes, suite_clauses, written, not_run = [], [], {}, True, {}
    runnable = []
    for sname in suites:
        suite = harness.suite_module(sname)
        lacking = _lacking(suite)
        if lacking:
            if args.suite != "all":
                print(f"mojolike certify: suite {sname} cannot run here: {lacking}", file=sys.stderr)
                return 2
            not_run[sname] = lacking
            continue
        runnable.append(suite)
    progress = Progress([s.NAME for s in runnable])
    started = time.perf_counter()
    results = harness.run_many(runnable, names, progress=progress.cases,
                               finished=progress.finished, controls_done=progress.controls)
    progress.total(sum(map(len, results)))
    for suite, runs in zip(runnable, results):
        sname = suite.NAME
        harness.finish_cross_backend(runs, against_reference=not args.update_reference)
        if args.update_reference:
            done, note = _update_reference(suite, runs)
            written &= done
            notes.append(note)
        for r in runs:
            harness.write(r, out_dir)
        all_runs += runs
        suite_clauses[sname] = runs[0].suite_clauses if runs else {}
    ok = all(r.ok for r in all_runs) and written
    if args.json:
        print(json.dumps({"ok": ok, "out": str(out_dir), "runs": [harness.meta(r) for r in all_runs],
                          "suites": {s: {k: {"status": c.status, "detail": c.detail}
                                         for k, c in cl.items()} for s, cl in suite_clauses.items()},
                          "unavailable": {b.name: b.reason for b in skipped},
                          "suites_not_run": not_run, "notes": notes},
                         indent=2, sort_keys=True))
        return 0 if ok else 1
    rows = [["suite", "backend", "records", "cells compared", "clauses", "card md5"]]
    letters = sorted({k for r in all_runs for k in r.clauses} | {k for cl in suite_clauses.values() for k in cl})
    for r in all_runs:
        rows.append([r.suite, r.backend, str(r.records), str(r.cells_compared),
                     " ".join(f"{k}:{c.status}" for k, c in r.clauses.items()), r.card_md5])
    print(_table(rows))
    for s, cl in suite_clauses.items():
        print(f"{s}: " + " ".join(f"{k}:{c.status}" for k, c in cl.items())
              + " (negative controls: oracle variants, computed once per suite)")
    for b in skipped:
        print(f"not run: {b.name} ({b.reason})")
    for sname, why in not_run.items():
        print(f"not run: suite {sname} ({why})")
    for r in all_runs:
        for k, c in r.clauses.items():
            if c.status == "fail":
                print(f"FAIL {r.suite} {r.backend} ({k}): {c.detail}")
    for s, cl in suite_clauses.items():
        for k, c in cl.items():
            if c.status == "fail":
                print(f"FAIL {s} ({k}, once per suite): {c.detail}")
    for n in notes:
        print(n)
    print("clauses: " + "; ".join(f"{k} {LEGEND.get(k, 'see the suite contract')}" for k in letters))
    print(f"cards and meta in {out_dir}/<backend>/; {'all clauses hold' if ok else 'some clauses FAIL'}"
          f"; {time.perf_counter() - started:.1f} s in all")
    return 0 if ok else 1


def _card_files(p: Path) -> dict[str, Path]:
    return {str(f.relative_to(p)): f for f in sorted(p.rglob("*.card"))}


def _profile_mismatch(name: str, a, b) -> str | None:
    if a.profile == b.profile:
        return None
    return (f"{name}: the cards come from different contracts: {a.source} was written under "
            f"profile {a.profile} and {b.source} under {b.profile}; a record-by-record comparison "
            f"would mean nothing, so none was made")


def compare(args) -> int:
    from .core.cardformat import CardError, first_difference, read
    a, b = Path(args.a), Path(args.b)

    def verdict(code: int, text: str, **extra) -> int:
        if args.json:
            print(json.dumps({"result": {0: "same", 1: "differ", 2: "error"}[code], "message": text,
                              **extra}, indent=2, sort_keys=True))
        else:
            print(text, file=sys.stderr if code == 2 else sys.stdout)
        return code

    if a.is_file() and b.is_file():
        fa, fb = {a.name: a}, {a.name: b}
    elif a.is_dir() and b.is_dir():
        fa, fb = _card_files(a), _card_files(b)
        if not fa and not fb:
            return verdict(2, f"mojolike compare: no cards under {a} and {b}")
    else:
        return verdict(2, "mojolike compare: give two card files or two folders of cards")
    try:  # every card is verified before any verdict: two equal broken files are not "same"
        ca = {k: read(p) for k, p in fa.items()}
        cb = {k: read(p) for k, p in fb.items()}
    except CardError as e:
        return verdict(2, f"mojolike compare: invalid card: {e}")
    missing = sorted(set(ca) ^ set(cb))
    if missing:
        return verdict(1, f"differ: {missing[0]} is in only one of the folders", card=missing[0])
    for name, card in ca.items():
        why = _profile_mismatch(name, card, cb[name])
        diff = why and f"differ: {why}"
        if not diff:
            first = first_difference(card.text, cb[name].text)
            diff = first and f"differ: {name}: {first}"
        if diff:
            return verdict(1, diff, card=name)
    same = {name: card.md5 for name, card in ca.items()}
    return verdict(0, "\n".join(f"same: {name} md5={md5}" for name, md5 in same.items()), md5=same)


def show_backends(args) -> int:
    infos = registry.backends()
    if args.json:
        print(json.dumps({"backends": [{"name": b.name, "available": b.available, "why": b.reason,
                                        "what": b.description} for b in infos],
                          "default_backend": registry.DEFAULT_BACKEND,
                          "default_numeric_mode": registry.DEFAULT_MODE,
                          "certified_numeric_mode": registry.CONTRACT_MODE}, indent=2, sort_keys=True))
        return 0
    rows = [["backend", "available", "why / how", "what"]]
    for b in infos:
        rows.append([b.name, "yes" if b.available else "no", b.reason, b.description])
    print(_table(rows))
    print(f"default: {registry.DEFAULT_BACKEND}, numeric mode {registry.DEFAULT_MODE} "
          f"(deterministic and fast carry no contract)")
    return 0


def _epilog() -> str:
    from .contracts import SUITES
    exits = __doc__[__doc__.index("Exit codes:"):].rstrip()
    return (f"suites: {', '.join(SUITES)}\nbackends: {', '.join(registry.BACKENDS)} (mojolike "
            f"backends says which run here)\nnumeric modes: {', '.join(registry.MODES)} (only "
            f"{registry.CONTRACT_MODE} is certified)\n\n{exits}\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mojolike", description=__doc__.splitlines()[0],
                                epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"mojolike {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("certify", help="run the contract suites and write cards",
                       epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--backend", default="all", help="a backend name, or all available (default)")
    c.add_argument("--suite", default="all", help="a suite name, or all (default)")
    c.add_argument("--out", default="cards-out", help="output folder (default ./cards-out)")
    c.add_argument("--json", action="store_true", help="print a JSON summary instead of the table")
    c.add_argument("--numeric-mode", default=None,
                   help=f"the numeric mode (MOJOLIKE_NUMERIC_MODE); the contracts define "
                        f"{registry.CONTRACT_MODE} only, the default")
    c.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads of both CPU backends (NUMBA_NUM_THREADS and OMP_NUM_THREADS)")
    c.add_argument("--update-reference", action="store_true",
                   help="write the committed reference cards (only when oracle, cpu-numba, cpu-cffi "
                        "and cuda-sim where it runs agree and every clause holds)")
    c.set_defaults(func=certify)
    m = sub.add_parser("compare", help="compare two cards or two folders of cards; name the first "
                                       "differing record (of a run card: the first differing step)")
    m.add_argument("a", help="a card file, or a folder of cards (searched recursively)")
    m.add_argument("b", help="the card file or folder to compare it with")
    m.add_argument("--json", action="store_true", help="print the verdict as JSON")
    m.set_defaults(func=compare)
    b = sub.add_parser("backends", help="list backends and whether they run here")
    b.add_argument("--json", action="store_true", help="print the list as JSON")
    b.set_defaults(func=show_backends)
    from .training.cli import add_parser as add_train
    from .training.generate_cli import add_parser as add_generate
    add_train(sub)
    add_generate(sub)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"mojolike {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
