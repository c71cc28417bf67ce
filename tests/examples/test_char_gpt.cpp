// char_gpt run as a user runs it: the files it writes, a loss that falls, a resume that
// repeats the uninterrupted run bit for bit, and the runs and texts it refuses.
#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/io/npz.hpp"
#include "helpers.hpp"
#include "programs.hpp"

using namespace xgrad;
using namespace xgrad::test_programs;

namespace {

// A char_gpt run that takes about a second: a tiny model on the default text.
std::vector<std::string> tiny_gpt(const std::string& out, std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"char_gpt", "--steps", "8", "--warmup", "2", "--batch", "4", "--block", "16",
                                     "--d-model", "16", "--heads", "2", "--layers", "1", "--lr", "1e-2",
                                     "--eval-every", "4", "--eval-batches", "2", "--sample-chars", "30",
                                     "--out", out};
    args.insert(args.end(), more.begin(), more.end());
    return args;
}

// args with `flag` set to `value`: the tiny run's own value replaced (CLI11 refuses a flag given twice).
std::vector<std::string> with(std::vector<std::string> args, const std::string& flag, const std::string& value) {
    for (std::size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == flag) {
            args[i + 1] = value;
            return args;
        }
    args.push_back(flag);
    args.push_back(value);
    return args;
}

}  // namespace

TEST_CASE("char_gpt writes its files and its validation loss falls", "[char-gpt]") {
    const std::string dir = fresh_dir("char_gpt_files");
    const Result r = run(dir, tiny_gpt(dir + "/out"));
    INFO(r.err);
    REQUIRE(r.code == 0);
    for (const char* f : {"checkpoint.npz", "metrics.json", "loss.svg", "attention.svg", "sample.txt"})
        CHECK(fs::file_size(dir + "/out/" + f) > 0);
    CHECK_THAT(read_file(dir + "/out/loss.svg", "test"), Catch::Contains("validation split"));
    CHECK_THAT(read_file(dir + "/out/attention.svg", "test"), Catch::Contains("causal attention"));
    CHECK_THAT(r.out, Catch::Contains("sample (temperature 0.8, top-k 20):"));
    CHECK(read_file(dir + "/out/sample.txt", "test").size() == 31);  // the prompt "\n" and 30 characters
    const NamedTensors ck = load_npz(dir + "/out/checkpoint.npz");
    const std::vector<double> val = find_entry(ck, "history.eval_val").to_vector<double>();
    REQUIRE(val.size() == 3);  // steps 0, 4 and 8
    CHECK(val.back() < val.front() - 0.2);
    CHECK(find_entry(ck, "trainer.step").item<std::int64_t>() == 8);
    // Weight tying: the head is the token embedding, so no separate head weight is saved.
    for (const auto& [name, t] : ck)
        if (name.rfind("model.", 0) == 0) CHECK_THAT(name, !Catch::Contains("head"));
    fs::remove_all(dir);
}

TEST_CASE("char_gpt stopped and resumed repeats the uninterrupted run bit for bit", "[char-gpt]") {
    const std::string dir = fresh_dir("char_gpt_resume");
    // Dropout on: the default generator's state must travel in the checkpoint too.
    REQUIRE(run(dir, tiny_gpt(dir + "/whole", {"--dropout", "0.1"})).code == 0);
    const Result first = run(dir, tiny_gpt(dir + "/parts", {"--dropout", "0.1", "--stop-after", "3"}));
    REQUIRE(first.code == 0);
    CHECK_THAT(first.out, Catch::Contains("stopped at step 3 of 8"));
    const Result second = run(dir, tiny_gpt(dir + "/parts", {"--dropout", "0.1", "--resume"}));
    INFO(second.err);
    REQUIRE(second.code == 0);
    CHECK_THAT(second.out, Catch::Contains("resumed from " + dir + "/parts/checkpoint.npz at step 3"));
    const NamedTensors whole = load_npz(dir + "/whole/checkpoint.npz"), parts = load_npz(dir + "/parts/checkpoint.npz");
    REQUIRE(whole.size() == parts.size());
    for (std::size_t i = 0; i < whole.size(); ++i) {
        const std::string& name = whole[i].first;
        INFO(name);
        CHECK(parts[i].first == name);
        if (whole[i].second.dtype() == kInt64)
            CHECK(parts[i].second.to_vector<std::int64_t>() == whole[i].second.to_vector<std::int64_t>());
        else
            CHECK(parts[i].second.to_vector<double>() == whole[i].second.to_vector<double>());
    }
    CHECK(read_file(dir + "/parts/sample.txt", "test") == read_file(dir + "/whole/sample.txt", "test"));
    fs::remove_all(dir);
}

TEST_CASE("char_gpt refuses to resume with a setting that changes the numbers, naming it", "[char-gpt]") {
    const std::string dir = fresh_dir("char_gpt_settings");
    REQUIRE(run(dir, tiny_gpt(dir + "/out", {"--stop-after", "2"})).code == 0);
    const std::vector<char> before = [&] {
        const std::string s = read_file(dir + "/out/checkpoint.npz", "test");
        return std::vector<char>(s.begin(), s.end());
    }();
    const Result r = run(dir, with(with(tiny_gpt(dir + "/out", {"--resume"}), "--lr", "2e-2"), "--d-model", "32"));
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("lr (--lr): checkpoint 0.01, this run 0.02"));
    CHECK_THAT(r.err, Catch::Contains("d_model (--d-model): checkpoint 16, this run 32"));
    // Another text is another run.
    write_text(dir + "/other.txt", std::string(2000, 'a') + std::string(2000, '\n'));
    const Result t = run(dir, tiny_gpt(dir + "/out", {"--resume", "--text", dir + "/other.txt"}));
    CHECK(t.code == 1);
    CHECK_THAT(t.err, Catch::Contains("the text (--text): checkpoint checksum"));
    const std::string after = read_file(dir + "/out/checkpoint.npz", "test");
    CHECK(std::vector<char>(after.begin(), after.end()) == before);
    fs::remove_all(dir);
}

TEST_CASE("char_gpt refuses a second run into a folder that holds a run or is in use", "[char-gpt]") {
    const std::string dir = fresh_dir("char_gpt_second");
    REQUIRE(run(dir, tiny_gpt(dir + "/done")).code == 0);
    const Result again = run(dir, tiny_gpt(dir + "/done"));
    CHECK(again.code == 2);
    CHECK_THAT(again.err, Catch::Contains("--resume") && Catch::Contains("--overwrite"));
    // A run still going holds its folder: neither a fresh run nor --overwrite may take it.
    std::vector<std::string> long_run = with(with(with(tiny_gpt(dir + "/busy"), "--steps", "100000"), "--eval-every", "0"),
                                               "--log-every", "1000000");  // quiet once it trains
    long_run[0] = program("char_gpt");
    const pid_t pid = start(long_run, dir + "/busy_stdout.txt", dir + "/busy_stderr.txt");
    REQUIRE(wait_until_printed(pid, dir + "/busy_stdout.txt", "AdamW lr"));
    const Result busy = run(dir, tiny_gpt(dir + "/busy", {"--overwrite"}));
    CHECK(busy.code == 2);
    CHECK_THAT(busy.err, Catch::Contains("is in use by another run") && Catch::Contains("char_gpt"));
    REQUIRE(::kill(pid, SIGKILL) == 0);
    wait_for(pid);
    fs::remove_all(dir);
}

TEST_CASE("char_gpt refuses a missing, empty, binary or too short text, naming --text", "[char-gpt]") {
    const std::string dir = fresh_dir("char_gpt_text");
    write_text(dir + "/empty.txt", "");
    write_text(dir + "/binary.bin", std::string("ab\0cd", 5) + std::string(2000, 'x'));
    write_text(dir + "/controls.txt", std::string(500, '\x01') + std::string(1000, 'x'));
    write_text(dir + "/short.txt", "too short to hold a block in the validation split");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {dir + "/missing.txt", "cannot read"},       {dir + "/empty.txt", "is empty"},
        {dir + "/binary.bin", "looks binary"},       {dir + "/controls.txt", "looks binary"},
        {dir + "/short.txt", "fewer than the 180"},  {dir, "is a folder"}};
    for (const auto& [path, why] : cases) {
        INFO(path);
        const Result r = run(dir, tiny_gpt(dir + "/out", {"--text", path}));
        CHECK_REFUSED(r, "--text: ");
        CHECK_THAT(r.err, Catch::Contains(why));
        CHECK(!fs::exists(dir + "/out/checkpoint.npz"));
    }
    fs::remove_all(dir);
}
