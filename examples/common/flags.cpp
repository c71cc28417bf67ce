#include "flags.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

namespace xgrad::examples::flags {

namespace {

// The whole text as a number, or nothing: from_chars takes no sign for unsigned types, no
// leading '+' or space, and no hexadecimal unless asked, and `end` shows trailing text.
template <class T>
std::optional<T> read_number(const std::string& text) {
    T value{};
    const char* end = text.data() + text.size();
    const auto [stop, err] = std::from_chars(text.data(), end, value);
    if (err != std::errc() || stop != end) return std::nullopt;
    return value;
}

}  // namespace

CLI::Validator whole(std::uint64_t lo, std::uint64_t hi) {
    return CLI::Validator(
        [lo, hi](std::string& text) -> std::string {
            const auto v = read_number<std::uint64_t>(text);
            if (v && *v >= lo && *v <= hi) return {};
            return fmt::format("expected a whole number from {} to {}, got '{}'", lo, hi, text);
        },
        fmt::format("[{}, {}]", lo, hi));
}

CLI::Validator seed() { return whole(0, std::numeric_limits<std::uint64_t>::max()).description(""); }

CLI::Validator real(double lo, double hi) {
    const std::string range = std::isinf(hi) ? fmt::format(">= {}", lo) : fmt::format("from {} to {}", lo, hi);
    return CLI::Validator(
        [lo, hi, range](std::string& text) -> std::string {
            const auto v = read_number<double>(text);
            if (v && std::isfinite(*v) && *v >= lo && *v <= hi) return {};
            return fmt::format("expected a finite number {}, got '{}'", range, text);
        },
        std::isinf(hi) ? fmt::format(">= {}", lo) : fmt::format("[{}, {}]", lo, hi));
}

CLI::Validator fraction() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            const auto v = read_number<double>(text);
            if (v && *v >= 0 && *v < 1) return {};
            return fmt::format("expected a number from 0 up to but not including 1, got '{}'", text);
        },
        "[0, 1)");
}

void setup(CLI::App& app) {
    app.option_defaults()->always_capture_default();
    app.get_formatter()->column_width(42);
}

std::optional<int> parse(CLI::App& app, int argc, const char* const* argv) {
    try {
        app.parse(argc, argv);
        return std::nullopt;
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help: the help text on stdout
        return refuse(app, e.what());
    }
}

int refuse(const CLI::App& app, const std::string& message) {
    std::fflush(stdout);
    fmt::print(stderr, "{}: {} (see --help)\n", app.get_name(), message);
    return 2;
}

int run_main(const char* program, int (*body)(int, char**), int argc, char** argv) {
    try {
        return body(argc, argv);
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "\n{}: error: {}\n", program, e.what());
        return 1;
    }
}

}  // namespace xgrad::examples::flags
