// Files as an attacker would hand them over: every kind of path a save may be pointed at (folders,
// FIFOs, devices, sockets, symbolic links and their loops, odd names), every special file a load
// may be pointed at, writers killed mid-write, and zip archives built to exhaust memory.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define ZLIB_CONST
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/creation.hpp"
#include "core/io/atomic_file.hpp"
#include "core/io/npz.hpp"
#include "core/plot/svg.hpp"
#include "file_helpers.hpp"
#include "helpers.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"

using namespace xgrad;
using namespace xgrad::test;
namespace fs = std::filesystem;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        char tmpl[] = "/tmp/xgrad_files_XXXXXX";
        REQUIRE(::mkdtemp(tmpl) != nullptr);
        path = tmpl;
        fs::permissions(path, fs::perms(0755));  // reachable by the unprivileged child of some tests
    }
    ~TempDir() {
        std::error_code ec;
        fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
        for (const auto& e : fs::recursive_directory_iterator(path, ec))
            if (e.is_directory(ec)) fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(path, ec);
    }
    std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// The names in a folder, sorted.
std::vector<std::string> entries(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}


mode_t lmode(const std::string& path) {
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    return st.st_mode;
}

bool is_root() { return ::geteuid() == 0; }

// Sets whether AtomicFile may use O_TMPFILE for one scope.
struct TmpfileMode {
    explicit TmpfileMode(bool on) { detail::set_atomic_file_tmpfile(on); }
    ~TmpfileMode() { detail::set_atomic_file_tmpfile(true); }
};

// Every writer of a file in the library, with the op its messages name and a check that a
// successful write holds what it should.
struct Writer {
    std::string name, op;
    std::function<void(const std::string&)> save;
    std::function<bool(const std::string&)> wrote;
};
std::vector<Writer> writers() {
    const Tensor t = from_vector(std::vector<double>{1.5, -2.0, 3.25}, {3});
    auto npz_ok = [t](const std::string& p) {
        const NamedTensors back = load_npz(p);
        return back.size() == 1 && back[0].first == "w" && back[0].second.to_vector<float>() == t.to_vector<float>();
    };
    return {
        {"save_npz", "save_npz", [t](const std::string& p) { save_npz(p, {{"w", t}}); }, npz_ok},
        {"save_npz_compressed", "save_npz_compressed",
         [t](const std::string& p) { save_npz_compressed(p, {{"w", t}}); }, npz_ok},
        {"save_npy", "save_npy", [t](const std::string& p) { save_npy(p, t); },
         [t](const std::string& p) { return load_npy(p).to_vector<float>() == t.to_vector<float>(); }},
        {"svg::write_file", "svg::write_file", [](const std::string& p) { svg::write_file(p, "<svg/>\n"); },
         [](const std::string& p) { return read_file(p, "test") == "<svg/>\n"; }},
        {"write_file_atomic", "notes", [](const std::string& p) { write_file_atomic(p, "text\n", "notes"); },
         [](const std::string& p) { return read_file(p, "test") == "text\n"; }},
        {"nn::save", "save_npz",
         [](const std::string& p) {
             nn::Linear layer(2, 1);
             nn::save(layer, p);
         },
         [](const std::string& p) { return load_npz(p).size() == 2; }},
    };
}

// What a function did in a child process: its message (or "ok"), or the signal that ended it.
struct ChildOutcome {
    std::string message;
    int signal = 0;
};
// Runs `fn` in a forked child that an alarm ends after `seconds`, optionally as the user
// nobody, so that a hang or a runaway read fails the test instead of stalling it.
ChildOutcome in_child(const std::function<std::string()>& fn, unsigned seconds = 20, bool as_nobody = false) {
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(pipe_fds[0]);
        ::alarm(seconds);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        struct rlimit as {};  // a read without bound ends in an error, not the machine's swap
        as.rlim_cur = as.rlim_max = rlim_t{2} << 30;
        ::setrlimit(RLIMIT_AS, &as);
#endif
        std::string out;
        if (as_nobody && (::setgid(65534) != 0 || ::setuid(65534) != 0)) {
            out = "setuid failed";
        } else {
            try {
                out = fn();
            } catch (const std::exception& e) {
                out = e.what();
            }
        }
        const char* p = out.data();
        std::size_t left = out.size();
        while (left > 0) {
            const ssize_t n = ::write(pipe_fds[1], p, left);
            if (n <= 0) break;
            p += n;
            left -= static_cast<std::size_t>(n);
        }
        ::_exit(0);
    }
    ::close(pipe_fds[1]);
    ChildOutcome r;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
        if (n > 0) r.message.append(buf, static_cast<std::size_t>(n));
        else if (n == 0 || errno != EINTR) break;
    }
    ::close(pipe_fds[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    return r;
}

// A Unix socket bound at `path`, closed at once: the socket file stays.
void make_socket(const std::string& path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof addr.sun_path);
    std::strcpy(addr.sun_path, path.c_str());
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    ::close(fd);
}

// Special files to aim a save at, each with the word its message must use. Device nodes of our
// own where we may make them (root): a failing test must never replace the machine's /dev/null.
struct Special {
    std::string path, kind;
    mode_t type;
};
std::vector<Special> specials(const TempDir& dir) {
    std::vector<Special> out;
    fs::create_directory(dir / "folder");
    out.push_back({dir / "folder", "is a directory", S_IFDIR});
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0666) == 0);
    out.push_back({dir / "fifo", "is a FIFO (named pipe)", S_IFIFO});
    make_socket(dir / "socket");
    out.push_back({dir / "socket", "is a socket", S_IFSOCK});
    if (is_root()) {
        REQUIRE(::mknod((dir / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0);
        out.push_back({dir / "null", "is a character device", S_IFCHR});
        REQUIRE(::mknod((dir / "loop").c_str(), S_IFBLK | 0600, makedev(7, 0)) == 0);
        out.push_back({dir / "loop", "is a block device", S_IFBLK});
    } else {
        out.push_back({"/dev/null", "is a character device", S_IFCHR});
    }
    return out;
}

// --- zip archives built by hand ---------------------------------------------------------------

void put16(std::string& s, std::uint16_t v) {
    s += static_cast<char>(v & 0xff);
    s += static_cast<char>(v >> 8);
}
void put32(std::string& s, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

struct ZipMember {
    std::string name;
    std::uint16_t method;
    std::uint32_t crc, csize, usize;
};
void put_fields(std::string& s, const ZipMember& m) {
    put16(s, 20);
    put16(s, 0);  // flags
    put16(s, m.method);
    put16(s, 0);
    put16(s, 0x21);
    put32(s, m.crc);
    put32(s, m.csize);
    put32(s, m.usize);
}
std::string local_header(const ZipMember& m) {
    std::string s = "PK\x03\x04";
    put_fields(s, m);
    put16(s, static_cast<std::uint16_t>(m.name.size()));
    put16(s, 0);
    return s + m.name;
}
// The central directory and end record for `members` whose local headers sit at `offsets`,
// appended to `body` (everything before the directory).
std::string finish_zip(std::string body, const std::vector<ZipMember>& members, const std::vector<std::size_t>& offsets) {
    std::string cd;
    for (std::size_t i = 0; i < members.size(); ++i) {
        cd += "PK\x01\x02";
        put16(cd, 0x0314);
        put_fields(cd, members[i]);
        put16(cd, static_cast<std::uint16_t>(members[i].name.size()));
        put16(cd, 0);
        put16(cd, 0);
        put16(cd, 0);
        put16(cd, 0);
        put32(cd, 0);
        put32(cd, static_cast<std::uint32_t>(offsets[i]));
        cd += members[i].name;
    }
    std::string end = "PK\x05\x06";
    put16(end, 0);
    put16(end, 0);
    put16(end, static_cast<std::uint16_t>(members.size()));
    put16(end, static_cast<std::uint16_t>(members.size()));
    put32(end, static_cast<std::uint32_t>(cd.size()));
    put32(end, static_cast<std::uint32_t>(body.size()));
    put16(end, 0);
    return body + cd + end;
}
// Members laid out one after another, each with its (already compressed) data.
std::string zip_of(const std::vector<std::pair<ZipMember, std::string>>& members) {
    std::string body;
    std::vector<ZipMember> ms;
    std::vector<std::size_t> offsets;
    for (const auto& [m, data] : members) {
        offsets.push_back(body.size());
        ms.push_back(m);
        body += local_header(m) + data;
    }
    return finish_zip(body, ms, offsets);
}

std::uint32_t crc_of(const std::string& bytes, std::uint32_t crc = 0) {
    return static_cast<std::uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

// A non-final stored deflate block holding `data` (at most 65535 bytes).
std::string stored_block(const std::string& data, bool final = false) {
    REQUIRE(data.size() <= 0xffff);
    std::string out(1, final ? '\x01' : '\x00');
    put16(out, static_cast<std::uint16_t>(data.size()));
    put16(out, static_cast<std::uint16_t>(~data.size()));
    return out + data;
}

// Raw deflate of `zeros` zero bytes, ending on a byte boundary with no final block, so that
// copies can be chained: each copy inflates to `zeros` more zeros. zlib writes it, once.
std::string zero_blocks(std::size_t zeros) {
    z_stream z{};
    REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY) == Z_OK);
    const std::string in(zeros, '\0');
    std::string out(zeros / 100 + 4096, '\0');
    z.next_in = reinterpret_cast<const Bytef*>(in.data());
    z.avail_in = static_cast<uInt>(in.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    REQUIRE(deflate(&z, Z_FULL_FLUSH) == Z_OK);
    REQUIRE(z.avail_in == 0);
    out.resize(out.size() - z.avail_out);
    deflateEnd(&z);
    return out;
}
const std::string kFinalEmptyBlock("\x01\x00\x00\xff\xff", 5);

// An .npy header (format 1.0, 128 bytes) for a bool array of shape (n,).
std::string bool_npy_header(std::uint64_t n) {
    std::string dict = "{'descr': '|b1', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }";
    std::string out("\x93NUMPY\x01\x00", 8);
    const std::size_t total = 128;
    REQUIRE(10 + dict.size() + 1 <= total);
    dict.append(total - 10 - dict.size() - 1, ' ');
    dict += '\n';
    put16(out, static_cast<std::uint16_t>(dict.size()));
    return out + dict;
}

long peak_rss_kib() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}
// Resets the peak resident size to the current one; -1 where the kernel does not offer it.
long reset_peak_rss_kib() {
    std::ofstream clear("/proc/self/clear_refs");
    if (!clear) return -1;
    clear << "5";
    clear.close();
    return clear ? peak_rss_kib() : -1;
}

}  // namespace

// --- saving ---------------------------------------------------------------------------------

TEST_CASE("files: every writer refuses a folder or FIFO or socket or device node and leaves it alone", "[files]") {
    const bool tmpfile = GENERATE(true, false);
    TmpfileMode mode(tmpfile);
    TempDir dir;
    const std::vector<Special> targets = specials(dir);
    const std::vector<std::string> before = entries(dir.path);
    for (const Writer& w : writers()) {
        for (const Special& s : targets) {
            INFO(w.name << " to " << s.path << (tmpfile ? " (O_TMPFILE)" : " (named temporary)"));
            CHECK_THROWS_WITH(w.save(s.path), Catch::Contains(w.op + ": '" + s.path + "' " + s.kind +
                                                              ", not a regular file") &&
                                                  Catch::Contains("left as it is"));
            CHECK((lmode(s.path) & S_IFMT) == s.type);
        }
    }
    CHECK(entries(dir.path) == before);  // no temporaries, nothing replaced
    CHECK(entries(dir.path / "folder").empty());
}

TEST_CASE("files: a save follows a symbolic link and replaces the file it points to", "[files]") {
    const bool tmpfile = GENERATE(true, false);
    TmpfileMode mode(tmpfile);
    TempDir dir;
    fs::create_directories(dir.path / "real");
    fs::create_directories(dir.path / "links/deeper");
    for (const Writer& w : writers()) {
        INFO(w.name << (tmpfile ? " (O_TMPFILE)" : " (named temporary)"));
        const std::string real = dir / "real/file";
        spit(real, "old");
        ::chmod(real.c_str(), 0640);
        // Relative from another folder, absolute, and a chain of links across folders.
        fs::create_symlink("../real/file", dir.path / "links/relative");
        fs::create_symlink(real, dir.path / "links/absolute");
        fs::create_symlink("../relative", dir.path / "links/deeper/chain");
        for (const std::string link : {"links/relative", "links/absolute", "links/deeper/chain"}) {
            INFO(link);
            const std::string text = fs::read_symlink(dir.path / link).string();
            spit(real, "old");
            struct stat old_st {};
            REQUIRE(::stat(real.c_str(), &old_st) == 0);
            w.save(dir / link);
            CHECK(fs::is_symlink(dir.path / link));
            CHECK(fs::read_symlink(dir.path / link).string() == text);
            CHECK(w.wrote(real));
            struct stat st {};
            REQUIRE(::stat(real.c_str(), &st) == 0);
            CHECK((st.st_mode & 0777) == 0640);  // the replaced file's permissions are kept
            CHECK(st.st_ino != old_st.st_ino);   // replaced (renamed over), not written in place
        }
        CHECK(entries(dir.path / "real") == std::vector<std::string>{"file"});
        CHECK(entries(dir.path / "links") == std::vector<std::string>{"absolute", "deeper", "relative"});
        CHECK(entries(dir.path / "links/deeper") == std::vector<std::string>{"chain"});
        fs::remove(dir.path / "links/relative");
        fs::remove(dir.path / "links/absolute");
        fs::remove(dir.path / "links/deeper/chain");
    }
}

TEST_CASE("files: a dangling symbolic link gets its target created as numpy would", "[files]") {
    const bool tmpfile = GENERATE(true, false);
    TmpfileMode mode(tmpfile);
    TempDir dir;
    fs::create_directory(dir.path / "real");
    fs::create_symlink("real/new.npz", dir.path / "link.npz");
    const NamedTensors state = {{"w", ones({2})}};
    save_npz(dir / "link.npz", state);
    CHECK(fs::is_symlink(dir.path / "link.npz"));
    CHECK(fs::is_regular_file(dir.path / "real/new.npz"));
    CHECK(load_npz(dir / "link.npz")[0].second.to_vector<float>() == std::vector<float>{1, 1});
    CHECK(entries(dir.path / "real") == std::vector<std::string>{"new.npz"});

    // A link into a folder that does not exist: nothing can be created, and the message says where.
    fs::create_symlink("missing/x.npz", dir.path / "nowhere.npz");
    CHECK_THROWS_WITH(save_npz(dir / "nowhere.npz", state),
                      Catch::Contains("save_npz: cannot write '" + dir / "nowhere.npz" + "'") &&
                          Catch::Contains("symbolic link to 'missing/x.npz'") &&
                          Catch::Contains("'" + dir / "missing" + "' does not exist"));
}

TEST_CASE("files: symbolic link loops and links to folders or FIFOs or devices are refused", "[files]") {
    TempDir dir;
    const NamedTensors state = {{"w", ones({2})}};
    fs::create_symlink("self", dir.path / "self");
    fs::create_symlink("b", dir.path / "a");
    fs::create_symlink("a", dir.path / "b");
    for (const std::string name : {"self", "a"})
        CHECK_THROWS_WITH(save_npz(dir / name, state), Catch::Contains("'" + dir / name + "'") &&
                                                           Catch::Contains("more than 40 symbolic links"));
    // 40 links in a row are followed, 41 are not (as the kernel's own limit).
    spit(dir / "end", "old");
    std::string next = "end";
    for (int i = 1; i <= 41; ++i) {
        const std::string name = "hop" + std::to_string(i);
        fs::create_symlink(next, dir.path / name);
        next = name;
    }
    save_npz(dir / "hop40", state);
    CHECK(load_npz(dir / "end").size() == 1);
    CHECK_THROWS_WITH(save_npz(dir / "hop41", state), Catch::Contains("more than 40 symbolic links"));

    fs::create_directory(dir.path / "folder");
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0666) == 0);
    fs::create_symlink("folder", dir.path / "to_folder");
    fs::create_symlink("folder/", dir.path / "to_folder_slash");
    fs::create_symlink(dir / "fifo", dir.path / "to_fifo");
    // A device node of our own where we may make one (root): a failing test must never replace
    // the machine's /dev/null, which only root could.
    std::string device = "/dev/null";
    if (is_root()) {
        device = dir / "null";
        REQUIRE(::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0);
    }
    fs::create_symlink(device, dir.path / "to_null");
    CHECK_THROWS_WITH(save_npz(dir / "to_folder", state),
                      Catch::Contains("'" + dir / "to_folder" + "' (a symbolic link to '" + dir / "folder" +
                                      "') is a directory, not a regular file"));
    CHECK_THROWS_WITH(save_npz(dir / "to_folder_slash", state),
                      Catch::Contains("symbolic link to 'folder/', which names a folder"));
    CHECK_THROWS_WITH(save_npz(dir / "to_fifo", state), Catch::Contains("is a FIFO (named pipe), not a regular file"));
    CHECK_THROWS_WITH(save_npz(dir / "to_null", state),
                      Catch::Contains("(a symbolic link to '" + device + "') is a character device"));
    CHECK(fs::is_character_file(device));
    CHECK(fs::is_directory(dir.path / "folder"));
    CHECK(fs::is_fifo(dir.path / "fifo"));
    CHECK(fs::is_symlink(dir.path / "to_folder"));
}

TEST_CASE("files: relative and absolute paths and malformed ones", "[files]") {
    TempDir dir;
    const NamedTensors state = {{"w", ones({2})}};
    struct Cwd {
        fs::path saved = fs::current_path();
        ~Cwd() { fs::current_path(saved); }
    } cwd;
    fs::current_path(dir.path);
    fs::create_directory("sub");
    spit("file.txt", "x");

    save_npz("plain.npz", state);               // no folder part: the current folder
    save_npz("./sub/../dotted.npz", state);
    save_npz(dir / "sub/absolute.npz", state);
    CHECK(load_npz("plain.npz").size() == 1);
    CHECK(load_npz(dir / "dotted.npz").size() == 1);
    CHECK(load_npz("sub/absolute.npz").size() == 1);

    CHECK_THROWS_WITH(save_npz("", state), Catch::Contains("save_npz: the path is empty"));
    CHECK_THROWS_WITH(save_npz("sub/", state), Catch::Contains("'sub/' ends in '/'"));
    CHECK_THROWS_WITH(save_npz("/", state), Catch::Contains("'/' ends in '/'"));
    CHECK_THROWS_WITH(save_npz("plain.npz/", state), Catch::Contains("ends in '/'"));
    CHECK_THROWS_WITH(save_npz(".", state), Catch::Contains("'.' is a directory"));
    CHECK_THROWS_WITH(save_npz("sub/..", state), Catch::Contains("'sub/..' is a directory"));
    CHECK_THROWS_WITH(save_npz("missing/deeper/x.npz", state),
                      Catch::Contains("cannot write 'missing/deeper/x.npz'") &&
                          Catch::Contains("the folder 'missing/deeper' does not exist"));
    CHECK_THROWS_WITH(save_npz("file.txt/x.npz", state), Catch::Contains("'file.txt' is not a folder"));
    CHECK_THROWS_WITH(save_npz(std::string("a\0b.npz", 7), state), Catch::Contains("contains a NUL byte"));
    CHECK(entries(".") == std::vector<std::string>{"dotted.npz", "file.txt", "plain.npz", "sub"});
    CHECK(entries("sub") == std::vector<std::string>{"absolute.npz"});

    CHECK_THROWS_WITH(load_npz(""), Catch::Contains("load_npz: the path is empty"));
    CHECK_THROWS_WITH(load_npz("plain.npz/"), Catch::Contains("load_npz: cannot open 'plain.npz/'") &&
                                                  Catch::Contains("Not a directory"));
    CHECK_THROWS_WITH(load_npy(std::string("a\0b", 3)), Catch::Contains("contains a NUL byte"));
}

TEST_CASE("files: a name of NAME_MAX bytes saves and a longer one is refused clearly", "[files]") {
    const bool tmpfile = GENERATE(true, false);
    TmpfileMode mode(tmpfile);
    TempDir dir;
    const long name_max = ::pathconf(dir.path.c_str(), _PC_NAME_MAX);
    REQUIRE(name_max > 10);
    const std::string longest = std::string(static_cast<std::size_t>(name_max) - 4, 'n') + ".npz";
    const std::string too_long = "x" + longest;
    for (const Writer& w : writers()) {
        INFO(w.name);
        w.save(dir / longest);
        CHECK(w.wrote(dir / longest));
        w.save(dir / longest);  // and replaces it
        CHECK(w.wrote(dir / longest));
        CHECK_THROWS_WITH(w.save(dir / too_long),
                          Catch::Contains(w.op + ": cannot write '" + dir / too_long + "'") &&
                              Catch::Contains(std::to_string(too_long.size()) + " bytes, longer than") &&
                              Catch::Contains("(" + std::to_string(name_max) + " bytes)"));
        CHECK(entries(dir.path) == std::vector<std::string>{longest});
    }
    CHECK_THROWS_WITH(load_npz(dir / too_long), Catch::Contains(too_long) && Catch::Contains("too long"));
}

TEST_CASE("files: a name that is not UTF-8 saves and loads", "[files]") {
    TempDir dir;
    const std::string name = dir / "\xff\xfe-latin1-\xe9t\xe9.npz";
    save_npz(name, {{"w", ones({2})}});
    CHECK(load_npz(name)[0].first == "w");
    CHECK(entries(dir.path).size() == 1);
}

TEST_CASE("files: a read-only folder or file keeps the old file and says why", "[files]") {
    TempDir dir;
    fs::create_directory(dir.path / "ro");
    fs::create_directory(dir.path / "rw");
    const NamedTensors old_state = {{"w", ones({2})}};
    save_npz(dir / "ro/model.npz", old_state);
    save_npz(dir / "rw/model.npz", old_state);
    const std::string old_bytes = slurp(dir / "ro/model.npz");
    ::chmod((dir / "ro").c_str(), 0555);
    ::chmod((dir / "ro/model.npz").c_str(), 0666);
    ::chmod((dir / "rw").c_str(), 0777);
    ::chmod((dir / "rw/model.npz").c_str(), 0444);
    // Root writes anywhere: the attempt runs as nobody, in a child, where this process is root.
    for (const bool tmpfile : {true, false}) {
        auto attempt = [&](const std::string& path) {
            return in_child(
                       [&] {
                           detail::set_atomic_file_tmpfile(tmpfile);
                           save_npz(path, {{"w", zeros({5})}});
                           return std::string("saved");
                       },
                       20, is_root())
                .message;
        };
        INFO((tmpfile ? "O_TMPFILE" : "named temporary"));
        CHECK_THAT(attempt(dir / "ro/model.npz"), Catch::Contains("save_npz: cannot write '" + dir / "ro/model.npz" + "'") &&
                                                      Catch::Contains("cannot create a temporary file in '" + dir / "ro" + "'") &&
                                                      Catch::Contains("Permission denied"));
        CHECK_THAT(attempt(dir / "rw/model.npz"), Catch::Contains("'" + dir / "rw/model.npz" + "'") &&
                                                      Catch::Contains("read-only for this user"));
        CHECK(slurp(dir / "ro/model.npz") == old_bytes);
        CHECK(slurp(dir / "rw/model.npz") == old_bytes);
        CHECK(entries(dir.path / "ro") == std::vector<std::string>{"model.npz"});
        CHECK(entries(dir.path / "rw") == std::vector<std::string>{"model.npz"});
    }
}

TEST_CASE("files: a full disk keeps the old file and leaves no temporary", "[files]") {
    const bool tmpfile = GENERATE(true, false);
    TmpfileMode mode(tmpfile);
    TempDir dir;
    const std::string target = dir / "model.npz";
    save_npz(target, {{"w", ones({4})}});
    const std::string old_bytes = slurp(target);
    std::string message;
    {
        const FileSizeLimit full_disk(4096);
        try {
            save_npz(target, {{"big", zeros({1 << 16})}});
        } catch (const Error& e) {
            message = e.what();
        }
    }
    CHECK_THAT(message, Catch::Contains("save_npz: cannot write '" + target + "': write failed") &&
                            Catch::Contains("the previous file, if any, is unchanged"));
    CHECK(slurp(target) == old_bytes);
    CHECK(entries(dir.path) == std::vector<std::string>{"model.npz"});
}

TEST_CASE("files: the temporary is unnamed with O_TMPFILE and short and named otherwise", "[files]") {
    TempDir dir;
    const std::string target = dir / (std::string(200, 'm') + ".npz");
    {
        TmpfileMode mode(true);
        AtomicFile f(target, "test");
        f.write("abc");
        CHECK(entries(dir.path).empty());  // nothing to leave behind while it is written
        f.commit();
        CHECK(entries(dir.path).size() == 1);
        CHECK(slurp(target) == "abc");
    }
    {
        TmpfileMode mode(false);
        AtomicFile f(target, "test");
        f.write("def");
        const std::vector<std::string> during = entries(dir.path);
        REQUIRE(during.size() == 2);
        const std::string temp = during[0] == fs::path(target).filename() ? during[1] : during[0];
        CHECK(temp.rfind(std::string(kTempPrefix), 0) == 0);
        CHECK(temp.size() < 64);  // whatever the destination's name
        CHECK(temp.find("-" + std::to_string(::getpid()) + "-") != std::string::npos);
        f.commit();
        CHECK(entries(dir.path).size() == 1);
        CHECK(slurp(target) == "def");
    }
    // Abandoned before commit: the destination keeps its content, nothing else stays.
    for (const bool tmpfile : {true, false}) {
        TmpfileMode mode(tmpfile);
        {
            AtomicFile f(target, "test");
            f.write("never");
        }
        CHECK(slurp(target) == "def");
        CHECK(entries(dir.path).size() == 1);
    }
}

TEST_CASE("files: a destination replaced by a folder or FIFO during the write is left alone", "[files]") {
    const bool tmpfile = GENERATE(true, false);
    TmpfileMode mode(tmpfile);
    TempDir dir;
    const std::string target = dir / "out.npz";
    {
        spit(target, "old");
        AtomicFile f(target, "save_npz");
        f.write("new");
        fs::remove(target);
        fs::create_directory(target);
        CHECK_THROWS_WITH(f.commit(), Catch::Contains("save_npz: '" + target + "' became a directory while the new "
                                                      "content was written"));
        CHECK(fs::is_directory(target));
        CHECK(entries(dir.path) == std::vector<std::string>{"out.npz"});
        fs::remove(target);
    }
    {
        AtomicFile f(target, "save_npz");
        f.write("new");
        REQUIRE(::mkfifo(target.c_str(), 0666) == 0);
        CHECK_THROWS_WITH(f.commit(), Catch::Contains("became a FIFO"));
        CHECK(fs::is_fifo(target));
        CHECK(entries(dir.path) == std::vector<std::string>{"out.npz"});
    }
}

TEST_CASE("files: a new file gets the umask's permissions and a replaced one keeps its own", "[files]") {
    const bool tmpfile = GENERATE(true, false);
    TmpfileMode mode(tmpfile);
    TempDir dir;
    const mode_t old_mask = ::umask(027);
    save_npz(dir / "new.npz", {{"w", ones({1})}});
    ::umask(old_mask);
    CHECK((lmode(dir / "new.npz") & 0777) == 0640);
    ::chmod((dir / "new.npz").c_str(), 0600);
    save_npz(dir / "new.npz", {{"w", ones({2})}});
    CHECK((lmode(dir / "new.npz") & 0777) == 0600);
    CHECK(load_npz(dir / "new.npz")[0].second.numel() == 2);
}

TEST_CASE("files: a writer killed mid-write leaves no temporary behind", "[files]") {
    const bool tmpfile = GENERATE(true, false);
    TmpfileMode mode(tmpfile);
    TempDir dir;
    const std::string target = dir / "ckpt.npz";
    Generator gen(7);
    const NamedTensors previous = {{"w", randn({1 << 22}, kFloat32, gen)}};
    const NamedTensors next = {{"w", randn({1 << 22}, kFloat32, gen)}};
    save_npz(target, previous);
    const std::uintmax_t whole = fs::file_size(target);
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> delay_ms(5, 120);
    int unnamed_hits = 0, named_hits = 0;
    // Five rounds, and more (up to 40) until a kill has landed mid-write on the kind of
    // temporary meant: on a fast disk a random moment often falls in fsync or between saves.
    const auto hits = [&] { return tmpfile ? unnamed_hits : named_hits; };
    for (int round = 0; round < 5 || (hits() == 0 && round < 40); ++round) {
        INFO("round " << round << (tmpfile ? " (O_TMPFILE)" : " (named temporary)"));
        const pid_t child = stopped_rewriter(target, next, std::chrono::milliseconds(delay_ms(rng)));
        int status = 0;
        // What the stopped writer has open in the folder: an unnamed O_TMPFILE file shows as
        // "<dir>/#<inode> (deleted)", a named temporary under its name.
        // Whether the writer was still writing (its temporary shorter than a whole archive)
        // tells a kill mid-write from one in the instant between naming and renaming.
        bool unnamed = false, named = false, writing = false;
        for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(child) + "/fd")) {
            std::error_code ec;
            const std::string open = fs::read_symlink(e.path(), ec).string();
            if (ec || open.rfind(dir.path.string() + "/", 0) != 0) continue;
            if (open.find("(deleted)") != std::string::npos) unnamed = true;
            if (open.find(std::string(kTempPrefix)) != std::string::npos) named = true;
            const auto size = fs::file_size(e.path(), ec);  // follows the link to the open file
            if (!ec && size < whole) writing = true;
        }
        REQUIRE(::kill(child, SIGKILL) == 0);
        REQUIRE(::waitpid(child, &status, 0) == child);
        REQUIRE(WIFSIGNALED(status));
        if (unnamed && writing) {
            ++unnamed_hits;
            CHECK(entries(dir.path) == std::vector<std::string>{"ckpt.npz"});  // nothing to sweep at all
        }
        if (named) {
            ++named_hits;
            CHECK(entries(dir.path).size() == 2);  // the dead writer's temporary, until the next save
        }
        const NamedTensors loaded = load_npz(target);
        CHECK((loaded[0].second.to_vector<float>() == previous[0].second.to_vector<float>() ||
               loaded[0].second.to_vector<float>() == next[0].second.to_vector<float>()));
        // The next writer in the folder succeeds and sweeps what the dead one left.
        save_npz(target, previous);
        CHECK(entries(dir.path) == std::vector<std::string>{"ckpt.npz"});
        CHECK(load_npz(target)[0].second.to_vector<float>() == previous[0].second.to_vector<float>());
    }
    // The test means something only if kills landed mid-write, on the kind of temporary meant.
    CHECK(hits() > 0);
}

TEST_CASE("files: stale temporaries of dead writers are swept and live ones kept", "[files]") {
    TmpfileMode mode(false);
    TempDir dir;
    // A live writer, stopped half-way with its named temporary open.
    const pid_t live = ::fork();
    REQUIRE(live >= 0);
    if (live == 0) {
        try {
            AtomicFile f(dir / "live.npz", "test");
            f.write("half");
            ::raise(SIGSTOP);
        } catch (...) {
        }
        ::_exit(0);
    }
    int status = 0;
    REQUIRE(::waitpid(live, &status, WUNTRACED) == live);
    REQUIRE(WIFSTOPPED(status));
    std::vector<std::string> names = entries(dir.path);
    REQUIRE(names.size() == 1);
    const std::string live_temp = names[0];
    // ".xgrad-tmp-<host>-<pid>-...": the prefix that marks this host's temporaries.
    const std::string host_prefix = live_temp.substr(0, kTempPrefix.size() + 9);
    REQUIRE(live_temp.rfind(host_prefix + std::to_string(live) + "-", 0) == 0);

    // A pid that surely ran once and is gone.
    const pid_t gone = ::fork();
    REQUIRE(gone >= 0);
    if (gone == 0) ::_exit(0);
    REQUIRE(::waitpid(gone, &status, 0) == gone);
    const std::string dead_file = host_prefix + std::to_string(gone) + "-0-0";
    const std::string dead_folder = host_prefix + std::to_string(gone) + "-1-0";
    const std::string init_file = host_prefix + "1-0-0";              // pid 1 runs
    const std::string other_host = std::string(kTempPrefix) + "zzzzzzzz-" + std::to_string(gone) + "-0-0";
    spit(dir / dead_file, "litter");
    fs::create_directory(dir.path / dead_folder);
    spit(dir / init_file, "keep");
    spit(dir / other_host, "keep");
    spit(dir / "notes.txt", "keep");

    save_npz(dir / "model.npz", {{"w", ones({1})}});
    names = entries(dir.path);
    CHECK(std::find(names.begin(), names.end(), dead_file) == names.end());
    for (const std::string& kept : {live_temp, dead_folder, init_file, other_host, std::string("notes.txt")})
        CHECK(std::find(names.begin(), names.end(), kept) != names.end());

    // Once the live writer dies, its temporary goes with the next save.
    REQUIRE(::kill(live, SIGKILL) == 0);
    REQUIRE(::waitpid(live, &status, 0) == live);
    save_npz(dir / "model.npz", {{"w", ones({1})}});
    names = entries(dir.path);
    CHECK(std::find(names.begin(), names.end(), live_temp) == names.end());
    CHECK(names.size() == 5);
}

// --- loading --------------------------------------------------------------------------------

TEST_CASE("files: loading refuses FIFOs and devices and folders and sockets at once", "[files]") {
    TempDir dir;
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0666) == 0);
    fs::create_directory(dir.path / "folder");
    make_socket(dir / "socket");
    fs::create_symlink(dir / "fifo", dir.path / "to_fifo");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {dir / "fifo", "is a FIFO (named pipe), not a regular file"},
        {dir / "to_fifo", "is a FIFO (named pipe), not a regular file"},
        {"/dev/zero", "is a character device, not a regular file"},
        {"/dev/urandom", "is a character device, not a regular file"},
        {"/dev/null", "is a character device, not a regular file"},
        {dir / "folder", "is a directory, not a regular file"},
        {dir / "socket", "is a socket, not a regular file"},
    };
    for (const auto& [path, why] : cases) {
        for (const std::string op : {"load_npz", "load_npy", "read_file"}) {
            INFO(op << " of " << path);
            const ChildOutcome r = in_child([&, op = op, path = path] {
                if (op == "load_npz") load_npz(path);
                else if (op == "load_npy") load_npy(path);
                else read_file(path, "read_file");
                return std::string("loaded");
            });
            CHECK(r.signal == 0);  // SIGALRM: it blocked; SIGKILL/SIGSEGV: it read without bound
            CHECK_THAT(r.message, Catch::Contains(op + ": '" + path + "' " + why));
        }
    }
    CHECK(fs::is_fifo(dir.path / "fifo"));
}

TEST_CASE("files: loading reads no more than the file's size", "[files]") {
    // /proc's files say 0 bytes and hold more: not a file whose size bounds the read.
    if (!fs::exists("/proc/self/status")) {
        WARN("no /proc: skipped");
        return;
    }
    CHECK_THROWS_WITH(read_file("/proc/self/status", "load_npz"),
                      Catch::Contains("'/proc/self/status' holds more than its size of 0 bytes"));
    TempDir dir;
    spit(dir / "empty.npz", "");
    CHECK_THROWS_WITH(load_npz(dir / "empty.npz"), Catch::Contains("empty.npz") && Catch::Contains("empty (0 bytes)"));
}

TEST_CASE("files: a truncated npz on disk is refused with its name", "[files]") {
    TempDir dir;
    const std::string whole = npz_bytes({{"a", ones({100})}, {"b", zeros({3})}});
    for (std::size_t cut : {std::size_t{1}, std::size_t{30}, whole.size() / 2, whole.size() - 1}) {
        INFO(cut);
        spit(dir / "cut.npz", whole.substr(0, cut));
        CHECK_THROWS_WITH(load_npz(dir / "cut.npz"), Catch::Contains("load_npz: '" + dir / "cut.npz" + "'"));
    }
}

// --- archives built to exhaust memory ---------------------------------------------------------

TEST_CASE("files: overlapping npz members are refused before inflating", "[files]") {
    // The overlapped zip bomb (Fifield, 2019), with every member a valid .npy of bools: member
    // i's stream is a stored block holding its .npy header, a stored block that quotes member
    // i+1's local header, then member i+1's stream; the last ends in one shared run of zeros.
    // Each member alone is sound; together they inflate the shared run once per member.
    const int n = 8;
    const std::size_t zeros_per_block = std::size_t{1} << 20;
    const std::string block = zero_blocks(zeros_per_block);
    const int blocks = 16;  // 16 MiB of zeros shared by every member
    std::string kernel;
    for (int i = 0; i < blocks; ++i) kernel += block;
    kernel += kFinalEmptyBlock;
    const std::uint64_t zeros = zeros_per_block * blocks;

    const std::size_t header = 128, quote_overhead = 5, local_size = 30 + 6;  // names "mI.npy"
    // Uncompressed and compressed sizes, from the last member (which quotes nothing) back.
    std::vector<std::uint64_t> usize(n), csize(n);
    for (int i = n - 1; i >= 0; --i) {
        const bool last = i == n - 1;
        usize[i] = header + (last ? zeros : local_size + (usize[i + 1]));
        csize[i] = quote_overhead + header + (last ? kernel.size() : quote_overhead + local_size + csize[i + 1]);
    }
    // CRCs need the bytes of later members' local headers, so build from the back too.
    std::vector<ZipMember> members(n);
    std::vector<std::string> locals(n);
    std::string zeros_crc_input(zeros_per_block, '\0');
    std::uint32_t zeros_crc = 0;
    for (int i = 0; i < blocks; ++i) zeros_crc = crc_of(zeros_crc_input, zeros_crc);
    std::vector<std::uint32_t> tail_crc(n);  // CRC of member i's output after its own .npy header
    std::vector<std::string> headers(n);
    for (int i = n - 1; i >= 0; --i) {
        headers[i] = bool_npy_header(usize[i] - header);
        members[i] = {"m" + std::to_string(i) + ".npy", 8, 0, static_cast<std::uint32_t>(csize[i]),
                      static_cast<std::uint32_t>(usize[i])};
        // output_i = header_i + local_{i+1} + output_{i+1}, and the last is header + zeros.
        std::uint32_t crc = crc_of(headers[i]);
        if (i == n - 1) {
            crc = static_cast<std::uint32_t>(crc32_combine(crc, zeros_crc, static_cast<z_off_t>(zeros)));
        } else {
            crc = crc_of(locals[i + 1], crc);
            crc = static_cast<std::uint32_t>(crc32_combine(crc, members[i + 1].crc, static_cast<z_off_t>(usize[i + 1])));
        }
        members[i].crc = crc;
        locals[i] = local_header(members[i]);
        REQUIRE(locals[i].size() == local_size);
    }
    std::string body = locals[0];
    std::vector<std::size_t> offsets(n, 0);
    for (int i = 0; i < n; ++i) {
        body += stored_block(headers[i]);
        if (i + 1 < n) {
            // Local header i+1 sits inside the stored block of member i that quotes it.
            offsets[i + 1] = body.size() + quote_overhead;
            body += stored_block(locals[i + 1]);
        }
    }
    body += kernel;
    for (int i = 0; i < n; ++i) REQUIRE(body.compare(offsets[i], 4, "PK\x03\x04") == 0);
    const std::string bomb = finish_zip(body, members, offsets);

    // Each member on its own is sound (so what fails below fails only for the overlap).
    for (int i : {0, n - 1}) {
        INFO("member " << i << " alone");
        const std::string alone = finish_zip(bomb.substr(offsets[i], local_size + csize[i]), {members[i]}, {0});
        const NamedTensors one = parse_npz(alone);
        REQUIRE(one.size() == 1);
        CHECK(one[0].second.numel() == usize[i] - header);
    }
    const long before = reset_peak_rss_kib();
    CHECK_THROWS_WITH(parse_npz(bomb, "overlap.npz"),
                      Catch::Contains("overlap.npz: corrupt: member 'm") && Catch::Contains("overlaps member 'm"));
    if (before >= 0) CHECK(peak_rss_kib() - before < 8 * 1024);  // the 16 MiB run was never inflated
}

TEST_CASE("files: a deflate bomb built with zlib is refused without inflating it", "[files]") {
    // 4 GiB of zeros from about 4 MiB: 4096 copies of one flushed deflate block of 1 MiB of zeros.
    const std::string block = zero_blocks(std::size_t{1} << 20);
    std::string run;
    run.reserve(block.size() * 4096 + 8);
    for (int i = 0; i < 4096; ++i) run += block;
    run += kFinalEmptyBlock;
    // An honest 16-element .npy first, then the run: the member declares the 144 bytes of the
    // .npy, so its stream goes on far past them.
    const std::string npy = bool_npy_header(16) + std::string(16, '\x01');
    const std::string stream = stored_block(npy) + run;
    const auto csize = static_cast<std::uint32_t>(stream.size());
    const std::string short_claim = zip_of({{{"bomb.npy", 8, crc_of(npy), csize, 144}, stream}});
    // The same stream declaring nearly 4 GiB, which its size allows: the .npy header disagrees.
    const std::string inflated_claim = zip_of({{{"bomb.npy", 8, 0, csize, 0xf0000000u}, stream}});
    // A declaration its compressed size cannot reach: refused from the directory alone.
    const std::string unreachable = zip_of({{{"bomb.npy", 8, 0, 1000, 0xf0000000u}, std::string(1000, '\0')}});

    const long before = reset_peak_rss_kib();
    CHECK_THROWS_WITH(parse_npz(short_claim, "bomb.npz"),
                      Catch::Contains("bomb.npz: member 'bomb.npy'") && Catch::Contains("more than the 144 bytes"));
    CHECK_THROWS_WITH(parse_npz(inflated_claim, "bomb.npz"),
                      Catch::Contains("'bomb.npy'") && Catch::Contains("inflates to 4026531840 bytes") &&
                          Catch::Contains("makes it 144 bytes") && Catch::Contains("refused before inflating"));
    CHECK_THROWS_WITH(parse_npz(unreachable, "bomb.npz"),
                      Catch::Contains("'bomb.npy'") && Catch::Contains("more than deflate can expand them"));
    if (before >= 0) CHECK(peak_rss_kib() - before < 8 * 1024);  // none of the 4 GiB was made
}

#if defined(__SANITIZE_ADDRESS__)
#define XGRAD_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XGRAD_TEST_ASAN 1
#endif
#endif

TEST_CASE("files: a deflate bomb loaded under a memory limit names the file and the member",
          "[files][adversarial][call_errors]") {
#ifdef XGRAD_TEST_ASAN
    WARN("skipped under AddressSanitizer, which reserves terabytes of address space: no RLIMIT_AS fits it");
#else
    // in_child limits the address space to 2 GiB. Members that are honest (header, sizes and
    // CRC agree) and that deflate squeezes 1000:1: one whose inflated bytes do not fit in what
    // is left, and one whose inflated bytes fit but whose array, a second copy, does not.
    const std::uint64_t limit = std::uint64_t{2} << 30, used = address_space_bytes();
    if (used + (std::uint64_t{256} << 20) > limit) {
        WARN("the test process already maps " << used << " bytes: no room under the 2 GiB limit");
        return;
    }
    const std::uint64_t left_mib = (limit - used) >> 20;
    const std::string block = zero_blocks(std::size_t{1} << 20), zeros_mib(std::size_t{1} << 20, '\0');
    auto bomb = [&](std::uint64_t mib) {
        const std::uint64_t n = mib << 20;
        const std::string header = bool_npy_header(n);
        std::uint32_t crc = crc_of(header);
        std::string stream = stored_block(header);
        for (std::uint64_t i = 0; i < mib; ++i) {
            stream += block;
            crc = crc_of(zeros_mib, crc);
        }
        stream += kFinalEmptyBlock;
        const ZipMember m{"weights.npy", 8, crc, static_cast<std::uint32_t>(stream.size()),
                          static_cast<std::uint32_t>(header.size() + n)};
        return zip_of({{m, stream}});
    };
    TempDir dir;
    struct Case {
        const char* what;
        std::uint64_t mib;
    };
    for (const Case& c : {Case{"the inflated bytes do not fit", left_mib * 5 / 4},
                          Case{"the array, a second copy, does not fit", left_mib * 3 / 5}}) {
        CAPTURE(c.what, c.mib);
        const std::string path = dir / "bomb.npz";
        write_file_atomic(path, bomb(c.mib), "test");
        const ChildOutcome r = in_child([&] {
            const NamedTensors loaded = load_npz(path);
            return fmt::format("ok: {} elements", loaded.at(0).second.numel());
        });
        CHECK(r.signal == 0);
        CHECK_THAT(r.message, Catch::StartsWith("load_npz: '" + path + "'") && Catch::Contains("'weights.npy'") &&
                                  Catch::Contains(std::to_string((c.mib << 20) + 128) + " bytes"));
        // Without the limit the archive is sound: the refusal is the memory's, not the file's.
    }
#endif
}

TEST_CASE("files: an archive needing more than the machine's memory is refused up front", "[files]") {
    const std::uint64_t memory = static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                                 static_cast<std::uint64_t>(::sysconf(_SC_PAGE_SIZE));
    const std::uint32_t each = 0xf0000000u;  // the most one member may declare without zip64
    const std::uint64_t count = memory / each + 1;
    if (count > 40) {
        WARN("more than 160 GB of memory: the archive this needs is too large for a test");
        return;
    }
    // Members whose compressed size could honestly reach their declared size; their bytes are
    // never looked at, since the sum is refused first.
    const std::uint32_t csize = each / 1032 + 1;
    std::vector<std::pair<ZipMember, std::string>> members;
    for (std::uint64_t i = 0; i < count; ++i)
        members.push_back({{"m" + std::to_string(i) + ".npy", 8, 0, csize, each}, std::string(csize, '\0')});
    CHECK_THROWS_WITH(parse_npz(zip_of(members), "huge.npz"),
                      Catch::Contains("huge.npz: its arrays need " + std::to_string(count * each) + " bytes in all") &&
                          Catch::Contains("more than this machine's") && Catch::Contains("before inflating anything"));
}

TEST_CASE("files: npy shapes that overflow or are absurd or negative are refused without allocating", "[files]") {
    auto npy = [](const std::string& shape) {
        std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
        dict.append(118 - dict.size(), ' ');
        dict += '\n';
        std::string out("\x93NUMPY\x01\x00", 8);
        put16(out, static_cast<std::uint16_t>(dict.size()));
        return out + dict + std::string(16, '\0');
    };
    CHECK_THROWS_WITH(parse_npy(npy("(4294967296, 4294967296)"), "x.npy"),
                      Catch::Contains("x.npy: shape (4294967296, 4294967296) is too large"));
    CHECK_THROWS_WITH(parse_npy(npy("(3, 6148914691236517206)"), "x.npy"), Catch::Contains("too large"));
    CHECK_THROWS_WITH(parse_npy(npy("(99999999999999999999,)"), "x.npy"), Catch::Contains("does not fit in 64 bits"));
    CHECK_THROWS_WITH(parse_npy(npy("(-4,)"), "x.npy"), Catch::Contains("expected a non-negative integer"));
    CHECK_THROWS_WITH(parse_npy(npy("(1099511627776,)"), "x.npy"),
                      Catch::Contains("x.npy: truncated") && Catch::Contains("needs 4398046511104 bytes"));
    // Inside an archive, deflated: the declared size disagrees with the absurd shape at once.
    const std::string absurd = npy("(1099511627776,)");
    const std::string stream = stored_block(absurd, true);
    CHECK_THROWS_WITH(parse_npz(zip_of({{{"a.npy", 8, crc_of(absurd), static_cast<std::uint32_t>(stream.size()),
                                          static_cast<std::uint32_t>(absurd.size())},
                                         stream}}),
                                "a.npz"),
                      Catch::Contains("a.npz: member 'a.npy'") && Catch::Contains("refused before inflating"));
}

TEST_CASE("save_npz refuses array names that would unzip outside the folder", "[files]") {
    const std::string dir = fmt::format("/tmp/xgrad-npz-names-{}", ::getpid());
    ::mkdir(dir.c_str(), 0755);
    const std::string path = dir + "/names.npz";
    for (const char* bad : {"../evil", "a/../../evil", "/etc/evil", "a\\b", "a/../b/../../c"}) {
        INFO(bad);
        CHECK_THROWS_WITH(save_npz(path, {{bad, xgrad::ones({1})}}), Catch::Contains("would unzip outside"));
    }
    CHECK_NOTHROW(save_npz(path, {{"a/b", xgrad::ones({1})}, {"..a", xgrad::ones({1})}, {"a..b", xgrad::ones({1})}}));
    CHECK(load_npz(path).size() == 3);
    std::remove(path.c_str());
    ::rmdir(dir.c_str());
}
