"""scipy heuristics over a search space: ``de`` (differential evolution) and ``anneal`` (dual annealing).

The decision vector has one entry per dimension with more than one choice: the choice index for a
finite dimension (``integrality`` for DE, rounding for annealing) or the value of a continuous
range (its logarithm for a log range). ``de`` evaluates whole populations in one vectorized model
call (``vectorized=True``).

Constraints become a penalty: an infeasible point scores ``1e6 + total violation``, after every
feasible one. Several objectives are traced by the epsilon-constraint method: one run per
objective for its extreme, then runs that minimize the first objective with the others bounded
by levels spread (in log scale) between their extremes. Every evaluated point goes to the study
through ``sink`` (which stops the run with :class:`BudgetExhausted` when the trial budget is spent),
so the stored trials, not the runs' optima, make the front.
"""
from __future__ import annotations

import logging
import math
from typing import Callable, Mapping

import numpy as np

from ..search.space import SearchSpace

logger = logging.getLogger(__name__)

SCIPY_METHODS = ("de", "anneal")
PENALTY = 1.0e6


class BudgetExhausted(Exception):
    """Raised by the sink when the trial budget is spent."""


Sink = Callable[[np.ndarray], Mapping[str, np.ndarray]]


class _Problem:
    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.free = [j for j, d in enumerate(space.dims) if d.choices is None or len(d.choices) > 1]
        lo, hi, integ = [], [], []
        for j in self.free:
            d = space.dims[j]
            if d.choices is not None:
                lo.append(0.0)
                hi.append(float(len(d.choices) - 1))
                integ.append(True)
            elif d.log:
                lo.append(math.log(d.low))
                hi.append(math.log(d.high))
                integ.append(False)
            else:
                lo.append(float(d.low))
                hi.append(float(d.high))
                integ.append(d.kind == "int")
        self.lo, self.hi, self.integrality = np.array(lo), np.array(hi), np.array(integ, dtype=bool)

    def rows(self, x: np.ndarray) -> np.ndarray:
        """Rows of decision vectors ``x`` (shape (m, n_free))."""
        x = np.atleast_2d(x)
        rows = np.zeros((x.shape[0], len(self.space.dims)))
        for k, j in enumerate(self.free):
            d = self.space.dims[j]
            v = np.clip(x[:, k], self.lo[k], self.hi[k])
            if d.choices is not None:
                rows[:, j] = np.clip(np.round(v), 0, len(d.choices) - 1)
            elif d.log:
                rows[:, j] = np.exp(v)
            else:
                rows[:, j] = np.round(v) if d.kind == "int" else v
        for j, d in enumerate(self.space.dims):
            if j not in self.free and d.choices is None:
                rows[:, j] = d.low
        return rows


#: What a metric of exactly 0 counts as before the log: the smallest normal float (log -708).
_TINY = float(np.finfo(float).tiny)


def _log_objectives(space: SearchSpace, metrics: Mapping[str, np.ndarray]) -> np.ndarray:
    """(m, k) minimized objectives in log scale (maximized metrics negated). A value of exactly 0 (a cost
    on a cluster priced at 0) is the smallest float, not missing: only NaN and negative values are."""
    cols = []
    for name, sense in zip(space.objectives, space.directions):
        v = np.asarray(metrics[name], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            lv = np.log(np.where(v > 0, v, np.where(v == 0, _TINY, np.nan)))
        cols.append(-lv if sense == "maximize" else lv)
    return np.stack(cols, axis=1)


def _score(space: SearchSpace, metrics: Mapping[str, np.ndarray], target: int, eps: np.ndarray | None) -> np.ndarray:
    """Scalar to minimize: objective ``target`` (log), eps-bounds on the others, penalties."""
    f = _log_objectives(space, metrics)
    feas = np.asarray(metrics["feasible"], dtype=bool) & np.isfinite(f).all(axis=1)
    viol = np.zeros(f.shape[0])
    viol += np.where(np.asarray(metrics["valid"], dtype=bool), 0.0, 10.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mem = np.asarray(metrics["memory_gib"], dtype=float) / np.asarray(metrics["usable_memory_gib"], dtype=float) - 1.0
    viol += np.clip(np.nan_to_num(mem, nan=10.0, posinf=10.0), 0.0, 10.0)
    for key in space.constraints:
        v = np.asarray(metrics[f"violation_{key}"], dtype=float)
        viol += np.clip(np.nan_to_num(v, nan=10.0, posinf=10.0), 0.0, 10.0)
    score = np.where(feas, f[:, target], PENALTY + viol)
    if eps is not None:
        over = np.zeros(f.shape[0])
        for j in range(f.shape[1]):
            if j != target and np.isfinite(eps[j]):
                over += np.maximum(np.nan_to_num(f[:, j] - eps[j], nan=10.0), 0.0)
        score = np.where(feas & (over > 0), PENALTY / 2 + over, score)
    return np.nan_to_num(score, nan=PENALTY * 2, posinf=PENALTY * 2)


def run_scipy(method: str, space: SearchSpace, sink: Sink, budget: int, seed: int) -> None:
    """Spend ``budget`` evaluations on ``method``; every evaluation goes through ``sink``."""
    from scipy.optimize import differential_evolution, dual_annealing

    prob = _Problem(space)
    rng = np.random.default_rng(seed)
    k = len(space.objectives)
    n = max(1, len(prob.free))
    if not prob.free:
        sink(prob.rows(np.zeros((1, 0))))
        return
    pop = int(np.clip(budget // 40, 16, 5 * n))
    # one run per objective, then eps-constraint runs on the first objective
    n_runs = 1 if k == 1 else max(k + 1, min(12, budget // max(8 * pop, 200)))
    per_run = [budget // n_runs] * n_runs
    per_run[-1] += budget - sum(per_run)
    archive_f: list[np.ndarray] = []
    bounds = list(zip(prob.lo, prob.hi))

    count = [0]

    def make_f(target: int, eps: np.ndarray | None, start: int, cap: int):
        def f(x: np.ndarray) -> np.ndarray | float:
            xs = np.asarray(x, dtype=float)
            single = xs.ndim == 1
            pts = xs[None, :] if single else xs.T  # DE vectorized: x has shape (n, S)
            if count[0] - start >= cap:
                raise _RunDone
            m = sink(prob.rows(pts))
            count[0] += pts.shape[0]
            fo = _log_objectives(space, m)
            ok = np.asarray(m["feasible"], dtype=bool) & np.isfinite(fo).all(axis=1)
            if ok.any():
                archive_f.append(fo[ok])
            s = _score(space, m, target, eps)
            return float(s[0]) if single else s

        return f

    def run_counted(target: int, eps: np.ndarray | None, cap: int) -> None:
        start = count[0]
        f = make_f(target, eps, start, cap)
        while count[0] - start < cap:
            s = int(rng.integers(2**31 - 1))
            left = cap - (count[0] - start)
            try:
                if method == "de":
                    differential_evolution(f, bounds, integrality=prob.integrality, vectorized=True, updating="deferred",
                                           popsize=max(1, math.ceil(pop / n)), maxiter=10_000, tol=1e-8, polish=False,
                                           init="sobol" if n > 1 else "latinhypercube", seed=s, mutation=(0.5, 1.0),
                                           recombination=0.9)
                else:
                    x0 = np.array([rng.uniform(lo, hi) for lo, hi in bounds])
                    dual_annealing(f, bounds, maxfun=max(left, 2), seed=s, no_local_search=True, x0=x0)
            except _RunDone:
                return
            # converged before its share was spent: restart from a new population
            if cap - (count[0] - start) < (min(pop, 16) if method == "de" else 8):
                return

    for t in range(min(k, n_runs)):
        run_counted(t, None, per_run[t])
    if k > 1 and n_runs > k:
        f_all = np.concatenate(archive_f) if archive_f else np.zeros((0, k))
        levels = n_runs - k
        if f_all.shape[0] == 0:
            for r in range(levels):
                run_counted(0, None, per_run[k + r])
            return
        lo_f, hi_f = np.nanmin(f_all, axis=0), np.nanmax(f_all, axis=0)
        # eps levels: quasi-random points of the other objectives' ranges
        from scipy.stats import qmc

        u = qmc.Halton(d=max(1, k - 1), scramble=True, seed=int(rng.integers(2**31 - 1))).random(levels)
        if k == 2:
            u = ((np.arange(levels) + 0.5) / levels)[:, None]
        for r in range(levels):
            eps = np.full(k, np.inf)
            eps[1:] = lo_f[1:] + u[r] * (hi_f[1:] - lo_f[1:])
            run_counted(0, eps, per_run[k + r])


class _RunDone(Exception):
    pass
