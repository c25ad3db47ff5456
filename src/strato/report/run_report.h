#pragma once
// The run report: one self-contained HTML file (inline CSS and SVG, no scripts, no external
// requests) that summarises a training run directory: final metrics, model, training curves,
// per-epoch results and the resolved config.

#include <string>

#include "strato/core/status.h"

namespace strato::report {

/// Builds the HTML report of the run directory `run_dir` and returns it. Reads
///   metrics.jsonl              required; "train", "eval" and "monitor" lines (others are
///                              skipped; a last line with no newline is read when it is a
///                              whole JSON object, else it is torn, still being written, and
///                              skipped with a note); read a block at a time, so memory
///                              follows the points kept, not the file; NaN, Infinity and
///                              -Infinity (as Python's json writes them) are read as null
///   config.toml                optional; shown verbatim
///   model/metrics.json         optional; final metrics (else taken from the last eval line)
///   model/strato-model.json    optional; architecture, parameter count, input shape
/// Loss and accuracy are charted by epoch, or by step for a log whose lines have no epoch.
/// A missing directory or metrics.jsonl is kNotFound naming the path (and what the directory is
/// instead: a tuning study, a model package, a directory of runs); a line of metrics.jsonl
/// that is not a JSON object, longer than 16 MiB, or a field of the wrong type, is kDataLoss
/// naming file:line.
/// Optional files that cannot be read are reported inside the page instead. Output is
/// deterministic (no timestamps). Thread-safe; reads only.
///
///     auto html = strato::report::render_run_report("runs/fmnist-cnn");
///     if (!html) return html.status();
Result<std::string> render_run_report(const std::string& run_dir);

/// Renders the report of `run_dir` (see render_run_report) and writes it to `out_path`
/// atomically; the parent directory of `out_path` must exist. The CLI calls
/// `write_run_report(run_dir, run_dir + "/report.html")`.
Status write_run_report(const std::string& run_dir, const std::string& out_path);

/// Training speed recorded in RUN_DIR/metrics.jsonl (what `strato plan --run` projects from).
struct RunSpeed {
    double samples_per_s = 0;     // median over the train lines; NaN when the run logged none
    double epoch_time_s = 0;      // median over the eval lines; NaN when none
    double steps_per_epoch = 0;   // from the step and epoch of the last train or eval line
};
/// Errors as render_run_report; a run with neither train nor eval lines is kNotFound.
Result<RunSpeed> read_run_speed(const std::string& run_dir);

}  // namespace strato::report
