"""The `mojolike` command: certify backends, compare cards, list backends.

    mojolike certify [--backend NAME|all] [--suite NAME|all] [--out DIR] [--json]
    mojolike compare A B          (two cards, or two folders of cards)
    mojolike backends

`certify` exits 1 when any clause fails, 2 on a usage error or an unavailable backend.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import registry


def _progress(label: str, done: int, total: int) -> None:
    if sys.stderr.isatty():
        end = "\n" if done == total else ""
        sys.stderr.write(f"\r\x1b[K  {label}: {done}/{total} cases{end}")
        sys.stderr.flush()


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
        raise SystemExit(f"mojolike certify: --backend {name!r} is not a backend; choose one of "
                         f"{', '.join(registry.BACKENDS)} or all")
    if not info.available:
        print(f"mojolike certify: --backend {name!r} cannot run here: {info.reason}", file=sys.stderr)
        raise SystemExit(2)
    return [name], []


def _update_reference(suite, runs) -> str:
    from .cards import reference_path
    from .contracts import cardformat
    bad = [f"{r.backend} {k}" for r in runs for k, c in r.clauses.items() if k != "b" and c.status == "fail"]
    cards_differ = len({r.card for r in runs}) > 1
    if bad or cards_differ or not runs:
        return (f"reference for {suite.NAME} not updated: "
                + ("cards differ between backends" if cards_differ else "failing clauses " + ", ".join(bad)))
    path = reference_path(suite.NAME)
    old = path.read_text() if path.exists() else None
    cardformat.write_atomic(path, runs[0].card)
    cardformat.write_json_atomic(path.with_name(f"{suite.NAME}.meta.json"), {
        "suite": suite.NAME, "profile": suite.PROFILE, "card_md5": runs[0].card_md5,
        "records": runs[0].records, "cases": runs[0].cases,
        "backends": {r.backend: {"cells_compared": r.cells_compared,
                                 "clauses": {k: c.status for k, c in r.clauses.items() if k != "b"}}
                     for r in runs}})
    for r in runs:
        r.clauses["b"].detail += f"; written as the reference card {path.name}"
    if old is None:
        return f"reference {path} written (md5 {runs[0].card_md5})"
    n = cardformat.count_differing_records(old, runs[0].card)
    return f"reference {path} updated: {n} records changed (md5 {runs[0].card_md5})"


def certify(args) -> int:
    from .contracts import SUITES, harness
    names, skipped = _choose_backends(args.backend)
    if args.suite != "all" and args.suite not in SUITES:
        raise SystemExit(f"mojolike certify: --suite {args.suite!r} is not a suite; choose one of "
                         f"{', '.join(SUITES)} or all")
    suites = SUITES if args.suite == "all" else (args.suite,)
    out_dir = Path(args.out)
    all_runs, notes = [], []
    for sname in suites:
        suite = harness.suite_module(sname)
        runs = [harness.run(suite, b, progress=_progress) for b in names]
        harness.finish_cross_backend(runs, against_reference=not args.update_reference)
        if args.update_reference:
            notes.append(_update_reference(suite, runs))
        for r in runs:
            harness.write(r, out_dir)
        all_runs += runs
    ok = all(r.ok for r in all_runs)
    if args.json:
        print(json.dumps({"ok": ok, "out": str(out_dir), "runs": [harness.meta(r) for r in all_runs],
                          "unavailable": {b.name: b.reason for b in skipped}, "notes": notes},
                         indent=2, sort_keys=True))
        return 0 if ok else 1
    rows = [["suite", "backend", "records", "cells compared", "clauses", "card md5"]]
    for r in all_runs:
        rows.append([r.suite, r.backend, str(r.records), str(r.cells_compared),
                     " ".join(f"{k}:{c.status}" for k, c in r.clauses.items()), r.card_md5])
    print(_table(rows))
    for b in skipped:
        print(f"not run: {b.name} ({b.reason})")
    for r in all_runs:
        for k, c in r.clauses.items():
            if c.status == "fail":
                print(f"FAIL {r.suite} {r.backend} ({k}): {c.detail}")
    for n in notes:
        print(n)
    print(f"cards and meta in {out_dir}/<backend>/; {'all clauses hold' if ok else 'some clauses FAIL'}")
    return 0 if ok else 1


def _card_files(p: Path) -> dict[str, Path]:
    return {str(f.relative_to(p)): f for f in sorted(p.rglob("*.card"))}


def compare(args) -> int:
    from .contracts.cardformat import first_difference, md5_text
    a, b = Path(args.a), Path(args.b)
    if a.is_file() and b.is_file():
        pairs = {a.name: (a, b)}
    elif a.is_dir() and b.is_dir():
        fa, fb = _card_files(a), _card_files(b)
        missing = sorted(set(fa) ^ set(fb))
        if missing:
            print(f"differ: {missing[0]} is in only one of the folders")
            return 1
        pairs = {k: (fa[k], fb[k]) for k in fa}
        if not pairs:
            print(f"no cards under {a} and {b}")
            return 2
    else:
        print("mojolike compare: give two card files or two folders of cards", file=sys.stderr)
        return 2
    for name, (x, y) in pairs.items():
        diff = first_difference(x.read_text(), y.read_text())
        if diff:
            print(f"differ: {name}: {diff}")
            return 1
    for name, (x, _) in pairs.items():
        print(f"same: {name} md5={md5_text(x.read_text())}")
    return 0


def show_backends(args) -> int:
    rows = [["backend", "available", "why / how", "what"]]
    for b in registry.backends():
        rows.append([b.name, "yes" if b.available else "no", b.reason, b.description])
    print(_table(rows))
    print(f"default: {registry.DEFAULT_BACKEND}, numeric mode {registry.DEFAULT_MODE} "
          f"(deterministic and fast carry no contract)")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mojolike", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("certify", help="run the contract suites and write cards")
    c.add_argument("--backend", default="all", help="a backend name, or all available (default)")
    c.add_argument("--suite", default="all", help="a suite name, or all (default)")
    c.add_argument("--out", default="cards-out", help="output folder (default ./cards-out)")
    c.add_argument("--json", action="store_true", help="print a JSON summary instead of the table")
    c.add_argument("--update-reference", action="store_true",
                   help="write the committed reference cards (only when every backend agrees)")
    c.set_defaults(func=certify)
    m = sub.add_parser("compare", help="compare two cards or two folders of cards")
    m.add_argument("a")
    m.add_argument("b")
    m.set_defaults(func=compare)
    b = sub.add_parser("backends", help="list backends and whether they run here")
    b.set_defaults(func=show_backends)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
