#include "core/plot/svg.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/io/atomic_file.hpp"

namespace xgrad::svg {

namespace {

constexpr const char* kFont = "DejaVu Sans, Helvetica, Arial, sans-serif";
constexpr double kTickFont = 12, kLabelFont = 14, kTitleFont = 16;
constexpr const char* kInk = "#222222";  // text and frames

// matplotlib's default colour cycle (tab10) and d2l's line styles '-', '--', '-.', ':'.
constexpr std::array<const char*, 10> kTab10 = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr std::array<const char*, 4> kDashes = {"none", "7,4", "7,3,1.5,3", "1.5,3"};

// Width of text in pixels, estimated: SVG has no layout engine to ask. Sans-serif glyphs
// average about 0.6 em; UTF-8 continuation bytes do not count.
double text_width(const std::string& s, double size) {
    std::size_t n = 0;
    for (unsigned char c : s)
        if ((c & 0xc0) != 0x80) ++n;
    return 0.6 * size * static_cast<double>(n);
}

// A coordinate: at most two decimals, no trailing zeros ("12", "12.5", "12.25").
std::string f2(double v) {
    std::string s = fmt::format("{:.2f}", v);
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s == "-0" ? "0" : s;
}

// %g, tidied: 1e-05 -> 1e-5, 1e+06 -> 1e6.
std::string format_g(double v) {
    std::string s = fmt::format("{:g}", v);
    const auto e = s.find('e');
    if (e == std::string::npos) return s;
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    const bool neg = exp[0] == '-';
    exp = exp.substr(1);
    exp.erase(0, std::min(exp.find_first_not_of('0'), exp.size() - 1));
    return mant + "e" + (neg ? "-" : "") + exp;
}

// A tick label for a value on a grid of `step`: as many decimals as the step needs.
std::string format_tick(double v, double step) {
    if (std::isfinite(step) && std::abs(v) < std::abs(step) * 1e-9) v = 0;  // no "-0.0", no 1e-17
    const double a = std::abs(v);
    if (a >= 1e6 || (a < 1e-4 && a != 0)) return format_g(v);
    const int decimals = std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 10);
    return fmt::format("{:.{}f}", v, decimals);
}

std::string text(double x, double y, const std::string& s, const char* anchor, double size,
                 const std::string& extra = "") {
    return fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"{}\" font-size=\"{}\"{}>{}</text>\n", f2(x), f2(y),
                       anchor, size, extra, escape(s));
}

std::string line(double x1, double y1, double x2, double y2) {
    return fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>\n", f2(x1), f2(y1), f2(x2), f2(y2));
}

std::string svg_open(double w, double h) {
    return fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
        "font-family=\"{2}\" fill=\"{3}\">\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
        f2(w), f2(h), kFont, kInk);
}

// Where v lies in [lo, hi], as 0..1, also for ranges wider than the largest double.
double unit(double v, double lo, double hi) {
    if (std::isfinite(hi - lo)) return (v - lo) / (hi - lo);
    return (v / 2 - lo / 2) / (hi / 2 - lo / 2);
}

// --- axes of a line plot -----------------------------------------------------------------------

struct Axis {
    double lo = 0, hi = 1;
    bool log = false;
    std::vector<double> ticks;
    std::vector<std::string> labels;

    double frac(double v) const {
        if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
        return unit(v, lo, hi);
    }
};

// Decades, and 2× / 5× steps inside them when the range spans few decades.
void log_ticks(Axis& a) {
    const double la = std::log10(a.lo), lb = std::log10(a.hi);
    const double span = lb - la;
    const int k = std::max(1, static_cast<int>(std::ceil(span / 8)));
    for (int e = static_cast<int>(std::floor(la)); e <= static_cast<int>(std::ceil(lb)); ++e)
        for (double m : {1.0, 2.0, 5.0}) {
            if (m != 1.0 && span > 2.5) continue;
            if (m == 1.0 && e % k != 0) continue;
            const double v = m * std::pow(10.0, e);
            if (v >= a.lo * (1 - 1e-9) && v <= a.hi * (1 + 1e-9)) a.ticks.push_back(v);
        }
    if (a.ticks.size() < 2) {  // a range inside one decade: round numbers on a linear grid
        a.ticks.clear();
        for (double t : nice_ticks(a.lo, a.hi))
            if (t >= a.lo && t <= a.hi && t > 0) a.ticks.push_back(t);
    }
    for (double t : a.ticks) a.labels.push_back(format_g(t));
}

Axis make_axis(const char* name, std::vector<double> values, bool log,
               const std::optional<std::pair<double, double>>& lim) {
    Axis a;
    a.log = log;
    if (lim) {
        const auto [lo, hi] = *lim;
        if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi) || (log && lo <= 0))
            throw Error(fmt::format("line_plot: {}lim must be finite with low < high{}, got ({}, {})", name,
                                    log ? " and low > 0 on a log axis" : "", lo, hi));
        a.lo = lo;
        a.hi = hi;
        if (log) {
            log_ticks(a);
        } else {
            const auto t = nice_ticks(lo, hi);
            const double eps = (hi / 2 - lo / 2) * 2e-9;
            for (double v : t)
                if (v >= lo - eps && v <= hi + eps) a.ticks.push_back(v);
            const double step = t.size() > 1 ? t[1] - t[0] : hi - lo;
            for (double v : a.ticks) a.labels.push_back(format_tick(v, step));
        }
        return a;
    }
    if (values.empty()) values = log ? std::vector<double>{1, 10} : std::vector<double>{0, 1};
    const auto [mn, mx] = std::minmax_element(values.begin(), values.end());
    if (log) {
        double ea = std::floor(std::log10(*mn) + 1e-9), eb = std::ceil(std::log10(*mx) - 1e-9);
        if (eb <= ea) eb = ea + 1;
        a.lo = std::pow(10.0, ea);
        a.hi = std::pow(10.0, eb);
        log_ticks(a);
        return a;
    }
    a.ticks = nice_ticks(*mn, *mx);
    if (a.ticks.size() < 2) a.ticks = {*mn, *mx};  // ranges too wide for doubles
    a.lo = a.ticks.front();
    a.hi = a.ticks.back();
    const double step = a.ticks[1] - a.ticks[0];
    for (double v : a.ticks) a.labels.push_back(format_tick(v, step));
    return a;
}

// --- colour maps -------------------------------------------------------------------------------

struct Rgb {
    double r, g, b;
};

Rgb hex(const char* s) {
    auto h = [&](int i) { return static_cast<double>(std::stoi(std::string(s + i, 2), nullptr, 16)); };
    return {h(1), h(3), h(5)};
}

// Control points of matplotlib's maps (ColorBrewer for the sequential ones), interpolated
// linearly in sRGB as matplotlib's LinearSegmentedColormap does.
std::vector<Rgb> colour_map(const std::string& name) {
    std::vector<const char*> pts;
    if (name == "Reds")
        pts = {"#fff5f0", "#fee0d2", "#fcbba1", "#fc9272", "#fb6a4a", "#ef3b2c", "#cb181d", "#a50f15", "#67000d"};
    else if (name == "Blues")
        pts = {"#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"};
    else if (name == "Greys")
        pts = {"#ffffff", "#f0f0f0", "#d9d9d9", "#bdbdbd", "#969696", "#737373", "#525252", "#252525", "#000000"};
    else if (name == "viridis")
        pts = {"#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b",
               "#fde725"};
    else
        throw Error(fmt::format("heatmaps: unknown colour map '{}'; expected Reds, Blues, Greys or viridis", name));
    std::vector<Rgb> out;
    for (const char* p : pts) out.push_back(hex(p));
    return out;
}

std::string colour_at(const std::vector<Rgb>& map, double t) {
    t = std::clamp(t, 0.0, 1.0) * static_cast<double>(map.size() - 1);
    const std::size_t i = std::min(static_cast<std::size_t>(t), map.size() - 2);
    const double f = t - static_cast<double>(i);
    auto mix = [&](double a, double b) { return static_cast<int>(std::lround(a + (b - a) * f)); };
    return fmt::format("#{:02x}{:02x}{:02x}", mix(map[i].r, map[i + 1].r), mix(map[i].g, map[i + 1].g),
                       mix(map[i].b, map[i + 1].b));
}

}  // namespace

// The length of the well-formed UTF-8 sequence at s[i] of a character XML 1.0 allows, or 0:
// no overlong forms, surrogates, code points past U+10FFFF, or U+FFFE/U+FFFF.
std::size_t xml_char_length(const std::string& s, std::size_t i) {
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = b(0);
    std::size_t n;
    char32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07;
    else return 0;
    if (i + n > s.size()) return 0;
    for (std::size_t k = 1; k < n; ++k) {
        if ((b(k) & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (b(k) & 0x3f);
    }
    const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp == 0xfffe || cp == 0xffff) return 0;
    return n;
}

std::string escape(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const char c = s[i];
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default: {
                // Control characters are not allowed in XML 1.0 at all, and a byte that does not
                // start a valid character would make the file unreadable: both are replaced.
                if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
                    out += ' ';
                    break;
                }
                const std::size_t n = xml_char_length(s, i);
                if (n == 0) {
                    out += "\xef\xbf\xbd";  // U+FFFD, the replacement character
                    break;
                }
                out.append(s, i, n);
                i += n;
                continue;
            }
        }
        ++i;
    }
    return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
    if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
    if (lo > hi) std::swap(lo, hi);
    if (lo == hi) {
        const double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
        lo -= d;
        hi += d;
    }
    const double raw = hi / std::max(target, 1) - lo / std::max(target, 1);
    if (!std::isfinite(raw) || raw <= 0) return {};
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double r = raw / mag;
    const double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
    const double first = std::floor(lo / step + 1e-6), last = std::ceil(hi / step - 1e-6);
    std::vector<double> ticks;
    for (double k = first; k <= last && ticks.size() < 1000; k += 1) {
        if (!std::isfinite(k * step)) return {};  // the round ends lie beyond the largest double
        ticks.push_back(k * step);
    }
    return ticks;
}

// --- line plot -----------------------------------------------------------------------------------

std::string line_plot(const std::vector<Series>& series, const LinePlotOptions& opts) {
    if (!(opts.width >= 100 && opts.height >= 80 && opts.width <= 1e5 && opts.height <= 1e5))
        throw Error(fmt::format("line_plot: width and height must be in [100, 1e5] and [80, 1e5], got {} x {}",
                                opts.width, opts.height));
    // Points that can be drawn: finite, and positive on a log axis; others split the line.
    std::vector<std::vector<std::pair<double, double>>> pts(series.size());
    std::vector<std::vector<bool>> ok(series.size());
    std::vector<double> xs, ys, ys2;
    bool has_y2 = false;
    for (std::size_t s = 0; s < series.size(); ++s) {
        const Series& se = series[s];
        if (!se.x.empty() && se.x.size() != se.y.size())
            throw Error(fmt::format("line_plot: series {} ('{}') has {} x values but {} y values", s, se.label,
                                    se.x.size(), se.y.size()));
        has_y2 = has_y2 || se.right_axis;
        const bool log_y = se.right_axis ? opts.log_y2 : opts.log_y;
        for (std::size_t i = 0; i < se.y.size(); ++i) {
            const double x = se.x.empty() ? static_cast<double>(i) : se.x[i], y = se.y[i];
            const bool good = std::isfinite(x) && std::isfinite(y) && (!opts.log_x || x > 0) && (!log_y || y > 0);
            pts[s].emplace_back(x, y);
            ok[s].push_back(good);
            if (good) {
                xs.push_back(x);
                (se.right_axis ? ys2 : ys).push_back(y);
            }
        }
    }
    const Axis ax = make_axis("x", xs, opts.log_x, opts.xlim);
    const Axis ay = make_axis("y", ys, opts.log_y, opts.ylim);
    const Axis ay2 = has_y2 ? make_axis("y2", ys2, opts.log_y2, opts.y2lim) : Axis{};

    double ylabel_w = 0;
    for (const auto& l : ay.labels) ylabel_w = std::max(ylabel_w, text_width(l, kTickFont));
    const double left = 12 + (opts.ylabel.empty() ? 0 : kLabelFont + 10) + ylabel_w + 10;
    double y2label_w = 0;
    for (const auto& l : ay2.labels) y2label_w = std::max(y2label_w, text_width(l, kTickFont));
    const double right = has_y2 ? 10 + y2label_w + (opts.y2label.empty() ? 0 : kLabelFont + 10) + 12 : 24;
    const double top = opts.title.empty() ? 18 : 18 + kTitleFont + 12;
    const double bottom = 8 + kTickFont + 8 + (opts.xlabel.empty() ? 0 : kLabelFont + 10) + 8;
    const double W = std::max(opts.width, left + right + 60), H = std::max(opts.height, top + bottom + 40);
    const double x0 = left, x1 = W - right, y0 = top, y1 = H - bottom;
    auto px = [&](double x) { return x0 + ax.frac(x) * (x1 - x0); };
    auto py = [&](double y) { return y1 - ay.frac(y) * (y1 - y0); };
    auto py2 = [&](double y) { return y1 - ay2.frac(y) * (y1 - y0); };
    // Point i of series s in pixels.
    auto at = [&](std::size_t s, std::size_t i) {
        const auto [x, y] = pts[s][i];
        return std::make_pair(px(x), series[s].right_axis ? py2(y) : py(y));
    };

    std::string out = svg_open(W, H);
    out += fmt::format("<defs><clipPath id=\"plot-area\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>"
                       "</clipPath></defs>\n",
                       f2(x0), f2(y0), f2(x1 - x0), f2(y1 - y0));
    if (opts.grid) {
        out += "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
        for (double t : ax.ticks) out += line(px(t), y0, px(t), y1);
        for (double t : ay.ticks) out += line(x0, py(t), x1, py(t));
        out += "</g>\n";
    }

    // Lines: one path per series, "M" starting each run of drawable points.
    out += "<g class=\"series\" clip-path=\"url(#plot-area)\" fill=\"none\" stroke-width=\"2\" "
           "stroke-linejoin=\"round\" stroke-linecap=\"round\">\n";
    std::vector<std::string> colours(series.size()), dashes(series.size());
    std::string dots;
    for (std::size_t s = 0; s < series.size(); ++s) {
        colours[s] = series[s].color.empty() ? kTab10[s % kTab10.size()] : series[s].color;
        dashes[s] = series[s].dash.empty() ? kDashes[s % kDashes.size()] : series[s].dash;
        std::string d;
        const auto& p = pts[s];
        for (std::size_t i = 0; i < p.size(); ++i) {
            if (!ok[s][i]) continue;
            const bool starts = i == 0 || !ok[s][i - 1];
            const bool alone = starts && (i + 1 == p.size() || !ok[s][i + 1]);
            const auto [cx, cy] = at(s, i);
            d += fmt::format("{}{},{}", starts ? (d.empty() ? "M" : " M") : " L", f2(cx), f2(cy));
            if (opts.markers || alone)
                dots += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>\n", f2(cx), f2(cy),
                                    opts.markers ? 2.5 : 2, escape(colours[s]));
        }
        if (d.empty()) continue;
        out += fmt::format("<path d=\"{}\" stroke=\"{}\"{}/>\n", d, escape(colours[s]),
                           dashes[s] == "none" ? std::string() : fmt::format(" stroke-dasharray=\"{}\"", escape(dashes[s])));
    }
    out += "</g>\n";
    if (!dots.empty()) out += "<g class=\"markers\" clip-path=\"url(#plot-area)\">\n" + dots + "</g>\n";

    // Frame, ticks and tick labels.
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"{}\"/>\n", f2(x0),
                       f2(y0), f2(x1 - x0), f2(y1 - y0), kInk);
    out += fmt::format("<g class=\"ticks\" stroke=\"{}\">\n", kInk);
    for (double t : ax.ticks) out += line(px(t), y1, px(t), y1 + 5);
    for (double t : ay.ticks) out += line(x0 - 5, py(t), x0, py(t));
    for (double t : ay2.ticks) out += line(x1, py2(t), x1 + 5, py2(t));
    out += "</g>\n<g class=\"tick-labels\">\n";
    for (std::size_t i = 0; i < ax.ticks.size(); ++i)
        out += text(px(ax.ticks[i]), y1 + 8 + kTickFont, ax.labels[i], "middle", kTickFont);
    for (std::size_t i = 0; i < ay.ticks.size(); ++i)
        out += text(x0 - 8, py(ay.ticks[i]) + kTickFont * 0.35, ay.labels[i], "end", kTickFont);
    for (std::size_t i = 0; i < ay2.ticks.size(); ++i)
        out += text(x1 + 8, py2(ay2.ticks[i]) + kTickFont * 0.35, ay2.labels[i], "start", kTickFont);
    out += "</g>\n";
    if (!opts.xlabel.empty()) out += text((x0 + x1) / 2, H - 12, opts.xlabel, "middle", kLabelFont);
    if (!opts.ylabel.empty())
        out += text(0, 0, opts.ylabel, "middle", kLabelFont,
                    fmt::format(" transform=\"translate({},{}) rotate(-90)\"", f2(12 + kLabelFont), f2((y0 + y1) / 2)));
    if (has_y2 && !opts.y2label.empty())
        out += text(0, 0, opts.y2label, "middle", kLabelFont,
                    fmt::format(" transform=\"translate({},{}) rotate(-90)\"", f2(W - 12), f2((y0 + y1) / 2)));
    if (!opts.title.empty()) out += text((x0 + x1) / 2, 18 + kTitleFont, opts.title, "middle", kTitleFont);

    // Legend, where it covers the fewest points of the lines.
    std::vector<std::size_t> shown;
    for (std::size_t s = 0; s < series.size(); ++s)
        if (!series[s].label.empty()) shown.push_back(s);
    if (opts.legend && !shown.empty()) {
        double tw = 0;
        for (auto s : shown) tw = std::max(tw, text_width(series[s].label, kTickFont));
        const double row = 18, lw = 10 + 28 + 6 + tw + 10, lh = 8 + row * static_cast<double>(shown.size()) + 4;
        std::vector<std::pair<double, double>> where;  // sample points along the lines, in pixels
        for (std::size_t s = 0; s < series.size(); ++s)
            for (std::size_t i = 0; i < pts[s].size(); ++i) {
                if (!ok[s][i]) continue;
                const auto [ax0, ay0] = at(s, i);
                where.emplace_back(ax0, ay0);
                if (i + 1 < pts[s].size() && ok[s][i + 1]) {
                    const auto [bx, by] = at(s, i + 1);
                    for (int k = 1; k < 8; ++k) where.emplace_back(ax0 + (bx - ax0) * k / 8, ay0 + (by - ay0) * k / 8);
                }
            }
        const double pad = 10;
        // matplotlib's candidates for loc="best", in its order of preference.
        const double xl = x0 + pad, xc = (x0 + x1 - lw) / 2, xr = x1 - pad - lw;
        const double yt = y0 + pad, yc = (y0 + y1 - lh) / 2, yb = y1 - pad - lh;
        const std::array<std::pair<double, double>, 9> corners = {
            {{xr, yt}, {xl, yt}, {xl, yb}, {xr, yb}, {xl, yc}, {xr, yc}, {xc, yb}, {xc, yt}, {xc, yc}}};
        std::size_t best = 0, best_count = std::numeric_limits<std::size_t>::max();
        for (std::size_t c = 0; c < corners.size(); ++c) {
            // Plain variables: a C++17 lambda cannot capture a structured binding (clang refuses).
            const double lx = corners[c].first, ly = corners[c].second;
            const auto n = static_cast<std::size_t>(std::count_if(where.begin(), where.end(), [&](const auto& p) {
                return p.first >= lx - 4 && p.first <= lx + lw + 4 && p.second >= ly - 4 && p.second <= ly + lh + 4;
            }));
            if (n < best_count) {
                best = c;
                best_count = n;
            }
        }
        const auto [lx, ly] = corners[best];
        out += fmt::format("<g class=\"legend\">\n<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\" "
                           "fill=\"white\" fill-opacity=\"0.85\" stroke=\"#cccccc\"/>\n",
                           f2(lx), f2(ly), f2(lw), f2(lh));
        for (std::size_t k = 0; k < shown.size(); ++k) {
            const std::size_t s = shown[k];
            const double cy = ly + 8 + row * (static_cast<double>(k) + 0.5);
            // A series drawn only as separate dots (a scatter of points split by NaN) gets a dot,
            // not a line sample that it never draws.
            bool any = false, joined = false;
            for (std::size_t i = 0; i < ok[s].size(); ++i) {
                any = any || ok[s][i];
                joined = joined || (ok[s][i] && i + 1 < ok[s].size() && ok[s][i + 1]);
            }
            if (any && !joined)
                out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>\n", f2(lx + 24), f2(cy),
                                   opts.markers ? 2.5 : 2, escape(colours[s]));
            else
                out += fmt::format("<path d=\"M{},{} L{},{}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", f2(lx + 10),
                                   f2(cy), f2(lx + 38), f2(cy), escape(colours[s]),
                                   dashes[s] == "none" ? std::string()
                                                       : fmt::format(" stroke-dasharray=\"{}\"", escape(dashes[s])));
            out += text(lx + 44, cy + kTickFont * 0.35, series[s].label, "start", kTickFont);
        }
        out += "</g>\n";
    }
    out += "</svg>\n";
    return out;
}

// --- heatmaps ------------------------------------------------------------------------------------

std::string heatmaps(const std::vector<std::vector<Tensor>>& panels,
                     const std::vector<std::vector<std::string>>& titles, const HeatmapOptions& opts) {
    if (panels.empty() || panels[0].empty())
        throw Error("heatmaps: expected at least one panel (a non-empty rows x cols grid of 2-D tensors)");
    const std::size_t rows = panels.size(), cols = panels[0].size();
    Shape shape;
    for (std::size_t r = 0; r < rows; ++r) {
        if (panels[r].size() != cols)
            throw Error(fmt::format("heatmaps: row {} has {} panels but row 0 has {}; the grid must be rectangular",
                                    r, panels[r].size(), cols));
        for (std::size_t c = 0; c < cols; ++c) {
            const Tensor& t = panels[r][c];
            if (!t.defined()) throw Error(fmt::format("heatmaps: panel ({}, {}) is undefined", r, c));
            if (t.dim() != 2)
                throw Error(fmt::format("heatmaps: panel ({}, {}) must be 2-D (queries, keys), got shape {}", r, c,
                                        shape_str(t.shape())));
            if (r == 0 && c == 0) shape = t.shape();
            else if (t.shape() != shape)
                throw Error(fmt::format("heatmaps: panel ({}, {}) has shape {} but panel (0, 0) has {}; all panels "
                                        "must have one shape",
                                        r, c, shape_str(t.shape()), shape_str(shape)));
        }
    }
    const std::size_t nq = shape[0], nk = shape[1];
    if (nq == 0 || nk == 0) throw Error(fmt::format("heatmaps: the panels are empty (shape {})", shape_str(shape)));
    if (!titles.empty()) {
        bool fits = titles.size() == rows;
        for (const auto& row : titles) fits = fits && row.size() == cols;
        if (!fits)
            throw Error(fmt::format("heatmaps: titles must be empty or {} x {} like the panels", rows, cols));
    }
    if (!opts.xticks.empty() && opts.xticks.size() != nk)
        throw Error(fmt::format("heatmaps: {} xticks given for {} keys (columns)", opts.xticks.size(), nk));
    if (!opts.yticks.empty() && opts.yticks.size() != nq)
        throw Error(fmt::format("heatmaps: {} yticks given for {} queries (rows)", opts.yticks.size(), nq));
    const auto cmap = colour_map(opts.cmap);

    std::vector<std::vector<std::vector<double>>> values(rows);
    double vmin = std::numeric_limits<double>::infinity(), vmax = -vmin;
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
            values[r].push_back(panels[r][c].to_vector<double>());
            for (double v : values[r].back())
                if (std::isfinite(v)) {
                    vmin = std::min(vmin, v);
                    vmax = std::max(vmax, v);
                }
        }
    if (!std::isfinite(vmin)) vmin = 0, vmax = 1;  // nothing finite to show
    if (opts.vmin) vmin = *opts.vmin;
    if (opts.vmax) vmax = *opts.vmax;
    if (!std::isfinite(vmin) || !std::isfinite(vmax) || vmin > vmax)
        throw Error(fmt::format("heatmaps: the colour scale needs finite vmin <= vmax, got {} and {}", vmin, vmax));
    if (vmin == vmax) {  // one value everywhere: scale from 0 so it shows as full or empty
        if (vmin > 0) vmin = 0;
        else if (vmax < 0) vmax = 0;
        else vmax = 1;
    }

    // Tick labels: the given ones on every cell, or index numbers at a round step.
    auto index_ticks = [](std::size_t n) {
        std::vector<std::size_t> at;
        const auto t = nice_ticks(0, static_cast<double>(n - 1), 5);
        const auto step = std::max<std::size_t>(1, t.size() > 1 ? static_cast<std::size_t>(std::lround(t[1] - t[0])) : 1);
        for (std::size_t i = 0; i < n; i += step) at.push_back(i);
        return at;
    };
    std::vector<std::size_t> xt_at, yt_at;
    std::vector<std::string> xt_text, yt_text;
    if (opts.xticks.empty()) {
        for (auto i : index_ticks(nk)) xt_at.push_back(i), xt_text.push_back(std::to_string(i));
    } else {
        for (std::size_t i = 0; i < nk; ++i) xt_at.push_back(i), xt_text.push_back(opts.xticks[i]);
    }
    if (opts.yticks.empty()) {
        for (auto i : index_ticks(nq)) yt_at.push_back(i), yt_text.push_back(std::to_string(i));
    } else {
        for (std::size_t i = 0; i < nq; ++i) yt_at.push_back(i), yt_text.push_back(opts.yticks[i]);
    }

    const double font = 11;
    const double cell = std::clamp(200.0 / static_cast<double>(std::max(nq, nk)), 1.0, 28.0);
    const double pw = cell * static_cast<double>(nk), ph = cell * static_cast<double>(nq);
    double xt_w = 0, yt_w = 0;
    for (const auto& s : xt_text) xt_w = std::max(xt_w, text_width(s, font));
    for (const auto& s : yt_text) yt_w = std::max(yt_w, text_width(s, font));
    const double xt_space = xt_at.size() > 1 ? cell * static_cast<double>(xt_at[1] - xt_at[0]) : pw;
    const bool rotate_x = xt_w > xt_space - 3;  // labels that would collide stand upright
    const double xt_h = rotate_x ? xt_w + 4 : font + 2;
    const double title_h = titles.empty() ? 0 : 20;

    const double top = 12 + (opts.title.empty() ? 0 : kTitleFont + 14);
    const double left = 12 + (opts.ylabel.empty() ? 0 : kLabelFont + 8) + yt_w + 10;
    const double gap_x = 18, gap_y = 16;
    const double grid_w = static_cast<double>(cols) * pw + static_cast<double>(cols - 1) * gap_x;
    const double grid_h = static_cast<double>(rows) * (title_h + ph) + static_cast<double>(rows - 1) * gap_y;

    // Colour bar: 80 % of the panels' height (at least 100 px), centred on them, with a label
    // about every 30 px.
    const double span_top = top + title_h, span_h = grid_h - title_h;
    const double cb_h = std::max(100.0, 0.8 * span_h), cb_y = std::max(top, span_top + (span_h - cb_h) / 2);
    const auto cb_ticks_all = nice_ticks(vmin, vmax, std::clamp(static_cast<int>(cb_h / 30), 2, 6));
    std::vector<double> cb_ticks;
    const double cb_eps = (vmax / 2 - vmin / 2) * 2e-9;
    for (double t : cb_ticks_all)
        if (t >= vmin - cb_eps && t <= vmax + cb_eps) cb_ticks.push_back(t);
    const double cb_step = cb_ticks_all.size() > 1 ? cb_ticks_all[1] - cb_ticks_all[0] : 1;
    double cb_label_w = 0;
    for (double t : cb_ticks) cb_label_w = std::max(cb_label_w, text_width(format_tick(t, cb_step), font));
    const double cb_x = left + grid_w + 22, cb_w = 14;

    double W = cb_x + cb_w + 5 + 4 + cb_label_w + 12;
    if (!opts.title.empty()) W = std::max(W, text_width(opts.title, kTitleFont) + 24);
    const double H = std::max(top + grid_h + 6 + xt_h + (opts.xlabel.empty() ? 0 : kLabelFont + 12) + 8, cb_y + cb_h + 12);

    std::string out = svg_open(W, H);
    if (!opts.title.empty()) out += text(W / 2, 12 + kTitleFont, opts.title, "middle", kTitleFont);
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
            const double gx = left + static_cast<double>(c) * (pw + gap_x);
            const double gy = top + static_cast<double>(r) * (title_h + ph + gap_y) + title_h;
            if (!titles.empty() && !titles[r][c].empty())
                out += text(gx + pw / 2, gy - 7, titles[r][c], "middle", 12);
            // Cells: runs of one colour along a row become one rectangle.
            out += fmt::format("<g class=\"panel\" shape-rendering=\"crispEdges\" transform=\"translate({},{})\">\n",
                               f2(gx), f2(gy));
            const auto& v = values[r][c];
            for (std::size_t q = 0; q < nq; ++q) {
                std::size_t k = 0;
                while (k < nk) {
                    const double x = v[q * nk + k];
                    const std::string col = std::isnan(x) ? std::string("#bbbbbb")
                                                          : colour_at(cmap, unit(x, vmin, vmax));
                    std::size_t end = k + 1;
                    while (end < nk) {
                        const double y = v[q * nk + end];
                        const std::string c2 = std::isnan(y) ? std::string("#bbbbbb")
                                                             : colour_at(cmap, unit(y, vmin, vmax));
                        if (c2 != col) break;
                        ++end;
                    }
                    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n",
                                       f2(cell * static_cast<double>(k)), f2(cell * static_cast<double>(q)),
                                       f2(cell * static_cast<double>(end - k)), f2(cell), col);
                    k = end;
                }
            }
            out += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"0.8\"/>\n",
                               f2(pw), f2(ph), kInk);
            out += fmt::format("<g stroke=\"{}\">\n", kInk);
            if (r + 1 == rows)
                for (auto i : xt_at) {
                    const double x = cell * (static_cast<double>(i) + 0.5);
                    out += line(x, ph, x, ph + 4);
                }
            if (c == 0)
                for (auto i : yt_at) {
                    const double y = cell * (static_cast<double>(i) + 0.5);
                    out += line(-4, y, 0, y);
                }
            out += "</g>\n";
            if (r + 1 == rows)
                for (std::size_t i = 0; i < xt_at.size(); ++i) {
                    const double x = cell * (static_cast<double>(xt_at[i]) + 0.5);
                    if (rotate_x)
                        out += text(0, 0, xt_text[i], "end", font,
                                    fmt::format(" transform=\"translate({},{}) rotate(-90)\"", f2(x + font * 0.35),
                                                f2(ph + 7)));
                    else
                        out += text(x, ph + 6 + font, xt_text[i], "middle", font);
                }
            if (c == 0)
                for (std::size_t i = 0; i < yt_at.size(); ++i)
                    out += text(-7, cell * (static_cast<double>(yt_at[i]) + 0.5) + font * 0.35, yt_text[i], "end", font);
            if (r + 1 == rows && !opts.xlabel.empty())
                out += text(pw / 2, ph + 6 + xt_h + kLabelFont + 4, opts.xlabel, "middle", kLabelFont);
            if (c == 0 && !opts.ylabel.empty())
                out += text(0, 0, opts.ylabel, "middle", kLabelFont,
                            fmt::format(" transform=\"translate({},{}) rotate(-90)\"", f2(-(gx - 12 - kLabelFont)),
                                        f2(ph / 2)));
            out += "</g>\n";
        }

    // The shared colour bar: a gradient through the map's control points, which is exactly the
    // interpolation the cells use.
    out += "<defs><linearGradient id=\"colour-bar\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n";
    for (std::size_t i = 0; i < cmap.size(); ++i) {
        const double t = static_cast<double>(i) / static_cast<double>(cmap.size() - 1);
        out += fmt::format("<stop offset=\"{}\" stop-color=\"{}\"/>\n", f2(t), colour_at(cmap, t));
    }
    out += "</linearGradient></defs>\n";
    out += fmt::format("<g class=\"colour-bar\">\n<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
                       "fill=\"url(#colour-bar)\" stroke=\"{}\" stroke-width=\"0.8\"/>\n",
                       f2(cb_x), f2(cb_y), f2(cb_w), f2(cb_h), kInk);
    for (double t : cb_ticks) {
        const double y = cb_y + cb_h - unit(t, vmin, vmax) * cb_h;
        out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\"/>\n", f2(cb_x + cb_w), f2(y),
                           f2(cb_x + cb_w + 4), f2(y), kInk);
        out += text(cb_x + cb_w + 7, y + font * 0.35, format_tick(t, cb_step), "start", font);
    }
    out += "</g>\n</svg>\n";
    return out;
}

void write_file(const std::string& path, const std::string& content) {
    write_file_atomic(path, content, "svg::write_file");
}

}  // namespace xgrad::svg
