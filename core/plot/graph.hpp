#pragma once
/// Pictures of the autograd graph, for learners (micrograd's draw_dot): what backward() walks.
///
///   Tensor loss = ((x * w).sum() - y).pow(2);
///   save_graph(loss, "loss.dot");                                   // Graphviz DOT text
///   save_graph(loss, "loss.svg", {model.named_parameters()});      // laid out by Graphviz
///
/// Data flows along the edges, input → op → output, as in micrograd. Each tensor is a box with
/// its name (when given), its dtype and shape, whether it requires grad, its values and its
/// gradient (.grad()) when they are small, and its version when it has been written in place;
/// leaves are parameters (they require grad, filled blue) or constants (white). Each op is an
/// ellipse with its name and what its backward saved (which inputs, its output); an edge into
/// an op names the input's position when the op has several, and turns red when a value the op
/// saved has changed since (backward would refuse it). A tensor written in place by an op
/// recorded in the graph (y.add_(x)) shows its earlier value as a box of its own, dashed, "before
/// add_ wrote it": the ops that read it before the write hang off that box. An op whose graph a
/// backward() without retain_graph freed is drawn dashed, with no inputs: they are gone.
///
/// The layout is Graphviz's: save_graph(..., ".svg") runs its `dot` layout through its C library
/// (libgvc, from Debian's libgraphviz-dev), when xgrad was built with it (has_graphviz()).
/// Without it the DOT text is still written, for `dot -Tsvg graph.dot -o graph.svg` or any
/// online Graphviz viewer.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace xgrad {

/// How to_dot draws a graph.
struct GraphOptions {
    /// Names shown on the tensors' boxes: module.named_parameters() fits, and any other tensor
    /// may be added ({"loss", loss}). A name goes with the tensor's current value; a tensor
    /// given two names shows both.
    std::vector<std::pair<std::string, Tensor>> names{};
    /// At most this many tensors are drawn, those nearest the root first (breadth first). The
    /// picture says how many were left out, and each op whose inputs were cut says how many.
    std::size_t max_tensors = 300;
    /// Tensors (and gradients) of at most this many elements show their values, as micrograd
    /// shows data and grad; larger ones show only dtype and shape. 0 shows no values.
    std::size_t max_values = 4;
    /// Data flows left to right (micrograd's rankdir=LR); false: top to bottom, which suits
    /// deep graphs.
    bool left_to_right = true;
};

/// The graph that made `root` (everything backward() from it would reach) as Graphviz DOT text.
/// Throws xgrad::Error for an undefined root or name, or max_tensors = 0.
std::string to_dot(const Tensor& root, const GraphOptions& opts = {});

/// Writes root's graph to `path`, atomically (core/io/atomic_file.hpp: an existing file is
/// replaced only once the new one is complete). The name's ending picks the format: ".dot" or
/// ".gv" for DOT text, ".svg" for a picture laid out by Graphviz (see has_graphviz(); without
/// it, throws before writing anything and names the .dot alternative). Errors name the file.
void save_graph(const Tensor& root, const std::string& path, const GraphOptions& opts = {});

/// Lays out DOT text (one graph) with Graphviz's `dot` and returns the SVG. Throws xgrad::Error
/// with Graphviz's message for text it cannot read, or when xgrad was built without Graphviz.
/// One layout runs at a time (Graphviz keeps global state); other threads wait.
std::string dot_to_svg(const std::string& dot);

/// Whether this build of xgrad has Graphviz's library, so that SVGs can be laid out (found by
/// pkg-config as libgvc at build time; XGRAD_WITH_GRAPHVIZ=OFF leaves it out).
bool has_graphviz();

}  // namespace xgrad
