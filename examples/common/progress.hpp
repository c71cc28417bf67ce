#pragma once
/// The progress line of the training examples.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace xgrad::examples {

/// "1:05", "12:00:07": seconds as [h:]mm:ss.
std::string format_duration(double seconds);

/// One line of training progress:
///   step 120/600  loss 0.4321  acc 87.3%  52.1k tok/s  elapsed 0:05  ETA 0:20
/// On a terminal (isatty) the line is redrawn in place with '\r' at most ~10 times a second;
/// otherwise a plain line is printed every `every` steps and at the last step. `redraw` false
/// asks for plain lines on a terminal too: under mpirun every rank's stdout is a terminal (Open
/// MPI forwards it through a pty) even when mpirun's own output goes to a file.
class Progress {
public:
    Progress(std::int64_t total, std::int64_t every, std::FILE* out = stdout, bool redraw = true);
    /// Reports step `step` (1-based; a resumed run starts later, and the ETA counts from its
    /// first reported step); tokens is the number of tokens this step processed.
    void update(std::int64_t step, double loss, double token_acc, std::int64_t tokens);
    /// Ends the in-place line (a newline on a terminal).
    void finish();
    double elapsed() const;
    double tokens_per_second() const;
    /// Prints a message on its own line without garbling the in-place progress line.
    void message(const std::string& text);

private:
    std::string line(std::int64_t step, double loss, double token_acc) const;
    std::int64_t m_total, m_every, m_first = -1;
    std::FILE* m_out;
    bool m_tty;
    std::chrono::steady_clock::time_point m_start, m_last_draw;
    std::int64_t m_tokens = 0;
    bool m_open_line = false;
};

}  // namespace xgrad::examples
