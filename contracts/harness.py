"""Run a suite on a backend: compare every cell with the oracle, write the card, check the clauses.

Clauses (the letters are the contract's, see contracts/<suite>.md):
  a  every output cell equals the oracle's bits (all NaNs one class), and every value
     the kernels left to the host is on the suite's known list (`fallback_clause`);
  b  the card is byte-identical to the reference card and to every other
     backend's card in the same run (settled by `finish_cross_backend`);
  c, d, f  suite-specific (`suite.extra_clauses`; fold: c, the same bits with 1 and
     2 threads; optim: c invariance, d resume, f refusals);
  e  every negative control produces a different card: a suite-level result
     (`SuiteRun.suite_clauses`), computed once per suite on oracle variants,
     which do not depend on the backend.

>>> from mojolike.contracts import fold
>>> r = run(fold, "oracle")
>>> r.clauses["a"].status, r.records == 3 * len(fold.cases()), sorted(r.suite_clauses)
('n/a', True, ['e'])
"""
from __future__ import annotations

import importlib
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..cards import reference_path
from ..core import cardformat as cards
from ..core import fallbacks, registry
from ..core.refusals import Refusal
from . import provenance

CERTIFY = "mojolike certify"


@dataclass
class Clause:
    status: str  # "pass", "fail" or "n/a"
    detail: str


@dataclass
class SuiteRun:
    suite: str
    profile: str
    backend: str
    numeric_mode: str
    card: str
    card_md5: str
    records: int
    cases: int
    cells_compared: int
    clauses: dict[str, Clause]
    details: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    # clauses of the suite, not of this backend (e: the negative controls, oracle variants)
    suite_clauses: dict[str, Clause] = field(default_factory=dict)
    threads: int | str = "n/a"

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in [*self.clauses.values(), *self.suite_clauses.values()])


def suite_module(name: str):
    return importlib.import_module(f"mojolike.contracts.{name}")


def _outputs(suite, k, progress=None, label: str = "", left=None, cases=None
             ) -> dict[str, np.ndarray]:
    """Every output of every case (of `cases`, default the suite's); with a dict `left`, also
    case id -> the values the kernels left to the host (`fallbacks.Fallback` records)."""
    out = {}
    all_cases = suite.cases() if cases is None else cases
    if progress:
        progress(label, 0, len(all_cases))
    for i, case in enumerate(all_cases, 1):
        with fallbacks.collect() as got:
            for name, arr in suite.outputs(k, case):
                out[f"{case.id}/{name}"] = np.asarray(arr, dtype=np.float32).reshape(-1)
        if left is not None:
            left[case.id] = list(got)
        if progress:
            progress(label, i, len(all_cases))
    return out


def _card(suite, outs: dict[str, np.ndarray]) -> str:
    recs = []
    for key, arr in outs.items():
        case_id, name = key.rsplit("/", 1)
        recs.append(cards.record(case_id, name, arr))
    return cards.render(suite.PROFILE, recs)


_oracle_outputs: dict[str, dict[str, np.ndarray]] = {}
_controls: dict[str, Clause] = {}


def oracle_outputs(suite, progress=None) -> dict[str, np.ndarray]:
    if suite.NAME not in _oracle_outputs:
        k = registry.kernels(CERTIFY, suite.FAMILY, "oracle", registry.CONTRACT_MODE)
        _oracle_outputs[suite.NAME] = _outputs(suite, k, progress, f"{suite.NAME} oracle")
    return _oracle_outputs[suite.NAME]


def _hex(a: np.ndarray) -> str:
    return " ".join(f"0x{u:08x}" for u in a.view(np.uint32)[:4])


def compare_with_oracle(outs, ref) -> tuple[int, list[str]]:
    """(cells compared, descriptions of the first mismatches) with all NaNs one class."""
    cells, bad = 0, []
    for key, want in ref.items():
        got = outs[key]
        cells += want.size
        if got.shape != want.shape or not (
                (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))).all():
            bad.append(f"{key}: got {_hex(got)} oracle {_hex(want)}")
    return cells, bad


def with_1_and_2_threads(k, run) -> tuple[list | None, str]:
    """[run() with 1 thread, run() with 2 threads] on kernels `k` (which has a thread count),
    restoring its count; (None, why) when only one thread is available."""
    if k.max_threads() < 2:
        return None, "only one thread is available; set NUMBA_NUM_THREADS=2 / OMP_NUM_THREADS=2"
    before, seen = k.get_num_threads(), []
    try:
        for t in (1, 2):
            k.set_num_threads(t)
            seen.append(run())
    finally:
        k.set_num_threads(before)
    return seen, ""


def refusal_clause(table, buffers=()) -> tuple[str, str]:
    """Clause (f): every `act()` in table [(expected option, act)] raises a Refusal whose
    `option` is exactly the expected one, and no array in `buffers` (the callers' inputs)
    changes."""
    before = [b.tobytes() for b in buffers]
    failures = []
    for expect, act in table:
        failures += refusal_failures(expect, act)
    if [b.tobytes() for b in buffers] != before:
        failures.append("a caller buffer changed")
    if failures:
        return "fail", f"{len(failures)} of {len(table)} refusals wrong: " + "; ".join(failures)
    tail = ", every caller buffer untouched" if buffers else ""
    return "pass", f"{len(table)} refusals raised by name{tail}"


def built_refusal_clause(rows) -> tuple[str, str]:
    """Clause (f) over rows [(expected option, build)], where build() gives (buffers, grads,
    act): act() must raise a Refusal for exactly that option and leave every array among the
    buffers and grads it returned as it was (each row brings fresh arrays)."""
    failures, count = [], 0
    for expect, build in rows:
        buffers, grads, act = build()
        arrays = [a for a in list(buffers) + list(grads) if isinstance(a, np.ndarray)]
        before = [a.tobytes() for a in arrays]
        count += 1
        wrong = refusal_failures(expect, act)
        if not wrong and [a.tobytes() for a in arrays] != before:
            wrong = [f"{expect}: refused but a caller buffer changed"]
        failures += wrong
    if failures:
        return "fail", f"{len(failures)} of {count} refusals wrong: " + "; ".join(failures)
    return "pass", f"{count} refusals raised by name, every caller buffer untouched"


def refusal_failures(expect: str, act) -> list[str]:
    """[] when act() raises a Refusal for option `expect` (compared whole, not as a substring
    of the message), else what went wrong."""
    try:
        act()
    except Refusal as e:
        if e.option != expect:
            return [f"{expect}: refused for option {e.option!r} instead ({e})"]
        return []
    return [f"{expect}: not refused"]


def negative_controls(suite, progress=None) -> Clause:
    """Clause (e): each deliberately wrong tree must give a card that differs from the oracle's.

    The controls are oracle variants, so this is computed once per suite and reported once
    per suite, never as a clause of one backend."""
    if suite.NAME in _controls:
        return _controls[suite.NAME]
    # a suite may add cases only the controls need (too large for a simulator), run on the oracle
    extra = tuple(getattr(suite, "control_cases", tuple)())
    oracle = registry.kernels(CERTIFY, suite.FAMILY, "oracle", registry.CONTRACT_MODE)
    true_card = _card(suite, {**oracle_outputs(suite, progress),
                              **(_outputs(suite, oracle, cases=extra) if extra else {})})
    lines, caught = [], 0
    for ctl in suite.negative_controls():
        card = _card(suite, _outputs(suite, ctl, progress, f"{suite.NAME} control {ctl.name}",
                                     cases=suite.cases() + extra))
        n = cards.count_differing_records(true_card, card)
        caught += n > 0
        lines.append(f"{ctl.name} ({ctl.describe}): md5={cards.card_md5(card)}, "
                     f"{n} records differ" if n else f"{ctl.name}: NOT detected, card is identical")
    status = "pass" if caught == len(lines) and lines else "fail"
    _controls[suite.NAME] = Clause(status, "computed on: oracle variants; they do not depend on the "
                                           f"backend. {caught}/{len(lines)} controls give a different "
                                           "card; " + "; ".join(lines))
    return _controls[suite.NAME]


def fallback_clause(suite, a: Clause, left: dict[str, list]) -> Clause:
    """Clause (a), its second half: every value the kernels left to the host (`left`: case id ->
    `fallbacks.Fallback` records) must be on the suite's known list (`suite.known_fallback`),
    so a kernel that decides nothing cannot pass on the oracle's answers."""
    known = getattr(suite, "known_fallback", lambda r: False)
    off = [f"{cid}: {r.family} {r}" for cid, recs in left.items() for r in recs if not known(r)]
    n = sum(len(recs) for recs in left.values())
    if off:
        return Clause("fail", f"{len(off)} of {n} values left to the host are not on the contract's "
                              f"known list; first: " + "; ".join(off[:3])
                      + (f"; and {a.detail}" if a.status == "fail" else ""))
    if not n:
        return Clause(a.status, f"{a.detail}; no value left to the host")
    return Clause(a.status, f"{a.detail}; {n} values left to the host, all on the contract's "
                            f"known list")


def _fallback_counts(backend: str, left: dict[str, list]) -> dict | str:
    if backend == "oracle":
        return "n/a: the oracle is the reference and never leaves a value to the host"
    return {cid: len(recs) for cid, recs in left.items()}


def run(suite, backend: str, *, progress=None, computed=None, controls: bool = True) -> SuiteRun:
    """Run `suite` on `backend` in identical mode; clause (b) starts as a reference check.

    `computed`: the backend's `backend_outputs`, already computed (by `run_many`);
    `controls=False` leaves the negative controls (clause e) to the caller."""
    t0 = time.perf_counter()
    k = registry.kernels(CERTIFY, suite.FAMILY, backend, registry.CONTRACT_MODE)
    ref = oracle_outputs(suite, progress)
    if backend == "oracle":
        outs, left = ref, {}
    else:
        outs, left, seconds = computed or backend_outputs(suite, backend, progress)
        t0 -= seconds
    cells, bad = compare_with_oracle(outs, ref)
    if backend == "oracle":
        a = Clause("n/a", f"the oracle is the reference ({cells} cells)")
    elif bad:
        a = Clause("fail", f"{len(bad)} of {len(ref)} outputs differ from the oracle; first: "
                           + "; ".join(bad[:3]))
    else:
        a = Clause("pass", f"{len(suite.cases())} cases, {cells} cells equal the oracle bit for bit")
    if backend != "oracle":
        a = fallback_clause(suite, a, left)
    card = _card(suite, outs)
    clauses = {"a": a, "b": reference_clause(suite, card)}
    clauses.update({letter: Clause(*result) for letter, result in suite.extra_clauses(k).items()})
    clauses = dict(sorted(clauses.items()))
    suite_clauses = {"e": negative_controls(suite, progress)} if controls else {}
    return SuiteRun(suite.NAME, suite.PROFILE, k.backend, k.numeric_mode, card, cards.card_md5(card),
                    len(cards.records_of(card)), len(suite.cases()), cells, clauses,
                    dict(k.details, host_fallbacks=_fallback_counts(backend, left)),
                    round(time.perf_counter() - t0, 3), suite_clauses,
                    provenance.threads(k.backend, k))


def backend_outputs(suite, backend: str, progress=None) -> tuple[dict, dict[str, list], float]:
    """(every output, case id -> the values the kernels left to the host, seconds taken)."""
    t0 = time.perf_counter()
    k = registry.kernels(CERTIFY, suite.FAMILY, backend, registry.CONTRACT_MODE)
    left: dict[str, list] = {}
    outs = _outputs(suite, k, progress, f"{suite.NAME} {backend}", left)
    return outs, left, time.perf_counter() - t0


def run_many(suites, backends, *, progress=None, finished=None, controls_done=None
             ) -> list[list[SuiteRun]]:
    """Every suite on every backend: `run_many(...)[i][j]` is `suites[i]` on `backends[j]`.

    `finished(run)` is called as each suite x backend's clauses are known, and
    `controls_done(suite_name, clauses)` as each suite's negative controls are.

    A backend whose kernels run in a worker process (the simulator, `registry.runs_in_worker`)
    computes its outputs in a thread meanwhile, so that process works while this one runs the
    oracle and the CPU backends: the runs are the ones `run` gives, sooner on two cores. The
    negative controls patch module functions, so they wait until that thread is done."""
    away = [b for b in backends if registry.runs_in_worker(b)]
    computed: dict[tuple[str, str], tuple] = {}
    failed: list[BaseException] = []

    def work():
        try:
            for suite in suites:
                for b in away:
                    computed[(suite.NAME, b)] = backend_outputs(suite, b, progress)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            failed.append(e)

    worker = threading.Thread(target=work, name="mojolike-certify-worker", daemon=True)
    worker.start()
    for s in suites:  # every run compares with the oracle: compute it meanwhile too
        oracle_outputs(s, progress)
    here = {}
    for s in suites:
        for b in backends:
            if b not in away:
                here[(s.NAME, b)] = run(s, b, progress=progress, controls=False)
                if finished:
                    finished(here[(s.NAME, b)])
    worker.join()
    if failed:
        raise failed[0]
    out = []
    for s in suites:
        runs = []
        for b in backends:
            if (s.NAME, b) in here:
                runs.append(here[(s.NAME, b)])
                continue
            runs.append(run(s, b, progress=progress, controls=False, computed=computed[(s.NAME, b)]))
            if finished:
                finished(runs[-1])
        controls = {"e": negative_controls(s, progress)}
        if controls_done:
            controls_done(s.NAME, controls)
        for r in runs:
            r.suite_clauses = controls
        out.append(runs)
    return out


def reference_clause(suite, card: str) -> Clause:
    path = reference_path(suite.NAME)
    if not path.exists():
        return Clause("fail", f"no reference card at {path}")
    try:
        ref = cards.read(path)
    except cards.CardError as e:
        return Clause("fail", f"the reference card is not a valid card: {e}")
    diff = cards.first_difference(ref.text, card)
    if diff:
        return Clause("fail", f"differs from the reference card {path.name}: {diff}")
    return Clause("pass", f"equals the reference card {path.name} (md5 {ref.md5}, trailer verified)")


def finish_cross_backend(runs: list[SuiteRun], *, against_reference: bool = True) -> None:
    """Settle clause (b) for runs of one suite: every card equal to every other (and the reference)."""
    if not runs:
        return
    first = runs[0]
    for r in runs:
        others = [o for o in runs if o is not r]
        diffs = [f"{o.backend}: {cards.first_difference(o.card, r.card)}"
                 for o in others if o.card != r.card]
        ref = r.clauses["b"] if against_reference else Clause("pass", "reference not consulted")
        names = ", ".join(o.backend for o in others) or "no other backend"
        if diffs:
            r.clauses["b"] = Clause("fail", "differs from " + "; ".join(diffs))
        elif ref.status == "fail":
            r.clauses["b"] = ref
        else:
            r.clauses["b"] = Clause("pass", f"md5 {first.card_md5} on {names} too; {ref.detail}")


def gpu_status(suite_name: str, cards_dir: Path | None = None) -> dict:
    """Whether a real NVIDIA run of this suite is on record: a committed
    `<suite>.cuda.meta.json` beside the reference card with backend "cuda", the device,
    compute capability, driver and runtime present, and the reference card's md5."""
    ref = Path(cards_dir) / f"{suite_name}.card" if cards_dir is not None else reference_path(suite_name)
    try:
        ref_md5 = cards.read(ref).md5
    except (OSError, cards.CardError):
        ref_md5 = None
    ok, why = provenance.real_gpu_run(ref.with_name(f"{suite_name}.cuda.meta.json"), ref_md5)
    if ok:
        return {"real_gpu_run": True, "why": why}
    return {"real_gpu_run": False, "why": why,
            "note": "no run on a real NVIDIA GPU is on record for this suite; the CUDA kernels "
                    "have run only under numba's CUDA simulator (cuda-sim)"}


def meta(r: SuiteRun) -> dict:
    d = asdict(r)
    d.pop("card")
    d["numeric_mode"] = registry.mode_label(r.numeric_mode)
    d.update(provenance.of_run(r.backend, r.details, r.threads))
    d["host"]["argv"] = " ".join(sys.argv)
    d["gpu"] = gpu_status(r.suite)
    d["ok"] = r.ok
    return d


def write(r: SuiteRun, out_dir: Path) -> tuple[Path, Path]:
    """Write `<out>/<backend>/<suite>.card` and `.meta.json`, each atomically."""
    folder = Path(out_dir) / r.backend
    card_path, meta_path = folder / f"{r.suite}.card", folder / f"{r.suite}.meta.json"
    cards.write_atomic(card_path, r.card)
    cards.write_json_atomic(meta_path, meta(r))
    return card_path, meta_path
