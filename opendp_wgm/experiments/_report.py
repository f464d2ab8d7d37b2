"""Summary tables (mean ± std over trials, Markdown and CSV) and PNG plots of a run's per-trial rows."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

__all__: list[str] = []

#: Metrics reported per experiment: (column, title, short file name).
METRICS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "set-union": (
        ("missing_mass", "Missing mass (ℓ1)", "missing_mass"),
        ("linf_missing_mass", "ℓ∞ missing mass (users holding the most frequent missed item)", "linf_missing_mass"),
        ("cardinality", "Cardinality (items released)", "cardinality"),
        ("runtime_s", "Run time (s)", "runtime"),
    ),
    "top-k": (
        ("top_k_missing_mass", "Top-k missing mass", "top_k_missing_mass"),
        ("top_k_l1_loss", "Top-k ℓ1 loss", "top_k_l1_loss"),
        ("cardinality", "Items released", "cardinality"),
        ("runtime_s", "Run time (s)", "runtime"),
    ),
    "hitting-set": (
        ("missed_users", "Missed users", "missed_users"),
        ("runtime_s", "Run time (s)", "runtime"),
    ),
}

X_LABEL = {"max_contributions": "Δ0 (max contributions per user)", "k": "k"}


def summarise(rows: pl.DataFrame, experiment: str) -> pl.DataFrame:
    """Mean, std (ddof = 0, as the reference's ``np.std``) and trial count per dataset × variant × x × metric."""
    metrics = [m for m, _, _ in METRICS[experiment]]
    return (
        rows.group_by("dataset", "variant", "label", "x", maintain_order=True)
        .agg(
            pl.len().alias("trials"),
            *[pl.col(m).mean().alias(f"{m}_mean") for m in metrics],
            *[pl.col(m).std(ddof=0).alias(f"{m}_std") for m in metrics],
        )
        .sort("dataset", "variant", "x", nulls_last=False)
    )


def _format(mean: float | None, std: float | None, column: str) -> str:
    if mean is None or math.isnan(mean):
        return "—"
    if column in ("missing_mass", "top_k_missing_mass"):
        return f"{mean:.3f} ± {std:.3f}"
    if column == "runtime_s":
        return f"{mean:.2f} ± {std:.2f}"
    return f"{mean:.1f} ± {std:.1f}"


def markdown_tables(summary: pl.DataFrame, experiment: str, x_name: str, variant_order: list[str]) -> str:
    """One Markdown table per dataset and metric: rows = variants, columns = x values, cells = mean ± std."""
    lines: list[str] = []
    xs = sorted(x for x in summary["x"].unique().to_list() if x is not None)
    for dataset in summary["dataset"].unique(maintain_order=True).to_list():
        part = summary.filter(pl.col("dataset") == dataset)
        for column, title, _ in METRICS[experiment]:
            lines.append(f"#### {dataset} — {title}\n")
            symbol = "Δ0" if x_name == "max_contributions" else "k"
            header = "| method | " + " | ".join(f"{symbol} = {x}" for x in xs) + " |"
            lines.append(header)
            lines.append("|---|" + "---|" * len(xs))
            for variant in variant_order:
                rows = part.filter(pl.col("variant") == variant)
                if rows.height == 0:
                    continue
                label = rows["label"][0]
                cells = []
                for x in xs:
                    hit = rows.filter(pl.col("x") == x) if rows["x"].null_count() < rows.height else rows
                    if hit.height == 0:
                        cells.append("—")
                    else:
                        cells.append(_format(hit[f"{column}_mean"][0], hit[f"{column}_std"][0], column))
                note = " ¹" if rows["x"].null_count() == rows.height else ""
                lines.append(f"| {label}{note} | " + " | ".join(cells) + " |")
            lines.append("")
    if summary["x"].null_count():
        lines.append("¹ Independent of Δ0 (no ℓ0 bound): run once per trial and shown in every column.\n")
    return "\n".join(lines)


def plots(summary: pl.DataFrame, experiment: str, x_name: str, variant_order: list[str], out_dir: Path) -> list[Path]:
    """One PNG per metric, one panel per dataset, one line per variant (error bars: ± std)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    datasets = summary["dataset"].unique(maintain_order=True).to_list()
    xs = sorted(x for x in summary["x"].unique().to_list() if x is not None)
    written: list[Path] = []
    for column, title, short in METRICS[experiment]:
        n = len(datasets)
        cols = min(n, 3)
        rows_n = math.ceil(n / cols)
        fig, axes = plt.subplots(rows_n, cols, figsize=(5.2 * cols, 3.9 * rows_n), squeeze=False)
        for ax, dataset in zip(axes.flat, datasets, strict=False):  # the grid may have spare cells
            part = summary.filter(pl.col("dataset") == dataset)
            for i, variant in enumerate(variant_order):
                rows = part.filter(pl.col("variant") == variant)
                if rows.height == 0:
                    continue
                label = rows["label"][0]
                style = {"color": f"C{i}", "label": label}
                if rows["x"].null_count() == rows.height:  # x-independent: a horizontal band
                    mean, std = rows[f"{column}_mean"][0], rows[f"{column}_std"][0]
                    ax.axhline(mean, linestyle="--", **style)
                    if xs and std:
                        ax.fill_between([xs[0], xs[-1]], mean - std, mean + std, color=f"C{i}", alpha=0.15)
                    continue
                rows = rows.sort("x")
                ax.errorbar(
                    rows["x"].to_list(),
                    rows[f"{column}_mean"].to_list(),
                    yerr=rows[f"{column}_std"].to_list(),
                    marker="o",
                    markersize=4,
                    capsize=3,
                    **style,
                )
            ax.set_title(dataset)
            ax.set_xlabel(X_LABEL[x_name])
            ax.set_ylabel(title if len(title) < 30 else title.split(" (")[0])
            if x_name == "k" or column == "runtime_s":
                ax.set_xscale("log") if x_name == "k" else None
            if column == "runtime_s":
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        found = dict(zip(*reversed(axes.flat[0].get_legend_handles_labels()), strict=True))  # label -> handle
        order = [part["label"][0] for v in variant_order if (part := summary.filter(pl.col("variant") == v)).height]
        labels = [label for label in dict.fromkeys(order) if label in found]
        handles = [found[label] for label in labels]
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
        fig.suptitle(f"{experiment}: {title}", fontsize=11)
        legend_inches = 0.3 + 0.22 * math.ceil(len(labels) / 3)
        fig.tight_layout(rect=(0, legend_inches / fig.get_figheight(), 1, 0.97))
        path = out_dir / f"{experiment}_{short}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
