// The autograd graph as Graphviz DOT, and its layout by Graphviz's library (libgvc).
#include "core/plot/graph.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "core/io/atomic_file.hpp"
#include "core/node.hpp"

#ifdef XGRAD_WITH_GRAPHVIZ
#include <cgraph.h>
#include <gvc.h>
#endif

namespace xgrad {

namespace {

// --- labels ---------------------------------------------------------------------------------

// Appends `text` to a DOT quoted string: '"' and '\' escaped (Graphviz reads \N, \G, \l... in a
// label as escapes, so a user's backslash is doubled), a newline as a label line break, other
// control characters and bytes that are not UTF-8 as U+FFFD (Graphviz rejects invalid UTF-8).
void append_escaped(std::string& out, std::string_view text) {
    static constexpr std::string_view replacement = "\xEF\xBF\xBD";
    for (std::size_t i = 0; i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x80) {
            if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
            else if (c == '\n') out += "\\n";
            else if (c < 0x20 || c == 0x7f) out += replacement;
            else out += static_cast<char>(c);
            ++i;
            continue;
        }
        // A UTF-8 sequence: its lead byte gives its length; every other byte is 10xxxxxx. Overlong
        // forms, surrogates and code points past U+10FFFF are refused as Graphviz refuses them.
        const std::size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        bool ok = len != 0 && i + len <= text.size();
        for (std::size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
        if (ok && len >= 3) {
            const auto c1 = static_cast<unsigned char>(text[i + 1]);
            ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0) && !(c == 0xf0 && c1 < 0x90) &&
                 !(c == 0xf4 && c1 >= 0x90);
        }
        if (ok) out.append(text.substr(i, len));
        else out += replacement;
        i += ok ? len : 1;
    }
}

// The lines of a label as one DOT quoted string.
std::string label(const std::vector<std::string>& lines) {
    std::string out = "\"";
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (i) out += "\\n";
        append_escaped(out, lines[i]);
    }
    return out + '"';
}

// The number of elements of the node's shape (its storage may be an empty stand-in).
std::size_t element_count(const Node& n) {
    std::size_t count = 1;
    for (std::size_t d : n.shape) count *= d;
    return count;
}

// "[0.5, -1, 2]" (a scalar without brackets) when the node still holds its values and has at
// most `max` of them; "" otherwise.
std::string values_text(const Node& n, std::size_t max) {
    const std::size_t count = element_count(n);
    return std::visit(
        [&](const auto& a) -> std::string {
            using T = typename std::decay_t<decltype(a)>::value_type;
            // A past history keeps an empty stand-in once its value is no longer needed.
            if (count > max || a.size() != count) return "";
            std::string out = n.shape.empty() ? "" : "[";
            for (std::size_t i = 0; i < count; ++i) {
                if (i) out += ", ";
                const T v = a.data()[i];
                if constexpr (std::is_same_v<T, bool>) out += v ? "true" : "false";
                else if constexpr (std::is_integral_v<T>) out += fmt::format("{}", v);
                else out += fmt::format("{:.4g}", static_cast<double>(v));
            }
            return n.shape.empty() ? out : out + "]";
        },
        n.data());
}

std::string dtype_shape(const Node& n) { return fmt::format("{} {}", dtype_name(n.dtype()), n.shape); }

// "saves inputs 0, 1 and its output", from the op's Saves.
std::string saves_text(const Node& n) {
    std::vector<std::string> inputs;
    for (std::size_t i = 0; i < n.parents.size(); ++i)
        if (n.parents[i].defined() && n.saves.reads_input(i)) inputs.push_back(std::to_string(i));
    std::string what;
    if (n.parents.size() == 1 && inputs.size() == 1) what = "its input";
    else if (!inputs.empty()) what = fmt::format("input{} {}", inputs.size() > 1 ? "s" : "", fmt::join(inputs, ", "));
    if (n.saves.output) what += what.empty() ? "its output" : " and its output";
    return what.empty() ? "saves nothing" : "saves " + what;
}

// --- the graph ------------------------------------------------------------------------------

// An op's input as the engine sees it (tensor.cpp's input_node): the input tensor's node, or,
// when an in-place op recorded in the graph has written the tensor since, the node that keeps
// the history it had when this op read it (Node::past). Null for an undefined (optional) input.
const Node* input_of(const Node& n, std::size_t i) {
    const Tensor& t = n.parents[i];
    if (!t.defined()) return nullptr;
    const Node& p = t.node();
    const std::uint32_t h = i < n.parent_history.size() ? n.parent_history[i] : p.history;
    return h == p.history || h >= p.past.size() ? &p : p.past[h].get();
}

// Every node backward() from the root would reach, breadth first (the nearest first).
struct Walk {
    std::vector<const Node*> order;
    std::unordered_map<const Node*, std::size_t> index;
    // For past histories (Node::past): the in-place op that ended each, the one that made the
    // next history. Known when the tensor's current node is reached too (it holds the list).
    std::unordered_map<const Node*, const char*> written_by;

    explicit Walk(const Node& root) {
        visit(&root);
        for (std::size_t k = 0; k < order.size(); ++k)
            for (std::size_t i = 0; i < order[k]->parents.size(); ++i) visit(input_of(*order[k], i));
    }
    void visit(const Node* n) {
        if (!n || index.count(n)) return;
        index.emplace(n, order.size());
        order.push_back(n);
        for (std::size_t h = 0; h < n->past.size(); ++h)
            if (n->past[h])
                written_by[n->past[h].get()] = h + 1 == n->history ? n->op : n->past[h + 1] ? n->past[h + 1]->op : "";
    }
};

std::string tensor_statement(std::size_t k, const Node& n, const Walk& walk, const GraphOptions& opts,
                             const std::unordered_map<const Node*, std::vector<std::string>>& names) {
    std::vector<std::string> lines;
    if (const auto it = names.find(&n); it != names.end()) lines.push_back(fmt::format("{}", fmt::join(it->second, ", ")));
    // A past history: the value a tensor had before an in-place op in the graph wrote it.
    const bool past = n.overwritten;
    if (past) {
        const auto by = walk.written_by.find(&n);
        lines.push_back(by != walk.written_by.end() ? fmt::format("before {} wrote it", by->second)
                                                    : std::string("before an in-place op wrote it"));
    }
    lines.push_back(dtype_shape(n));
    if (n.is_leaf) {
        if (n.requires_grad) lines.push_back("parameter (requires grad)");
        else if (*n.op) lines.push_back(fmt::format("constant ({} without a graph)", n.op));
        else lines.push_back("constant");
    } else {
        lines.push_back(n.retains_grad ? "requires grad, retains grad" : "requires grad");
    }
    // A past history keeps its value only while a backward still reads it (record_in_place).
    if (past && element_count(n) > 0 && std::visit([](const auto& a) { return a.size(); }, n.data()) == 0)
        lines.push_back("value not kept");
    else if (const std::string v = values_text(n, opts.max_values); !v.empty())
        lines.push_back("data " + v);
    if (n.grad.defined()) {
        const Node& g = n.grad.node();
        const std::string v = opts.max_values > 0 ? values_text(g, opts.max_values) : "";
        lines.push_back(fmt::format("grad {}{}", v.empty() ? dtype_shape(g) : v,
                                    g.requires_grad ? " (with a graph)" : ""));
    }
    if (n.version() > 0) lines.push_back(fmt::format("version {}", n.version()));

    std::string style = "filled";
    const char* fill = !n.is_leaf ? "#eeeeee" : n.requires_grad ? "#cfe2f3" : "#ffffff";
    if (past) style += ",dashed";
    return fmt::format("  t{} [shape=box, style=\"{}\", fillcolor=\"{}\"{}{}, label={}];\n", k, style, fill,
                       k == 0 ? ", penwidth=2" : "", past ? ", fontcolor=\"#555555\"" : "", label(lines));
}

// The op node of non-leaf k, its edge to its output, and the edges from its inputs.
std::string op_statements(std::size_t k, const Node& n, const Walk& walk, std::size_t drawn) {
    std::vector<std::string> lines{n.op};
    std::string edges;
    std::size_t cut = 0;
    bool stale = false;
    if (n.graph_freed) {
        lines.push_back(n.freed_by_failure ? "graph freed by a backward() that failed" : "graph freed by backward()");
    } else {
        lines.push_back(saves_text(n));
        const std::size_t k_in = n.parents.size();
        for (std::size_t i = 0; i < k_in; ++i) {
            const Node* in = input_of(n, i);
            if (!in) continue;
            const std::size_t j = walk.index.at(in);
            if (j >= drawn) {
                ++cut;
                continue;
            }
            // As the engine checks before a backward: a saved input must still have the version
            // it had at the forward pass (the tensor's current version, past histories included).
            const bool changed = n.saves.reads_input(i) && i < n.saved_versions.size() &&
                                 n.parents[i].node().version() != n.saved_versions[i];
            std::vector<std::string> attrs;
            std::string text = k_in > 1 ? std::to_string(i) : "";
            if (changed) {
                text += std::string(text.empty() ? "" : ": ") + "changed since saved";
                attrs.push_back("color=red, fontcolor=red");
            }
            if (!text.empty()) attrs.push_back("label=" + label({text}));
            edges += fmt::format("  t{} -> op{}{};\n", j, k,
                                 attrs.empty() ? "" : fmt::format(" [{}]", fmt::join(attrs, ", ")));
        }
        stale = n.saves.output && (n.overwritten || (!n.saved_versions.empty() && n.version() != n.saved_versions.back()));
        if (stale) lines.push_back("its output changed since saved");
        if (cut) lines.push_back(fmt::format("{} input{} not drawn", cut, cut > 1 ? "s" : ""));
    }
    const char* style = n.graph_freed ? "filled,dashed" : "filled";
    const char* fill = n.graph_freed ? "#f4cccc" : "#fff2cc";
    return fmt::format("  op{} [shape=ellipse, style=\"{}\", fillcolor=\"{}\"{}, label={}];\n  op{} -> t{};\n{}", k,
                       style, fill, stale ? ", color=red" : "", label(lines), k, k, edges);
}

std::string dot_text(const Tensor& root, const GraphOptions& opts, const char* who) {
    if (!root.defined()) throw Error(fmt::format("{}: the tensor is undefined (it has no graph to draw)", who));
    if (opts.max_tensors == 0) throw Error(fmt::format("{}: max_tensors must be at least 1, got 0", who));
    std::unordered_map<const Node*, std::vector<std::string>> names;
    for (std::size_t i = 0; i < opts.names.size(); ++i) {
        const auto& [name, t] = opts.names[i];
        if (!t.defined()) throw Error(fmt::format("{}: names[{}] ('{}') is an undefined tensor", who, i, name));
        auto& list = names[&t.node()];
        if (std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
    }
    const Walk walk(root.node());
    const std::size_t drawn = std::min(walk.order.size(), opts.max_tensors);
    std::size_t ops = 0;
    for (std::size_t k = 0; k < walk.order.size(); ++k) ops += !walk.order[k]->is_leaf;

    const Node& r = root.node();
    std::string comment;  // the op's name, kept on the comment's line
    if (*r.op) {
        comment = "a '";
        append_escaped(comment, r.op);
        comment += "' result";
    } else {
        comment = "a leaf";
    }
    std::string out = fmt::format(
        "// The autograd graph of {} ({} tensors, {} ops), written by xgrad::to_dot.\n"
        "// Lay it out with Graphviz: dot -Tsvg graph.dot -o graph.svg\n"
        "digraph autograd {{\n"
        "  graph [rankdir={}, fontname=\"Helvetica,Arial,sans-serif\", fontsize=12",
        comment, walk.order.size(), ops,
        opts.left_to_right ? "LR" : "TB");
    if (drawn < walk.order.size())
        out += fmt::format(", labelloc=t, label={}",
                           label({fmt::format("Only the {} tensors nearest the output are drawn, of {}: raise "
                                              "GraphOptions::max_tensors to see more.",
                                              drawn, walk.order.size())}));
    out += "];\n"
           "  node [fontname=\"Helvetica,Arial,sans-serif\", fontsize=11];\n"
           "  edge [fontname=\"Helvetica,Arial,sans-serif\", fontsize=10];\n";
    for (std::size_t k = 0; k < drawn; ++k) {
        const Node& n = *walk.order[k];
        out += tensor_statement(k, n, walk, opts, names);
        if (!n.is_leaf) out += op_statements(k, n, walk, drawn);
    }
    return out + "}\n";
}

std::string lower_extension(const std::string& path) {
    const std::size_t slash = path.rfind('/');
    const std::size_t dot = path.rfind('.');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
    std::string ext = path.substr(dot);
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return ext;
}

// --- the layout -----------------------------------------------------------------------------

#ifdef XGRAD_WITH_GRAPHVIZ
// Graphviz keeps global state (its parser, its error handler): one layout at a time.
std::mutex g_graphviz;
std::string* g_messages = nullptr;  // where Graphviz's messages go during a layout

int collect_message(char* message) {
    if (g_messages) *g_messages += message;
    return 0;
}

// The SVG Graphviz's dot layout makes of `dot`, or nothing with the reason in `why`.
std::optional<std::string> layout_svg(const std::string& dot, std::string& why) {
    const std::lock_guard<std::mutex> lock(g_graphviz);
    std::string messages;
    g_messages = &messages;
    const agusererrf previous = agseterrf(collect_message);
    // One context for the process, never freed: Graphviz's text-layout plugin keeps font state
    // across contexts, and a second context after the first was freed reads freed memory
    // (AddressSanitizer, in libgvplugin_pango's textspan_size).
    static GVC_t* const gvc = gvContext();
    Agraph_t* graph = nullptr;
    bool laid_out = false;
    char* data = nullptr;
    unsigned length = 0;
    std::optional<std::string> svg;
    auto fail = [&](const char* step) {
        std::string text = messages;
        while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
        std::replace(text.begin(), text.end(), '\n', ' ');
        why = text.empty() ? step : fmt::format("{} ({})", step, text);
    };
    // Graphviz's parser keeps what follows the first graph for its next read (another graph, or
    // the last newline, which would shift the line numbers of the next text's errors): a read of
    // nothing takes it, so that it is refused now rather than returned by the next call.
    auto rest_of_text = [&] {
        std::size_t graphs = 0;
        const std::size_t said = messages.size();
        while (Agraph_t* more = agmemread("")) {
            agclose(more);
            ++graphs;
        }
        return graphs > 0 || messages.size() > said;
    };
    if (!gvc) fail("Graphviz could not start");
    else if (agreadline(1), !(graph = agmemread(dot.c_str()))) fail("Graphviz could not read the DOT text");
    else if (rest_of_text()) fail("Graphviz read one graph and then more text; give it one graph");
    else if (!(laid_out = gvLayout(gvc, graph, "dot") == 0)) fail("Graphviz's dot layout failed");
    else if (gvRenderData(gvc, graph, "svg", &data, &length) != 0 || !data) fail("Graphviz could not render SVG");
    else svg.emplace(data, length);
    if (data) gvFreeRenderData(data);
    if (laid_out) gvFreeLayout(gvc, graph);
    if (graph) agclose(graph);
    agseterrf(previous);
    g_messages = nullptr;
    return svg;
}
#endif

// Why an SVG cannot be made in this build, and what to do instead.
constexpr const char* kNoGraphviz =
    "xgrad was built without Graphviz (pkg-config found no libgvc at build time), so it cannot lay out an SVG";

}  // namespace

bool has_graphviz() {
#ifdef XGRAD_WITH_GRAPHVIZ
    return true;
#else
    return false;
#endif
}

std::string to_dot(const Tensor& root, const GraphOptions& opts) { return dot_text(root, opts, "to_dot"); }

std::string dot_to_svg(const std::string& dot) {
#ifdef XGRAD_WITH_GRAPHVIZ
    std::string why;
    if (auto svg = layout_svg(dot, why)) return std::move(*svg);
    throw Error(fmt::format("dot_to_svg: {}", why));
#else
    (void)dot;
    throw Error(fmt::format("dot_to_svg: {}; install libgraphviz-dev and rebuild xgrad, or run `dot -Tsvg` on the "
                            "DOT text",
                            kNoGraphviz));
#endif
}

void save_graph(const Tensor& root, const std::string& path, const GraphOptions& opts) {
    const std::string ext = lower_extension(path);
    if (ext == ".dot" || ext == ".gv") {
        write_file_atomic(path, dot_text(root, opts, "save_graph"), "save_graph");
        return;
    }
    if (ext != ".svg")
        throw Error(fmt::format("save_graph: cannot write '{}': expected a name ending in .dot, .gv or .svg, got {}",
                                path, ext.empty() ? std::string("none") : "'" + ext + "'"));
#ifdef XGRAD_WITH_GRAPHVIZ
    std::string why;
    auto svg = layout_svg(dot_text(root, opts, "save_graph"), why);
    if (!svg) throw Error(fmt::format("save_graph: cannot write '{}': {}", path, why));
    write_file_atomic(path, *svg, "save_graph");
#else
    (void)root;
    (void)opts;
    const std::string dot_path = path.substr(0, path.size() - ext.size()) + ".dot";
    throw Error(fmt::format("save_graph: cannot write '{}': {}; save it as DOT text instead, save_graph(root, \"{}\"), "
                            "and lay that out with `dot -Tsvg {} -o {}` (or install libgraphviz-dev and rebuild xgrad)",
                            path, kNoGraphviz, dot_path, dot_path, path));
#endif
}

}  // namespace xgrad
