// SVG pictures: well-formed output, round ticks, escaping, odd data, bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/creation.hpp"
#include "core/plot/svg.hpp"
#include "helpers.hpp"
#include "xml_check.hpp"

using namespace xgrad;
namespace fs = std::filesystem;
using test::kNaN;
using test::xml_problem;

namespace {

std::size_t count(const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}

}  // namespace

TEST_CASE("the XML checker itself catches broken markup", "[svg]") {
    CHECK(xml_problem("<svg><g></g><text>a &amp; b</text></svg>").empty());
    CHECK_FALSE(xml_problem("<svg><g></svg>").empty());
    CHECK_FALSE(xml_problem("<svg><text>a < b</text></svg>").empty());
    CHECK_FALSE(xml_problem("<svg><text>a & b</text></svg>").empty());
    CHECK_FALSE(xml_problem("<svg><text x=\"1>2</text></svg>").empty());
    // Graphviz's SVG: a prolog, comments and numeric character references are fine...
    CHECK(xml_problem("<?xml version=\"1.0\"?>\n<!DOCTYPE svg>\n<svg><!-- a&#45;&gt;b --><title>a&#45;&gt;b</title></svg>").empty());
    // ... but not a bare '&#' or an unterminated comment.
    CHECK_FALSE(xml_problem("<svg><text>a &#; b</text></svg>").empty());
    CHECK_FALSE(xml_problem("<svg><!-- a </svg>").empty());
}

TEST_CASE("nice_ticks lands on round numbers", "[svg]") {
    CHECK(svg::nice_ticks(0.13, 2.87) == std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5, 3});
    CHECK(svg::nice_ticks(1, 10) == std::vector<double>{0, 2, 4, 6, 8, 10});
    CHECK(svg::nice_ticks(-3, 7) == std::vector<double>{-4, -2, 0, 2, 4, 6, 8});
    auto t = svg::nice_ticks(0.0012, 0.0049);
    REQUIRE(t.size() >= 2);
    CHECK(t.front() <= 0.0012);
    CHECK(t.back() >= 0.0049);
    CHECK(t[1] - t[0] == Approx(0.001));
    CHECK(svg::nice_ticks(5, 5).size() >= 2);  // a single value still gets an axis
    CHECK(svg::nice_ticks(kNaN, 1).empty());
}

TEST_CASE("line_plot draws labelled axes, round ticks and a legend", "[svg]") {
    svg::Series loss{"train loss", {1, 2, 3, 4, 5}, {2.3, 1.1, 0.7, 0.5, 0.41}};
    svg::Series acc{"test acc", {1, 2, 3, 4, 5}, {0.4, 0.62, 0.71, 0.75, 0.78}};
    svg::LinePlotOptions o;
    o.title = "Training";
    o.xlabel = "epoch";
    o.ylabel = "loss";
    const std::string s = svg::line_plot({loss, acc}, o);
    CHECK(s.rfind("<svg", 0) == 0);
    CHECK(xml_problem(s).empty());
    for (const char* needle : {">Training<", ">epoch<", ">loss<", ">train loss<", ">test acc<"})
        CHECK(s.find(needle) != std::string::npos);
    // Ticks at 0, 0.5, ... 2.5 on y and 1 ... 5 on x, with those exact labels.
    for (const char* label : {">0.0<", ">0.5<", ">1.0<", ">2.5<", ">1<", ">5<"})
        CHECK(s.find(label) != std::string::npos);
    CHECK(s.find(">2.3<") == std::string::npos);
    CHECK(count(s, "<path") == 4);  // two lines and their two legend samples
    CHECK(s.find("stroke-dasharray") != std::string::npos);  // the second line is dashed, as in d2l
}

TEST_CASE("line_plot puts right_axis series on a second y axis", "[svg]") {
    svg::Series loss{"loss", {}, {120, 80, 40, 20}};
    svg::Series acc{"acc", {}, {0.2, 0.5, 0.7, 0.8}};
    acc.right_axis = true;
    svg::LinePlotOptions o;
    o.ylabel = "loss";
    o.y2label = "accuracy";
    const std::string s = svg::line_plot({loss, acc}, o);
    CHECK(xml_problem(s).empty());
    CHECK(s.find(">accuracy<") != std::string::npos);
    // Each axis has its own round ticks: 0..120 for the loss, 0.2..0.8 for the accuracy.
    for (const char* label : {">120<", ">40<", ">0.2<", ">0.8<"}) CHECK(s.find(label) != std::string::npos);
    // Without a right_axis series there is no second axis.
    CHECK(svg::line_plot({loss}, o).find(">accuracy<") == std::string::npos);
}

TEST_CASE("line_plot escapes text", "[svg]") {
    svg::LinePlotOptions o;
    o.title = "a<b & \"c\"";
    o.xlabel = "<pad>";
    const std::string s = svg::line_plot({{"x<y", {}, {1, 2}}}, o);
    CHECK(xml_problem(s).empty());
    CHECK(s.find("a&lt;b &amp; &quot;c&quot;") != std::string::npos);
    CHECK(s.find("&lt;pad&gt;") != std::string::npos);
    CHECK(s.find("x&lt;y") != std::string::npos);
    CHECK(s.find("<pad>") == std::string::npos);
}

TEST_CASE("line_plot survives NaN, empty series and log axes", "[svg]") {
    // NaN and inf split a line; an empty series and no series at all still draw axes.
    const std::string a = svg::line_plot({{"gappy", {}, {1, 2, kNaN, 3, 4, std::numeric_limits<double>::infinity(), 5}},
                                          {"empty", {}, {}},
                                          {"all missing", {}, {kNaN, kNaN}}});
    CHECK(xml_problem(a).empty());
    CHECK(a.find("nan") == std::string::npos);
    CHECK(a.find("inf") == std::string::npos);
    CHECK(count(a, " M") == 2);  // three runs: "M..", " M..", " M.."
    CHECK(count(a, "<circle") == 1);  // the lone point 5 gets a dot
    CHECK(xml_problem(svg::line_plot({})).empty());

    svg::LinePlotOptions o;
    o.log_y = true;
    const std::string b = svg::line_plot({{"loss", {}, {10, 1, 0.1, 0.01, 0, -1}}}, o);
    CHECK(xml_problem(b).empty());
    for (const char* label : {">0.01<", ">0.1<", ">1<", ">10<"}) CHECK(b.find(label) != std::string::npos);
    CHECK(b.find("nan") == std::string::npos);

    o.ylim = std::make_pair(0.5, 4.0);
    o.log_y = false;
    const std::string c = svg::line_plot({{"", {}, {1, 2, 3}}}, o);
    CHECK(xml_problem(c).empty());
    CHECK(c.find("class=\"legend\"") == std::string::npos);  // no labelled series, no legend
}

TEST_CASE("line_plot shows a scatter of lone points as a dot in the legend", "[svg]") {
    // Points split by NaN are drawn as dots; their legend sample is a dot too, not a line.
    svg::Series line{"line", {0, 1, 2}, {0, 1, 2}};
    svg::Series dots{"dots", {0, 0, 1, 1, 2}, {1, kNaN, 2, kNaN, 0.5}};
    const std::string s = svg::line_plot({line, dots});
    CHECK(xml_problem(s).empty());
    const std::string legend = s.substr(s.find("class=\"legend\""));
    CHECK(count(legend, "<path") == 1);
    CHECK(count(legend, "<circle") == 1);
    CHECK(count(s, "<circle") == 3 + 1);  // three lone points and the legend's dot
}

TEST_CASE("line_plot rejects bad input", "[svg]") {
    CHECK_THROWS_WITH(svg::line_plot({{"a", {1, 2, 3}, {1, 2}}}),
                      Catch::Contains("line_plot") && Catch::Contains("3 x values") && Catch::Contains("2 y values"));
    svg::LinePlotOptions o;
    o.ylim = std::make_pair(2.0, 1.0);
    CHECK_THROWS_WITH(svg::line_plot({}, o), Catch::Contains("ylim"));
    o = {};
    o.log_x = true;
    o.xlim = std::make_pair(0.0, 1.0);
    CHECK_THROWS_WITH(svg::line_plot({}, o), Catch::Contains("xlim") && Catch::Contains("log"));
    o = {};
    o.width = 10;
    CHECK_THROWS_WITH(svg::line_plot({}, o), Catch::Contains("width"));
}

TEST_CASE("heatmaps draw a grid of panels with one colour bar", "[svg]") {
    Tensor w = tensor({{0.1, 0.9, 0.0}, {0.5, 0.25, 0.25}});
    Tensor v = tensor({{1.0, 0.0, 0.0}, {0.2, 0.3, 0.5}});
    svg::HeatmapOptions o;
    o.title = "Attention";
    o.xticks = {"<bos>", "hello", "world"};
    const std::string s = svg::heatmaps({{w, v}, {v, w}}, {{"head 1", "head 2"}, {"head 3", "head 4"}}, o);
    CHECK(s.rfind("<svg", 0) == 0);
    CHECK(xml_problem(s).empty());
    for (const char* needle : {">Attention<", ">Keys<", ">Queries<", ">head 4<", ">hello<", "&lt;bos&gt;"})
        CHECK(s.find(needle) != std::string::npos);
    CHECK(count(s, "class=\"panel\"") == 4);
    CHECK(count(s, "<linearGradient") == 1);
    CHECK(count(s, ">Keys<") == 2);     // bottom row only
    CHECK(count(s, ">Queries<") == 2);  // left column only
    // The colour bar is labelled with values from the data's range (0 to 1).
    const std::string bar = s.substr(s.find("class=\"colour-bar\""));
    CHECK(bar.find(">0.0<") != std::string::npos);
    CHECK(bar.find(">1.0<") != std::string::npos);
    CHECK(count(bar, "<text") >= 3);
    // The darkest and lightest cells use the ends of "Reds".
    CHECK(s.find("#67000d") != std::string::npos);
    CHECK(s.find("#fff5f0") != std::string::npos);
}

TEST_CASE("heatmaps handle NaN, constant and integer panels", "[svg]") {
    CHECK(xml_problem(svg::heatmaps({{tensor({{kNaN, 1.0}, {2.0, 3.0}})}})).empty());
    CHECK(svg::heatmaps({{tensor({{kNaN, 1.0}, {2.0, 3.0}})}}).find("#bbbbbb") != std::string::npos);
    CHECK(xml_problem(svg::heatmaps({{full({3, 3}, 0.5)}})).empty());
    CHECK(xml_problem(svg::heatmaps({{full({2, 2}, kNaN)}})).empty());
    CHECK(xml_problem(svg::heatmaps({{from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4})}})).empty());
    svg::HeatmapOptions o;
    o.cmap = "viridis";
    o.vmin = 0;
    o.vmax = 2;
    CHECK(svg::heatmaps({{eye(40)}}, {}, o).find("#440154") != std::string::npos);
}

TEST_CASE("heatmaps reject bad input", "[svg]") {
    Tensor a = zeros({2, 3}), b = zeros({3, 2});
    CHECK_THROWS_WITH(svg::heatmaps({}), Catch::Contains("at least one panel"));
    CHECK_THROWS_WITH(svg::heatmaps({{a, a}, {a}}), Catch::Contains("row 1 has 1 panels"));
    CHECK_THROWS_WITH(svg::heatmaps({{a, b}}), Catch::Contains("(3, 2)") && Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(svg::heatmaps({{zeros({2, 3, 4})}}), Catch::Contains("2-D") && Catch::Contains("(2, 3, 4)"));
    CHECK_THROWS_WITH(svg::heatmaps({{zeros({4})}}), Catch::Contains("2-D"));
    CHECK_THROWS_WITH(svg::heatmaps({{Tensor()}}), Catch::Contains("undefined"));
    CHECK_THROWS_WITH(svg::heatmaps({{zeros({0, 3})}}), Catch::Contains("empty"));
    CHECK_THROWS_WITH(svg::heatmaps({{a}}, {{"x", "y"}}), Catch::Contains("titles"));
    svg::HeatmapOptions o;
    o.xticks = {"a", "b"};
    CHECK_THROWS_WITH(svg::heatmaps({{a}}, {}, o), Catch::Contains("2 xticks") && Catch::Contains("3 keys"));
    o = {};
    o.cmap = "jet";
    CHECK_THROWS_WITH(svg::heatmaps({{a}}, {}, o), Catch::Contains("'jet'"));
    o = {};
    o.vmin = 1;
    o.vmax = 0;
    CHECK_THROWS_WITH(svg::heatmaps({{a}}, {}, o), Catch::Contains("vmin"));
}

TEST_CASE("svg::write_file replaces a file atomically", "[svg]") {
    std::string tmpl = (fs::temp_directory_path() / "xgrad_svg_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    const fs::path dir = tmpl;
    const std::string path = (dir / "plot.svg").string();
    svg::write_file(path, "<svg/>");
    svg::write_file(path, svg::line_plot({{"a", {}, {1, 2}}}));
    std::ifstream in(path);
    const std::string back((std::istreambuf_iterator<char>(in)), {});
    CHECK(back.rfind("<svg", 0) == 0);
    CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
    CHECK_THROWS_WITH(svg::write_file((dir / "missing" / "p.svg").string(), "<svg/>"),
                      Catch::Contains("svg::write_file") && Catch::Contains("p.svg"));
    fs::remove_all(dir);
}

TEST_CASE("text that is not valid UTF-8 or not an XML character is replaced, valid text is kept", "[svg]") {
    const std::string replacement = "\xef\xbf\xbd";  // U+FFFD
    for (const char* bad : {"\xff", "\xc3\x28", "\xc0\xaf", "\xe2\x82", "\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                            "\xef\xbf\xbe"}) {
        svg::LinePlotOptions o;
        o.title = std::string("T[") + bad + "]";
        const std::string s = svg::line_plot({{"x", {}, {1, 2}}}, o);
        INFO(s.substr(0, 400));
        CHECK(s.find(std::string("[") + bad) == std::string::npos);
        CHECK(s.find("T[" + replacement) != std::string::npos);
    }
    svg::LinePlotOptions o;
    o.title = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";  // é € 😀
    CHECK(svg::line_plot({{"x", {}, {1, 2}}}, o).find(o.title) != std::string::npos);
}
