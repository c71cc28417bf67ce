// The progress line of examples/common.
#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/progress.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::examples;

TEST_CASE("format_duration") {
    CHECK(format_duration(0) == "0:00");
    CHECK(format_duration(65.4) == "1:05");
    CHECK(format_duration(3725) == "1:02:05");
    CHECK(format_duration(-1) == "--:--");
}

TEST_CASE("Progress: plain lines every N steps and at the end when the output is not a terminal") {
    std::FILE* f = std::tmpfile();
    REQUIRE(f);
    Progress p(12, 5, f);
    for (int s = 1; s <= 12; ++s) p.update(s, 0.5, 0.25, 100);
    p.message("note");
    p.finish();
    std::rewind(f);
    std::string text;
    char buf[256];
    while (std::fgets(buf, sizeof buf, f)) text += buf;
    std::fclose(f);
    CHECK(text.find('\r') == std::string::npos);
    CHECK_THAT(text, Catch::Contains("step  5/12  loss 0.5000  acc  25.0%") && Catch::Contains("step 10/12") &&
                         Catch::Contains("step 12/12") && Catch::Contains("tok/s") && Catch::Contains("elapsed") &&
                         Catch::Contains("ETA 0:00") && Catch::Contains("note\n"));
    CHECK(std::count(text.begin(), text.end(), '\n') == 4);
    CHECK(p.tokens_per_second() > 0);
}

TEST_CASE("Progress: on a terminal it redraws in place unless asked for plain lines (as under mpirun)") {
    for (bool redraw : {true, false}) {
        // A pseudo-terminal in raw mode, so the line discipline adds no '\r' of its own.
        const int master = posix_openpt(O_RDWR | O_NOCTTY);
        if (master < 0) {
            WARN("no pseudo-terminal available (posix_openpt failed): not tested here");
            return;
        }
        REQUIRE(grantpt(master) == 0);
        REQUIRE(unlockpt(master) == 0);
        const int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
        REQUIRE(slave >= 0);
        termios raw{};
        REQUIRE(tcgetattr(slave, &raw) == 0);
        cfmakeraw(&raw);
        REQUIRE(tcsetattr(slave, TCSANOW, &raw) == 0);
        std::FILE* f = fdopen(slave, "w");
        REQUIRE(f);
        {
            Progress p(12, 5, f, redraw);
            for (int s = 1; s <= 12; ++s) p.update(s, 0.5, 0.25, 100);
            p.finish();
        }
        std::fclose(f);
        std::string text;
        char buf[4096];
        for (ssize_t n; (n = read(master, buf, sizeof buf)) > 0;) {
            text.append(buf, static_cast<std::size_t>(n));
            if (text.find("12/12") != std::string::npos && text.back() == '\n') break;
        }
        close(master);
        INFO("redraw " << redraw << ": " << text);
        CHECK_THAT(text, Catch::Contains("step 12/12"));
        CHECK((text.find('\r') != std::string::npos) == redraw);
        if (!redraw) CHECK(std::count(text.begin(), text.end(), '\n') == 3);
    }
}
