#pragma once
/// The examples' command lines, on CLI11: `--name value`, `--name=value`, `--flag`, `--help`.
///
///   CLI::App app("Trains a Transformer encoder on a toy task.", "seq_train");
///   flags::setup(app);
///   app.add_option("--steps", steps, "training steps")->check(flags::whole(1, flags::kMaxCount));
///   if (const auto exit_code = flags::parse(app, argc, argv)) return *exit_code;
///
/// The checks refuse a bad value before anything runs, with a message that names the flag and
/// the value: text that is not wholly a number ("5x", "1e3" or "0x10" for a count), a negative
/// count (CLI11 alone reads "-1" as 2^64 − 1 for an unsigned flag), NaN and infinities (which
/// CLI::Range lets through), and values outside the flag's range.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace xgrad::examples::flags {

/// The largest count of steps, epochs or items a flag takes: 2^53. Counts are kept exact as
/// float64 (seq_train's checkpoint stores its configuration so), and a few times one still fits
/// in int64 (seq_train evaluates every --eval-every steps and reports every fourth time).
constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 53;

/// The largest size a flag takes (a batch, a width, a length, a number of symbols): 2^20. The
/// examples multiply two or three sizes in size_t (a batch of batch·length tokens), which stays
/// far from overflow; larger sizes would not fit in memory anyway.
constexpr std::uint64_t kMaxSize = std::uint64_t{1} << 20;

/// A whole number in [lo, hi], in decimal digits only.
CLI::Validator whole(std::uint64_t lo, std::uint64_t hi);
/// Any seed: a whole number in [0, 2^64 − 1].
CLI::Validator seed();
/// A finite number in [lo, hi]; without hi, any finite number >= lo.
CLI::Validator real(double lo, double hi = std::numeric_limits<double>::infinity());
/// A probability that is not 1: a number in [0, 1) (dropout).
CLI::Validator fraction();

/// Makes --help show each flag's default and its range: call before adding the flags.
void setup(CLI::App& app);

/// Parses the command line. Returns nothing when the program should go on; otherwise the exit
/// code, after printing the help text (0) or "<program>: <flag>: <what is wrong> (see --help)"
/// on stderr (2).
std::optional<int> parse(CLI::App& app, int argc, const char* const* argv);

/// For a check across flags after parse(): prints "<program>: <message> (see --help)" on
/// stderr and returns the exit code 2.
int refuse(const CLI::App& app, const std::string& message);

/// Runs a program's body: an exception that escapes it ends the program with
/// "\n<program>: error: <what>" on stderr and exit code 1, instead of std::terminate.
int run_main(const char* program, int (*body)(int, char**), int argc, char** argv);

}  // namespace xgrad::examples::flags
