#include "progress.hpp"

#include <unistd.h>

#include <cmath>

#include <fmt/format.h>

namespace xgrad::examples {

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

}  // namespace xgrad::examples
