"""``dmlsearch report DIR``: one Markdown report of a search's results folder.

Reads what the search wrote: ``search.yaml`` (space, options, base settings, searched keys) and
``summary.json`` (every trial, the budget, the test metrics); for an interrupted search, which has
no ``summary.json``, the trials come from Ray Tune's trial folders (:mod:`search.results`).
Optionally ``importance/importance.json`` (``dmlsearch importance``). Prints the report and
writes it atomically as ``DIR/report.md``.

For a grid study whose trials vary the loss over several *experiments* (one combination of the
other searched parameters, e.g. backbone x embedding size), the report adds the thesis's
"Tournament" (Psomas 2020, Table 11; SPEC §5): the losses ranked by their average rank over the
experiments (:func:`tournament`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlsearch.search.export import write_atomic
from dmlsearch.search.results import Results
from dmlsearch.search.results import load_results
from dmlsearch.search.results import ranked as best_first
from dmlsearch.trainables.errors import UserError

__all__ = ["report_command", "render_report", "tournament", "experiment_keys", "REPORT_FILE"]

REPORT_FILE = "report.md"


# -- the tournament (pure) -------------------------------------------------------------------------

def tournament(rows: Iterable[Mapping[str, Any]], *, group_keys: Sequence[str], item_key: str,
               score_key: str, mode: str) -> list[dict[str, Any]]:
    """Rank items (losses) within each group (experiment), then aggregate their ranks.

    ``rows`` are flat mappings; a group is one combination of the values of ``group_keys``.
    Within a group, items are ranked by ``score_key`` (``mode`` "max": highest is rank 1; "min":
    lowest is rank 1); tied items share the average of the ranks they span (1 and 2 -> 1.5 each).
    Rows without a finite score are ignored; an item with several rows in a group counts once,
    with its best score; a group with fewer than two scored items ranks nothing and is skipped.

    Returns one dict per item: ``item``, ``experiments`` (groups it was ranked in), ``ranks``
    (its rank in each, in group order), ``sum``, ``mean`` and ``std`` (population std, ddof 0) of
    its ranks; sorted by mean rank, then by more experiments, then by name.
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    better = max if mode == "max" else min
    groups: dict[tuple[Any, ...], dict[Any, float]] = {}
    for row in rows:
        score = row.get(score_key)
        if score is None or not isinstance(score, (int, float)) or not math.isfinite(score):
            continue
        group = tuple(_hashable(row.get(k)) for k in group_keys)
        item = row.get(item_key)
        scores = groups.setdefault(group, {})
        scores[item] = better(scores[item], float(score)) if item in scores else float(score)
    ranks: dict[Any, list[float]] = {}
    for scores in groups.values():
        if len(scores) < 2:
            continue
        for item, score in scores.items():
            ahead = sum(1 for s in scores.values() if (s > score if mode == "max" else s < score))
            tied = sum(1 for s in scores.values() if s == score)  # itself included
            ranks.setdefault(item, []).append(ahead + (tied + 1) / 2)
    table = []
    for item, values in ranks.items():
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        table.append({"item": item, "experiments": len(values), "ranks": values,
                      "sum": sum(values), "mean": mean, "std": std})
    table.sort(key=lambda r: (r["mean"], -r["experiments"], str(r["item"])))
    return table


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def experiment_keys(configs: Sequence[Mapping[str, Any]], searched: Sequence[str],
                    item_key: str = "loss") -> list[str]:
    """The searched keys that define an experiment: all but ``item_key``, its own parameters
    (``loss.*``) and keys whose value follows from the item (a ``when: {loss: ...}`` branch, such
    as the sampler each loss needs): those would put every loss in an experiment of its own."""
    keys = []
    for key in dict.fromkeys(searched):
        if key == item_key or key.startswith(item_key + "."):
            continue
        values = {_hashable(c.get(key)) for c in configs}
        by_item: dict[Any, set[Any]] = {}
        for c in configs:
            by_item.setdefault(_hashable(c.get(item_key)), set()).add(_hashable(c.get(key)))
        if len(values) > 1 and all(len(v) == 1 for v in by_item.values()):
            continue
        keys.append(key)
    return keys


# -- rendering -------------------------------------------------------------------------------------

def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _metrics(metrics: Mapping[str, Any]) -> str:
    from dmlsearch.search.summary import format_metrics

    return format_metrics(metrics).replace("  ", ", ")


def _searched(results: Results) -> list[str]:
    searched = results.resolved.get("searched")
    if searched:
        return list(dict.fromkeys(searched))
    configs = [t["config"] for t in results.trials]  # no search.yaml: the keys that vary
    keys = dict.fromkeys(k for c in configs for k in c)
    return [k for k in keys if len({_hashable(c.get(k)) for c in configs}) > 1]


def render_report(results: Results, *, top: int = 10) -> str:
    from dmlsearch.trainables.metrics.names import metric_mode

    resolved, summary, trials = results.resolved, results.summary, results.trials
    base = resolved.get("base") or {}
    options = resolved.get("options") or {}
    metric = results.metric or "recall@1"
    mode = metric_mode(metric)
    searched = _searched(results)
    out = [f"# dmlsearch report: {results.dir.name}", ""]
    if not results.finished:
        out += ["**Interrupted search**: no summary.json (the search did not finish); trials "
                "read from Ray Tune's trial folders (ray/). `dmlsearch resume "
                f"{results.dir}` continues it.", ""]
    out += [
        f"- space: {resolved.get('space', '-')}",
        f"- dataset: {base.get('dataset', '-')}",
        f"- protocol: {base.get('protocol', '-')}",
        f"- metric: val {metric} ({'lower' if mode == 'min' else 'higher'} is better, "
        f"{'minimised' if mode == 'min' else 'maximised'})",
        f"- sampler: {options.get('sampler', '-')}, scheduler: {options.get('scheduler', '-')}",
        f"- searched: {', '.join(searched) or '-'}",
        f"- results: {results.dir}",
    ]
    states = [t.get("state") for t in trials]
    counts = ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states))
    out += ["", "## Budget used", "", f"- trials: {len(trials)} ({counts})"]
    budget = (summary or {}).get("budget") or {}
    if budget:
        out += [f"- epochs trained (x folds x repeats): {budget.get('epochs', 0):.0f}",
                f"- CPU-hours: {budget.get('cpu_hours', 0.0):.3f}, GPU-hours: "
                f"{budget.get('gpu_hours', 0.0):.3f} (trial-hours "
                f"{budget.get('trial_hours', 0.0):.3f})"]
    if summary and summary.get("seconds") is not None:
        out.append(f"- wall time: {summary['seconds']:.0f} s")
    if not budget:
        out.append("- CPU/GPU-hours: not recorded (written in summary.json when a search "
                   "finishes)")

    ranked = best_first(results)
    out += ["", f"## Leaderboard (top {min(top, len(ranked))} of {len(ranked)} scored trials "
            f"by val {metric}, {'highest' if mode == 'max' else 'lowest'} first)", ""]
    rows = []
    for i, t in enumerate(ranked[:top], 1):
        score = f"{t['score']:.4f}"
        if t.get("score_std") is not None:
            score += f" ± {t['score_std']:.4f}"
        rows.append([i, t.get("trial_id", "-"), t.get("state", "-"), score,
                     _fmt(t.get("best_epoch")), *(_fmt(t["config"].get(k)) for k in searched)])
    out.append(_md_table(["#", "trial", "state", f"val {metric}", "best epoch", *searched], rows)
               if rows else "No trial produced a validation score.")
    unscored = len(trials) - len(ranked)
    if unscored:
        out += ["", f"{unscored} trial(s) without a score (failed or never reported) are not "
                "listed."]

    out += ["", "## Best configuration", ""]
    best_id = (summary or {}).get("best_trial")
    best = next((t for t in trials if t.get("trial_id") == best_id), None)
    if best is None and ranked:
        best = ranked[0]
    if best is None:
        out.append("No best configuration: no trial produced a validation score.")
    else:
        values = ", ".join(f"{k}={_fmt(best['config'].get(k))}" for k in searched)
        out.append(f"Trial {best.get('trial_id')}: val {metric} {best['score']:.4f}"
                   + (f" with {values}" if values else ""))
        test = (summary or {}).get("test_metrics")
        out += ["", "Test classes, evaluated once after retraining on all training classes: "
                + (_metrics(test) if test else "not available (no retrain: the search was "
                   "interrupted or ran with --no-retrain)")]
        out += _retrain_lines((summary or {}).get("retrains") or [], metric)
        registered = (summary or {}).get("registered_model")
        if registered:
            out += ["", f"Registered model: `{registered}` in the MLflow Model Registry "
                    "(input: uint8 images [N, C, H, W]; output: the embedding)"]
        ensemble = (summary or {}).get("fold_ensemble")
        if ensemble and ensemble.get("metrics"):
            m = ensemble["metrics"]
            keys = [k[len("ensemble_"):] for k in m if k.startswith("ensemble_")]
            folds = len(ensemble.get("fold_test_metrics") or [])
            spread = ", ".join(f"{k} {m['folds_mean_' + k]:.4f} ± {m['folds_std_' + k]:.4f}"
                               for k in keys if "folds_mean_" + k in m)
            out += ["", f"Fold models on the test classes ({folds} folds), mean ± std: {spread}",
                    "", "Their ensemble: " + _metrics({k: m["ensemble_" + k] for k in keys})]
        export = (summary or {}).get("export")
        out += ["", f"Exported configuration: {export} (train it again with `dmlsearch train "
                f"{export}`)" if export else "Exported configuration: none"]

    out += ["", "## Importance", ""]
    out += _importance_lines(results.dir)

    table = _tournament_section(resolved, trials, searched, metric, mode)
    if table:
        out += ["", *table]
    return "\n".join(out) + "\n"


def _retrain_lines(retrains: list[dict[str, Any]], metric: str) -> list[str]:
    """``--retrain-top`` / ``--seeds``: each retrained trial's test mean ± 95% interval."""
    if not retrains or (len(retrains) == 1 and len(retrains[0].get("seeds") or []) < 2):
        return []
    mean0 = retrains[0].get("mean") or {}
    keys = sorted((k for k in mean0 if k not in ("num_queries", "precision@1")),
                  key=lambda k: k != metric)[:6]
    rows = []
    for r in retrains:
        mean, ci = r.get("mean") or {}, r.get("ci95") or {}
        seeds = len(r.get("seeds") or [])
        rows.append([str(r.get("rank")), str(r.get("trial_id")), str(seeds),
                     *(f"{mean[k]:.4f} ± {ci.get(k, 0.0):.4f}" if seeds > 1 and k in mean
                       else _fmt(mean.get(k)) for k in keys)])
    return ["", f"Retrained on all training classes, each with {len(retrains[0]['seeds'])} "
            "seed(s); test mean ± half-width of the 95% Student-t interval:", "",
            _md_table(["rank", "trial", "seeds", *keys], rows)]


def _importance_lines(folder: Path, *, top: int = 5) -> list[str]:
    path = folder / "importance" / "importance.json"
    if not path.is_file():
        return [f"Not computed yet: `dmlsearch importance {folder}` computes it (fANOVA)."]
    try:
        body = json.loads(path.read_text())
    except json.JSONDecodeError:
        return [f"{path} is not valid JSON; run `dmlsearch importance {folder}` again."]
    lines = [f"fANOVA importance of {body.get('objective', 'the objective')} "
             f"({body.get('trials', '?')} finished trials; from {path}):", ""]
    for a in body.get("analyses") or []:
        imp = a.get("importance") or {}
        best = sorted(imp.items(), key=lambda kv: -kv[1])[:top]
        lines.append(f"- {a.get('name')} ({a.get('trials')} trials): "
                     + ", ".join(f"{k} {v:.3f}" for k, v in best))
    for line in body.get("skipped") or []:
        lines.append(f"- not analysed: {line}")
    return lines


def _tournament_section(resolved: Mapping[str, Any], trials: Sequence[Mapping[str, Any]],
                        searched: Sequence[str], metric: str, mode: str) -> list[str]:
    options = resolved.get("options") or {}
    if options.get("sampler") != "grid" or "loss" not in searched:
        return []
    configs = [t["config"] for t in trials]
    if len({c.get("loss") for c in configs}) < 2:
        return []
    keys = experiment_keys(configs, searched, "loss")
    rows = [{**t["config"], "_score": t.get("score")} for t in trials]
    table = tournament(rows, group_keys=keys, item_key="loss", score_key="_score", mode=mode)
    experiments = {tuple(_hashable(r.get(k)) for k in keys) for r in rows
                   if isinstance(r["_score"], (int, float))}
    if len(experiments) < 2 or not table:
        return []
    return [
        "## Tournament (thesis Table 11)", "",
        f"Losses ranked within each of {len(experiments)} experiments (one per combination of "
        f"{', '.join(keys) or 'nothing'}) by val {metric} (1 = best, ties share the average "
        "rank), then by their mean rank over the experiments (std: population std).", "",
        _md_table(["#", "loss", "experiments", "rank sum", "mean rank", "std"],
                  [[i, r["item"], r["experiments"], f"{r['sum']:g}", f"{r['mean']:.2f}",
                    f"{r['std']:.2f}"] for i, r in enumerate(table, 1)]),
    ]


def report_command(results: Path, *, top: int = 10, echo: Callable[[str], None] = print) -> int:
    if top < 1:
        raise UserError(f"--top must be >= 1, got {top}")
    loaded = load_results(results)
    text = render_report(loaded, top=top)
    target = loaded.dir / REPORT_FILE
    write_atomic(target, text)
    echo(text)
    echo(f"Saved in {target}")
    return 0
