#pragma once
/// Plain SVG pictures with no dependency: line plots (loss curves, as d2l's plot / Animator)
/// and grids of heatmaps (attention weights, as d2l's show_heatmaps). The output is one
/// self-contained <svg> element that browsers, rsvg-convert and ImageMagick render.
///
/// Text is escaped, so labels may hold any characters ("<pad>", "Q&A"). Non-finite values
/// never break a picture: NaN or ±inf splits a line (and log axes treat values <= 0 the same
/// way); a NaN heatmap cell is drawn grey. Bad input throws xgrad::Error.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace xgrad::svg {

/// One line of a line plot.
struct Series {
    std::string label;         ///< legend entry; an empty label is left out of the legend
    std::vector<double> x, y;  ///< equal lengths; x empty means 0, 1, 2, ... (as d2l's plot)
    std::string color{};       ///< any SVG colour; empty: the next of matplotlib's tab10 colours
    std::string dash{};        ///< SVG stroke-dasharray ("6,3"), "none" for solid; empty: d2l's
                               ///< cycle of solid, dashed, dash-dot, dotted
    bool right_axis = false;   ///< plot against the second y axis, on the right
};

struct LinePlotOptions {
    std::string title, xlabel, ylabel;
    bool log_x = false, log_y = false;
    /// Axis limits; unset means from the data, widened to round tick values.
    std::optional<std::pair<double, double>> xlim, ylim;
    /// The second y axis, drawn when a series has right_axis (e.g. accuracy beside a loss).
    std::string y2label;
    bool log_y2 = false;
    std::optional<std::pair<double, double>> y2lim;
    bool legend = true;   ///< placed where it hides the fewest points (matplotlib's "best")
    bool grid = true;
    bool markers = false; ///< a dot on every point (isolated points always get one)
    double width = 640, height = 400;
};

/// A line plot with axes, round-number ticks, grid, axis labels, title and legend; a second
/// y axis on the right when any series asks for it.
std::string line_plot(const std::vector<Series>& series, const LinePlotOptions& opts = {});

struct HeatmapOptions {
    std::string title, xlabel = "Keys", ylabel = "Queries";
    /// Labels for the columns (keys) and rows (queries) of every panel: empty for index
    /// numbers, otherwise one per column / row.
    std::vector<std::string> xticks, yticks;
    /// "Reds" (d2l's default), "Blues", "Greys" or "viridis".
    std::string cmap = "Reds";
    /// Ends of the colour scale; unset means the smallest / largest finite value shown.
    std::optional<double> vmin, vmax;
};

/// A grid of heatmap panels (rows × cols), each a 2-D tensor (queries, keys) of any dtype,
/// all of one shape, with one shared colour bar. `titles` is empty or rows × cols.
/// Only the bottom row gets x tick labels and the x label, only the left column the y ones
/// (as d2l's sharex / sharey).
std::string heatmaps(const std::vector<std::vector<Tensor>>& panels,
                     const std::vector<std::vector<std::string>>& titles = {},
                     const HeatmapOptions& opts = {});

/// Writes `content` to `path` atomically through AtomicFile (core/io/atomic_file.hpp): only a
/// regular file (or a new name) is replaced, and a symbolic link is followed.
void write_file(const std::string& path, const std::string& content);

/// Tick positions at round numbers (1, 2 or 5 times a power of ten apart) covering [lo, hi]
/// with about `target` intervals: nice_ticks(0.13, 2.87) is 0, 0.5, ..., 3.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

/// Text with &, <, >, " and ' replaced by entities, for SVG text and attributes.
std::string escape(const std::string& text);

}  // namespace xgrad::svg
