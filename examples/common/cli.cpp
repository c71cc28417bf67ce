#include "cli.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "core/io/atomic_file.hpp"
#include "core/runtime/blas.hpp"
#include "core/error.hpp"

namespace xgrad::examples {

void default_blas_threads(int threads) {
    if (!std::getenv("OPENBLAS_NUM_THREADS")) blas_set_num_threads(threads);
}

Flags::Flags(std::string program, std::string description)
    : m_program(std::move(program)), m_description(std::move(description)) {}

void Flags::add_flag(const std::string& name, Target target, const std::string& help) {
    std::string def = std::visit(
        [](auto* p) -> std::string {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<T, bool>) return *p ? "on" : "off";
            else if constexpr (std::is_same_v<T, std::string>) return *p;
            else return fmt::format("{}", *p);
        },
        target);
    m_flags.push_back({name, help, def, target});
}

void Flags::add(const std::string& n, std::string& t, const std::string& h) { add_flag(n, &t, h); }
void Flags::add(const std::string& n, std::int64_t& t, const std::string& h) { add_flag(n, &t, h); }
void Flags::add(const std::string& n, std::size_t& t, const std::string& h) { add_flag(n, &t, h); }
void Flags::add(const std::string& n, double& t, const std::string& h) { add_flag(n, &t, h); }
void Flags::add(const std::string& n, bool& t, const std::string& h) { add_flag(n, &t, h); }

namespace {

template <class T>
T parse_number(const std::string& flag, const std::string& text) {
    try {
        std::size_t used = 0;
        T v{};
        if constexpr (std::is_same_v<T, double>) v = std::stod(text, &used);
        else if constexpr (std::is_same_v<T, std::int64_t>) v = std::stoll(text, &used);
        else {
            if (!text.empty() && text[0] == '-') throw std::invalid_argument("negative");
            v = static_cast<T>(std::stoull(text, &used));
        }
        if (used != text.size()) throw std::invalid_argument("trailing characters");
        return v;
    } catch (const std::exception&) {
        throw Error(fmt::format("--{}: '{}' is not a valid {}", flag, text,
                                std::is_same_v<T, double> ? "number" : std::is_same_v<T, std::int64_t>
                                                                           ? "integer" : "non-negative integer"));
    }
}

}  // namespace

bool Flags::parse(int argc, const char* const* argv) {
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            fmt::print("{}", help());
            return false;
        }
        if (arg.rfind("--", 0) != 0)
            throw Error(fmt::format("unexpected argument '{}' (flags start with --; see --help)", arg));
        std::string name = arg.substr(2), value;
        bool has_value = false;
        if (const auto eq = name.find('='); eq != std::string::npos) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
            has_value = true;
        }
        Flag* flag = nullptr;
        for (auto& f : m_flags)
            if (f.name == name) flag = &f;
        if (!flag) throw Error(fmt::format("unknown flag --{} (see --help)", name));
        flag->given = true;
        if (std::holds_alternative<bool*>(flag->target)) {
            bool& b = *std::get<bool*>(flag->target);
            if (!has_value) b = true;
            else if (value == "1" || value == "true" || value == "on") b = true;
            else if (value == "0" || value == "false" || value == "off") b = false;
            else throw Error(fmt::format("--{}: '{}' is not on/off", name, value));
            continue;
        }
        if (!has_value) {
            if (i + 1 >= argc) throw Error(fmt::format("--{} needs a value (see --help)", name));
            value = argv[++i];
        }
        std::visit(
            [&](auto* p) {
                using T = std::remove_pointer_t<decltype(p)>;
                if constexpr (std::is_same_v<T, std::string>) *p = value;
                else if constexpr (!std::is_same_v<T, bool>) *p = parse_number<T>(name, value);
            },
            flag->target);
    }
    return true;
}

std::string Flags::help() const {
    std::string out = fmt::format("usage: {} [flags]\n\n{}\n\nflags:\n", m_program, m_description);
    for (const auto& f : m_flags) {
        const bool is_bool = std::holds_alternative<bool*>(f.target);
        const std::string left = is_bool ? "--" + f.name : fmt::format("--{} {}", f.name, "V");
        out += fmt::format("  {:<20} {}", left, f.help);
        if (!is_bool && !f.default_text.empty()) out += fmt::format(" (default: {})", f.default_text);
        out += "\n";
    }
    out += fmt::format("  {:<20} {}\n", "--help", "print this help and exit");
    return out;
}

bool Flags::given(const std::string& name) const {
    for (const auto& f : m_flags)
        if (f.name == name) return f.given;
    return false;
}

std::string format_duration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "--:--";
    const auto s = static_cast<long long>(std::llround(seconds));
    if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
    return fmt::format("{}:{:02}", s / 60, s % 60);
}

Progress::Progress(std::int64_t total, std::int64_t every, std::FILE* out, bool redraw)
    : m_total(total), m_every(every < 1 ? 1 : every), m_out(out), m_tty(redraw && isatty(fileno(out)) != 0),
      m_start(std::chrono::steady_clock::now()), m_last_draw(m_start) {}

double Progress::elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
}

double Progress::tokens_per_second() const {
    const double t = elapsed();
    return t > 0 ? static_cast<double>(m_tokens) / t : 0.0;
}

std::string Progress::line(std::int64_t step, double loss, double token_acc) const {
    const double t = elapsed();
    const double done = static_cast<double>(step - m_first + 1);
    const double eta = done > 0 ? t / done * static_cast<double>(m_total - step) : NAN;
    const double tps = tokens_per_second();
    const std::string rate = tps >= 1e3 ? fmt::format("{:.1f}k", tps / 1e3) : fmt::format("{:.0f}", tps);
    const int width = static_cast<int>(fmt::format("{}", m_total).size());
    return fmt::format("step {:>{}}/{}  loss {:.4f}  acc {:5.1f}%  {} tok/s  elapsed {}  ETA {}", step, width,
                       m_total, loss, 100 * token_acc, rate, format_duration(t), format_duration(eta));
}

void Progress::update(std::int64_t step, double loss, double token_acc, std::int64_t tokens) {
    if (m_first < 0) m_first = step;
    m_tokens += tokens;
    const auto now = std::chrono::steady_clock::now();
    const bool last = step >= m_total;
    if (m_tty) {
        if (!last && now - m_last_draw < std::chrono::milliseconds(100)) return;
        m_last_draw = now;
        fmt::print(m_out, "\r{}\x1b[K", line(step, loss, token_acc));
        m_open_line = true;
    } else if (step % m_every == 0 || last) {
        fmt::print(m_out, "{}\n", line(step, loss, token_acc));
    }
    std::fflush(m_out);
}

void Progress::message(const std::string& text) {
    if (m_open_line) fmt::print(m_out, "\r\x1b[K");
    fmt::print(m_out, "{}\n", text);
    m_open_line = false;
    m_last_draw = std::chrono::steady_clock::time_point{};
    std::fflush(m_out);
}

void Progress::finish() {
    if (m_open_line) fmt::print(m_out, "\n");
    m_open_line = false;
    std::fflush(m_out);
}

void write_json(const std::string& path, const std::vector<std::pair<std::string, JsonValue>>& fields) {
    auto quote = [](const std::string& s) {
        std::string out = "\"";
        for (char c : s) {
            if (c == '"' || c == '\\') out += '\\', out += c;
            else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<int>(c));
            else out += c;
        }
        return out + "\"";
    };
    std::string out = "{\n";
    for (std::size_t i = 0; i < fields.size(); ++i) {
        const auto& [key, v] = fields[i];
        std::string text = std::visit(
            [&](const auto& x) -> std::string {
                using T = std::decay_t<decltype(x)>;
                if constexpr (std::is_same_v<T, std::string>) return quote(x);
                else if constexpr (std::is_same_v<T, double>) return std::isfinite(x) ? fmt::format("{}", x) : "null";
                else return fmt::format("{}", x);
            },
            v);
        out += fmt::format("  {}: {}{}\n", quote(key), text, i + 1 < fields.size() ? "," : "");
    }
    out += "}\n";
    write_file_atomic(path, out, "write_json");
}

}  // namespace xgrad::examples
