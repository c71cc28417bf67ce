// Pictures of the autograd graph (plot/graph.hpp): the DOT text of small graphs, escaping, the
// node limit, the files, and the SVG Graphviz lays out (or the error when it was not built in).
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "core/node.hpp"
#include "core/plot/graph.hpp"
#include "file_helpers.hpp"
#include "helpers.hpp"
#include "xml_check.hpp"

using namespace xgrad;
using namespace xgrad::test;
namespace fs = std::filesystem;

namespace {

// The statements of a DOT text, one per line as to_dot writes them.
std::vector<std::string> lines_of(const std::string& dot) {
    std::vector<std::string> out;
    std::istringstream in(dot);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

// The id of the node whose label's first line is `first` ("" when there is none; fails when
// there are several).
std::string node_id(const std::string& dot, const std::string& first) {
    std::string id;
    for (const std::string& line : lines_of(dot)) {
        const std::size_t at = line.find("label=\"" + first);
        if (at == std::string::npos || line.find(" -> ") != std::string::npos) continue;
        const std::size_t after = at + 7 + first.size();
        if (line.compare(after, 2, "\\n") != 0 && line.compare(after, 1, "\"") != 0) continue;
        CHECK(id.empty());  // one node per tensor
        id = line.substr(2, line.find(' ', 2) - 2);
    }
    return id;
}

// The statement that defines node `id`.
std::string statement(const std::string& dot, const std::string& id) {
    for (const std::string& line : lines_of(dot))
        if (line.rfind("  " + id + " [", 0) == 0) return line;
    return "";
}

// The op node that made tensor node "tK" is "opK".
std::string op_of(const std::string& tensor_id) { return "op" + tensor_id.substr(1); }

// The edge statements from `from` to `to` (with their attributes).
std::vector<std::string> edges(const std::string& dot, const std::string& from, const std::string& to) {
    std::vector<std::string> out;
    for (const std::string& line : lines_of(dot))
        if (line == "  " + from + " -> " + to + ";" || line.rfind("  " + from + " -> " + to + " [", 0) == 0)
            out.push_back(line);
    return out;
}

std::size_t count(const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// A scratch folder, removed at the end of the test.
struct ScratchDir {
    fs::path path;
    ScratchDir() {
        std::string tmpl = (fs::temp_directory_path() / "xgrad_graph_XXXXXX").string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
    }
    ~ScratchDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("to_dot draws x*y + z: a box per tensor, an ellipse per op, edges as data flows", "[graph]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y = tensor({3.0, 4.0}, kFloat64).requires_grad_();
    Tensor z = tensor({0.5, 0.25}, kFloat64);
    Tensor xy = x * y;
    Tensor out = xy + z;
    GraphOptions opts{{{"x", x}, {"y", y}, {"z", z}, {"xy", xy}, {"out", out}}};
    const std::string dot = to_dot(out, opts);
    INFO(dot);
    REQUIRE(dot.rfind("// The autograd graph of a 'add' result (5 tensors, 2 ops)", 0) == 0);
    CHECK(contains(dot, "digraph autograd {"));
    CHECK(contains(dot, "rankdir=LR"));

    const std::string ix = node_id(dot, "x"), iy = node_id(dot, "y"), iz = node_id(dot, "z");
    const std::string ixy = node_id(dot, "xy"), iout = node_id(dot, "out");
    REQUIRE(iout == "t0");  // the root comes first, drawn bold
    CHECK(contains(statement(dot, iout), "penwidth=2"));
    // Leaves: parameters (require grad) and constants, with dtype, shape and small values.
    CHECK(contains(statement(dot, ix), "label=\"x\\nfloat64 [2]\\nparameter (requires grad)\\ndata [1, 2]\""));
    CHECK(contains(statement(dot, ix), "fillcolor=\"#cfe2f3\""));
    CHECK(contains(statement(dot, iz), "label=\"z\\nfloat64 [2]\\nconstant\\ndata [0.5, 0.25]\""));
    CHECK(contains(statement(dot, iz), "fillcolor=\"#ffffff\""));
    CHECK(contains(statement(dot, ixy), "label=\"xy\\nfloat64 [2]\\nrequires grad\\ndata [3, 8]\""));
    // Ops, with what their backward saved: mul both inputs, add nothing.
    CHECK(contains(statement(dot, op_of(ixy)), "shape=ellipse"));
    CHECK(contains(statement(dot, op_of(ixy)), "label=\"mul\\nsaves inputs 0, 1\""));
    CHECK(contains(statement(dot, op_of(iout)), "label=\"add\\nsaves nothing\""));
    // input -> op -> output, each input's position on its edge; never the other way round.
    CHECK(edges(dot, ix, op_of(ixy)) == std::vector<std::string>{"  " + ix + " -> " + op_of(ixy) + " [label=\"0\"];"});
    CHECK(edges(dot, iy, op_of(ixy)) == std::vector<std::string>{"  " + iy + " -> " + op_of(ixy) + " [label=\"1\"];"});
    CHECK(edges(dot, op_of(ixy), ixy).size() == 1);
    CHECK(edges(dot, ixy, op_of(iout)).size() == 1);
    CHECK(edges(dot, iz, op_of(iout)).size() == 1);
    CHECK(edges(dot, op_of(iout), iout).size() == 1);
    CHECK(edges(dot, op_of(ixy), ix).empty());
    CHECK(count(dot, " -> ") == 6);
    // Leaves have no op node.
    CHECK(statement(dot, op_of(ix)).empty());

    SECTION("gradients held are shown after backward") {
        out.sum().backward({}, /*retain_graph=*/true);
        const std::string after = to_dot(out, opts);
        INFO(after);
        CHECK(contains(statement(after, node_id(after, "x")), "\\ngrad [3, 4]\""));
        CHECK(contains(statement(after, node_id(after, "y")), "\\ngrad [1, 2]\""));
        CHECK_FALSE(contains(statement(after, node_id(after, "z")), "\\ngrad"));
        CHECK_FALSE(contains(statement(after, node_id(after, "xy")), "\\ngrad"));
        // A gradient with a graph of its own (create_graph) says so.
        x.zero_grad();
        out.sum().backward({}, true, /*create_graph=*/true);
        CHECK(contains(statement(to_dot(out, opts), node_id(after, "x")), "\\ngrad [3, 4] (with a graph)\""));
        // x.grad's graph holds y and y.grad's holds x: a cycle, as in torch, whose backward(
        // create_graph=True) warns of it. Clearing the gradients breaks it.
        x.zero_grad();
        y.zero_grad();
    }
    SECTION("without names, and with values off") {
        const std::string plain = to_dot(out, GraphOptions{{}, 300, 0});
        CHECK(contains(plain, "label=\"float64 [2]\\nparameter (requires grad)\""));
        CHECK_FALSE(contains(plain, "data ["));
    }
    SECTION("top to bottom") { CHECK(contains(to_dot(out, GraphOptions{{}, 300, 4, false}), "rankdir=TB")); }
}

TEST_CASE("to_dot draws a diamond with one box for the shared tensor", "[graph]") {
    Tensor a = tensor({0.5, -1.0, 2.0}, kFloat64).requires_grad_();
    Tensor b = exp(a);
    Tensor c = a * a;  // the same input twice: two edges, positions 0 and 1
    Tensor d = b + c;
    const std::string dot = to_dot(d, {{{"a", a}, {"b", b}, {"c", c}}});
    INFO(dot);
    const std::string ia = node_id(dot, "a");  // checks there is only one
    REQUIRE_FALSE(ia.empty());
    CHECK(count(dot, "label=\"a\\n") == 1);
    CHECK(edges(dot, ia, op_of(node_id(dot, "b"))).size() == 1);
    CHECK(edges(dot, ia, op_of(node_id(dot, "c"))) ==
          std::vector<std::string>{"  " + ia + " -> " + op_of(node_id(dot, "c")) + " [label=\"0\"];",
                                   "  " + ia + " -> " + op_of(node_id(dot, "c")) + " [label=\"1\"];"});
    CHECK(contains(statement(dot, op_of(node_id(dot, "b"))), "label=\"exp\\nsaves its output\""));
    CHECK(contains(dot, "(4 tensors, 3 ops)"));
}

TEST_CASE("to_dot draws a broadcast with each tensor's own shape", "[graph]") {
    // autograd_demo's graph: x of shape [2] broadcasts over w's rows.
    Tensor w = tensor({{0.5, -1.0}, {2.0, 0.25}}).requires_grad_();
    Tensor x = tensor({1.0, 2.0});
    Tensor y = tanh(w * x);
    Tensor loss = y.sum();
    const std::string dot = to_dot(loss, {{{"w", w}, {"x", x}, {"y", y}, {"loss", loss}}});
    INFO(dot);
    CHECK(contains(statement(dot, node_id(dot, "w")), "float32 [2, 2]\\nparameter (requires grad)\\ndata [0.5, -1, 2, 0.25]"));
    CHECK(contains(statement(dot, node_id(dot, "x")), "float32 [2]\\nconstant\\ndata [1, 2]"));
    CHECK(contains(statement(dot, node_id(dot, "y")), "float32 [2, 2]"));
    CHECK(contains(statement(dot, node_id(dot, "loss")), "float32 []\\nrequires grad\\ndata 0.9242"));
    CHECK(contains(statement(dot, op_of(node_id(dot, "y"))), "label=\"tanh\\nsaves its output\""));
    CHECK(contains(statement(dot, op_of(node_id(dot, "loss"))), "label=\"sum\\n"));
    // w and x go into the product (mul) whose result tanh reads.
    const std::string ymul = node_id(dot, "float32 [2, 2]");  // the only unnamed [2, 2] tensor
    REQUIRE_FALSE(ymul.empty());
    CHECK(contains(statement(dot, op_of(ymul)), "label=\"mul\\n"));
    CHECK(edges(dot, node_id(dot, "w"), op_of(ymul)).size() == 1);
    CHECK(edges(dot, node_id(dot, "x"), op_of(ymul)).size() == 1);
    CHECK(edges(dot, ymul, op_of(node_id(dot, "y"))).size() == 1);
}

TEST_CASE("to_dot draws the past history of a tensor written in place", "[graph]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y = x * 3.0;
    Tensor z = y * y;  // reads (and saves) y before the write
    // y += x, recorded in the graph as the in-place ops record themselves (node.hpp).
    record_in_place("add_", y, {x}, [](const Tensor& old, const std::vector<Tensor>& o) { return old + o[0]; });
    Tensor loss = (z + y).sum();
    const std::string dot = to_dot(loss, {{{"x", x}, {"y", y}, {"z", z}}});
    INFO(dot);
    const std::string iy = node_id(dot, "y"), ipast = node_id(dot, "before add_ wrote it");
    REQUIRE_FALSE(ipast.empty());
    // The tensor now: made by add_ from its past value and x; version 1.
    CHECK(contains(statement(dot, iy), "label=\"y\\nfloat64 [2]\\nrequires grad\\ndata [4, 8]\\nversion 1\""));
    CHECK(contains(statement(dot, op_of(iy)), "label=\"add_\\nsaves nothing\""));
    CHECK(edges(dot, ipast, op_of(iy)).size() == 1);
    CHECK(edges(dot, node_id(dot, "x"), op_of(iy)).size() == 1);
    // The past value, dashed, made by the first mul from x; z's mul read it, and saved it, so
    // its edges say the value changed since (backward refuses it, as the engine does below).
    CHECK(contains(statement(dot, ipast), "style=\"filled,dashed\""));
    CHECK(contains(statement(dot, ipast), "before add_ wrote it\\nfloat64 [2]\\nrequires grad\\nvalue not kept\""));
    CHECK(contains(statement(dot, op_of(ipast)), "label=\"mul\\n"));
    CHECK(edges(dot, node_id(dot, "x"), op_of(ipast)).size() == 1);
    CHECK(edges(dot, ipast, op_of(node_id(dot, "z"))) ==
          std::vector<std::string>{
              "  " + ipast + " -> " + op_of(node_id(dot, "z")) + " [color=red, fontcolor=red, label=\"0: changed since saved\"];",
              "  " + ipast + " -> " + op_of(node_id(dot, "z")) + " [color=red, fontcolor=red, label=\"1: changed since saved\"];"});
    CHECK_FALSE(contains(statement(dot, iy), "dashed"));
    CHECK_THROWS_WITH(loss.backward(), Catch::Contains("modified in place after it was saved for backward by 'mul'"));

    SECTION("an in-place write that no saved value depends on keeps the edges black") {
        Tensor a = tensor({1.0, 2.0}, kFloat64).requires_grad_();
        Tensor b = a + 1.0;
        Tensor c = b * 2.0;  // reads b without saving it
        record_in_place("mul_", b, {a}, [](const Tensor& old, const std::vector<Tensor>& o) { return old * o[0]; });
        const std::string dot2 = to_dot((b + c).sum(), {{{"b", b}, {"c", c}}});
        INFO(dot2);
        const std::string past = node_id(dot2, "before mul_ wrote it");
        REQUIRE_FALSE(past.empty());
        CHECK(edges(dot2, past, op_of(node_id(dot2, "c"))) ==
              std::vector<std::string>{"  " + past + " -> " + op_of(node_id(dot2, "c")) + ";"});
        CHECK_FALSE(contains(dot2, "red"));
        // mul_ saved the past value (its gradient for a reads it), so the past box keeps it.
        CHECK(contains(statement(dot2, past), "data [2, 3]"));
        CHECK(contains(statement(dot2, op_of(node_id(dot2, "b"))), "label=\"mul_\\nsaves inputs 0, 1\""));
    }
}

TEST_CASE("to_dot marks ops whose graph backward freed", "[graph]") {
    Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y = x * x;
    Tensor loss = y.sum();
    SECTION("freed") {
        loss.backward();
        const std::string dot = to_dot(loss, {{{"x", x}}});
        INFO(dot);
        CHECK(contains(dot, "label=\"sum\\ngraph freed by backward()\""));
        CHECK(contains(dot, "style=\"filled,dashed\""));
        // Its inputs are gone with it: one box and its op, nothing else.
        CHECK(count(dot, " -> ") == 1);
        CHECK(node_id(dot, "x").empty());
    }
    SECTION("kept with retain_graph") {
        loss.backward({}, true);
        const std::string dot = to_dot(loss, {{{"x", x}}});
        CHECK_FALSE(contains(dot, "freed"));
        CHECK(contains(statement(dot, node_id(dot, "x")), "grad [2, 4]"));
    }
}

TEST_CASE("to_dot escapes names and op names", "[graph]") {
    Tensor x = tensor({1.0}, kFloat64).requires_grad_();
    Tensor y = x * 2.0;
    // Quotes, braces, bars, angle brackets, a backslash before N (Graphviz's \N is the node's
    // name), a newline, a control character, UTF-8 and a byte that is not UTF-8.
    const std::string name = "w \"q\" {a|b} <c> \\N\nnext\x01 \xc3\xa9 \xff";
    y.node().op = "we\"ird<op>";
    const std::string dot = to_dot(y, {{{name, x}}});
    INFO(dot);
    CHECK(contains(dot, "label=\"w \\\"q\\\" {a|b} <c> \\\\N\\nnext\xEF\xBF\xBD \xc3\xa9 \xEF\xBF\xBD\\nfloat64 [1]"));
    CHECK(contains(dot, "label=\"we\\\"ird<op>\\nsaves nothing\""));
    CHECK(contains(dot, "of a 'we\\\"ird<op>' result"));  // the // comment stays one line
    // Every label is one quoted string: an even number of unescaped quotes on each line.
    for (const std::string& line : lines_of(dot)) {
        if (line.rfind("//", 0) == 0) continue;
        std::size_t quotes = 0;
        for (std::size_t i = 0; i < line.size(); ++i) {
            if (line[i] == '\\') ++i;
            else if (line[i] == '"') ++quotes;
        }
        CHECK(quotes % 2 == 0);
    }
    if (has_graphviz()) {
        // Graphviz reads it back: the text arrives as written.
        const std::string svg = dot_to_svg(dot);
        CHECK(xml_problem(svg).empty());
        CHECK(contains(svg, "w &quot;q&quot; {a|b} &lt;c&gt; \\N"));
        CHECK(contains(svg, "we&quot;ird&lt;op&gt;"));
    }
}

TEST_CASE("to_dot draws at most max_tensors, nearest the output first, and says so", "[graph]") {
    Tensor x = tensor({1.0}, kFloat64).requires_grad_();
    Tensor h = x;
    for (int i = 0; i < 50; ++i) h = h * 1.5;
    GraphOptions opts{{{"x", x}}, 10};
    const std::string dot = to_dot(h, opts);
    INFO(dot);
    CHECK(contains(dot, "(51 tensors, 50 ops)"));
    CHECK(contains(dot, "label=\"Only the 10 tensors nearest the output are drawn, of 51: raise "
                        "GraphOptions::max_tensors to see more.\""));
    CHECK(count(dot, "shape=box") == 10);
    CHECK(count(dot, "shape=ellipse") == 10);
    CHECK(node_id(dot, "x").empty());
    // The last op drawn says its input was cut.
    CHECK(contains(statement(dot, "op9"), "\\n1 input not drawn\""));
    CHECK(edges(dot, "t9", "op8").size() == 1);
    CHECK(count(dot, " -> ") == 10 + 9);

    // All of it when it fits: no note.
    const std::string all = to_dot(h, {{{"x", x}}, 51});
    CHECK(count(all, "shape=box") == 51);
    CHECK_FALSE(contains(all, "Only the"));
    CHECK_FALSE(contains(all, "not drawn"));
}

TEST_CASE("to_dot refuses what it cannot draw", "[graph]") {
    Tensor x = tensor({1.0}).requires_grad_();
    CHECK_THROWS_WITH(to_dot(Tensor()), "to_dot: the tensor is undefined (it has no graph to draw)");
    CHECK_THROWS_WITH(to_dot(x, {{{"a", x}, {"b", Tensor()}}}), "to_dot: names[1] ('b') is an undefined tensor");
    CHECK_THROWS_WITH(to_dot(x, {{}, 0}), "to_dot: max_tensors must be at least 1, got 0");
    // A leaf on its own, and a tensor made with gradients off, are one box each.
    CHECK(count(to_dot(x), "shape=box") == 1);
    Tensor c = tensor({1.0}) * 2.0;
    CHECK(contains(to_dot(c), "constant (mul without a graph)"));
}

TEST_CASE("save_graph writes DOT atomically, and names the file when it cannot", "[graph]") {
    ScratchDir dir;
    Tensor x = tensor({1.0, 2.0}).requires_grad_();
    Tensor y = (x * x).sum();
    const std::string path = (dir.path / "graph.dot").string();
    spit(path, "old");
    save_graph(y, path);
    CHECK(slurp(path) == to_dot(y));
    save_graph(y, (dir.path / "graph.GV").string());
    CHECK(slurp((dir.path / "graph.GV").string()) == to_dot(y));
    // Only the two files: no temporary left behind.
    CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 2);

    const std::string missing = (dir.path / "no" / "graph.dot").string();
    CHECK_THROWS_WITH(save_graph(y, missing), Catch::Contains("save_graph: cannot write '" + missing + "'") &&
                                                   Catch::Contains("does not exist"));
    const std::string png = (dir.path / "graph.png").string();
    CHECK_THROWS_WITH(save_graph(y, png), "save_graph: cannot write '" + png +
                                              "': expected a name ending in .dot, .gv or .svg, got '.png'");
    CHECK_THROWS_WITH(save_graph(y, (dir.path / "graph").string()), Catch::Contains("got none"));
    CHECK_THROWS_WITH(save_graph(Tensor(), path), "save_graph: the tensor is undefined (it has no graph to draw)");
    CHECK(slurp(path) == to_dot(y));
}

TEST_CASE("save_graph lays out an SVG with Graphviz, or says it was built without it", "[graph]") {
    ScratchDir dir;
    Tensor x = tensor({1.0, 2.0}).requires_grad_();
    Tensor y = (exp(x) * x).sum();
    const std::string path = (dir.path / "graph.svg").string();
    if (has_graphviz()) {
        save_graph(y, path, {{{"x", x}}});
        const std::string svg = slurp(path);
        CHECK(xml_problem(svg).empty());
        CHECK(contains(svg, "<svg"));
        // Laid out by Graphviz: every node and edge of the DOT text, with its text.
        CHECK(count(svg, "class=\"node\"") == 7);
        CHECK(count(svg, "class=\"edge\"") == 7);
        for (const char* text : {">exp<", ">mul<", ">sum<", ">x<", ">parameter (requires grad)<", ">saves its output<"})
            CHECK(contains(svg, text));
        CHECK(dot_to_svg(to_dot(y, {{{"x", x}}})) == svg);

        CHECK_THROWS_WITH(dot_to_svg("digraph { a -> }"),
                          Catch::StartsWith("dot_to_svg: Graphviz could not read the DOT text (") &&
                              Catch::Contains("syntax error in line 1"));
        CHECK(dot_to_svg(to_dot(y, {{{"x", x}}})) == svg);  // Graphviz's parser recovers
        // Graphviz reads one graph of a text and keeps the rest for its next read: refused here,
        // so the next text is read as itself.
        CHECK_THROWS_WITH(dot_to_svg("digraph a { x } digraph b { y }"),
                          "dot_to_svg: Graphviz read one graph and then more text; give it one graph");
        CHECK_THROWS_WITH(dot_to_svg("digraph a { x } }"), Catch::Contains("give it one graph") &&
                                                                Catch::Contains("syntax error in line 1"));
        CHECK(contains(dot_to_svg("digraph c { z }"), "<title>c</title>"));
        // Graphviz keeps global state: layouts from several threads take turns.
        std::vector<std::string> svgs(4);
        std::vector<std::thread> threads;
        const std::string dot = to_dot(y, {{{"x", x}}});
        for (std::size_t t = 0; t < svgs.size(); ++t) threads.emplace_back([&, t] { svgs[t] = dot_to_svg(dot); });
        for (auto& t : threads) t.join();
        for (const std::string& s : svgs) CHECK(s == svg);
        const std::string missing = (dir.path / "no" / "graph.svg").string();
        CHECK_THROWS_WITH(save_graph(y, missing), Catch::Contains("save_graph: cannot write '" + missing + "'"));
    } else {
        CHECK_THROWS_WITH(save_graph(y, path),
                          "save_graph: cannot write '" + path +
                              "': xgrad was built without Graphviz (pkg-config found no libgvc at build time), so it "
                              "cannot lay out an SVG; save it as DOT text instead, save_graph(root, \"" +
                              (dir.path / "graph.dot").string() + "\"), and lay that out with `dot -Tsvg " +
                              (dir.path / "graph.dot").string() + " -o " + path +
                              "` (or install libgraphviz-dev and rebuild xgrad)");
        CHECK_FALSE(fs::exists(path));
        CHECK_THROWS_WITH(dot_to_svg("digraph { a }"), Catch::Contains("built without Graphviz"));
    }
}
