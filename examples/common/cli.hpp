#pragma once
/// Small command-line pieces for the example programs: flag parsing with --help, a progress
/// line, and metrics.json.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace xgrad::examples {

/// Flags of the form `--name value`, `--name=value`, and `--name` alone for booleans.
///
///   Flags flags("seq_train", "Trains a Transformer encoder on a toy task.");
///   flags.add("steps", steps, "training steps");
///   if (!flags.parse(argc, argv)) return 0;   // --help was printed
///
/// Each add() binds a variable whose current value is the default shown by --help. parse()
/// throws xgrad::Error for an unknown flag, a missing value or a value that does not parse.
class Flags {
public:
    Flags(std::string program, std::string description);
    void add(const std::string& name, std::string& target, const std::string& help);
    void add(const std::string& name, std::int64_t& target, const std::string& help);
    void add(const std::string& name, std::size_t& target, const std::string& help);
    void add(const std::string& name, double& target, const std::string& help);
    void add(const std::string& name, bool& target, const std::string& help);
    /// Returns false after printing the help text for --help / -h.
    bool parse(int argc, const char* const* argv);
    std::string help() const;
    /// Whether the flag was given on the command line.
    bool given(const std::string& name) const;

private:
    using Target = std::variant<std::string*, std::int64_t*, std::size_t*, double*, bool*>;
    struct Flag {
        std::string name, help, default_text;
        Target target;
        bool given = false;
    };
    void add_flag(const std::string& name, Target target, const std::string& help);
    std::string m_program, m_description;
    std::vector<Flag> m_flags;
};

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

/// Sets OpenBLAS to `threads` threads unless OPENBLAS_NUM_THREADS is set in the environment.
/// The examples' matrices are tiny (64 × 64 and the like): a second BLAS thread costs more in
/// hand-off than it saves, and on a loaded machine its spin-waiting can triple a run's time.
void default_blas_threads(int threads = 1);

/// A flat JSON object of numbers and strings, written atomically. Non-finite numbers become null.
using JsonValue = std::variant<double, std::int64_t, std::string>;
void write_json(const std::string& path, const std::vector<std::pair<std::string, JsonValue>>& fields);

}  // namespace xgrad::examples
