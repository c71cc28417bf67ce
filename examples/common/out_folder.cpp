#include "out_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/io/atomic_file.hpp"

namespace xgrad::examples {

namespace fs = std::filesystem;

namespace {

std::string kind_of(fs::file_type type) {
    switch (type) {
        case fs::file_type::regular: return "a file";
        case fs::file_type::directory: return "a folder";
        case fs::file_type::symlink: return "a symbolic link";
        case fs::file_type::block: return "a block device";
        case fs::file_type::character: return "a character device";
        case fs::file_type::fifo: return "a FIFO";
        case fs::file_type::socket: return "a socket";
        default: return "not a file or folder";
    }
}

bool same_file(int fd, const std::string& path) {
    struct stat mine {}, now {};
    return ::fstat(fd, &mine) == 0 && ::stat(path.c_str(), &now) == 0 && mine.st_dev == now.st_dev &&
           mine.st_ino == now.st_ino;
}

// Who holds the lock, as the holder wrote it. A holder writes it just after taking the lock, so
// an empty file is given a moment; the text is the holder's, so only printable bytes are kept.
std::string holder_of(int fd) {
    char buffer[256];
    ssize_t n = 0;
    for (int tries = 0; tries < 100; ++tries) {
        n = ::pread(fd, buffer, sizeof buffer, 0);
        if (n != 0) break;
        const timespec pause{0, 2'000'000};
        ::nanosleep(&pause, nullptr);
    }
    std::string text;
    for (ssize_t i = 0; i < n; ++i)
        if (buffer[i] >= 0x20 && buffer[i] < 0x7f) text += buffer[i];
    return text.empty() ? "its process id not yet recorded" : text;
}

std::string this_run() {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
    return fmt::format("{}, process {} on host {}", program_invocation_short_name, ::getpid(), host);
}

// The checks prepare_out_folder and check_out_folder share, in the order that lets the lock
// come before anything is looked at in the folder: returns the outputs that are there.
std::vector<std::string> check(const std::string& out, const std::vector<std::string>& outputs, Start start,
                               const std::string& checkpoint, OutFolder* lock) {
    if (out.empty()) throw Error("--out: expected a folder, got ''");
    std::error_code ec;
    const fs::file_status status = fs::status(out, ec);
    if (fs::exists(status) && !fs::is_directory(status))
        throw Error(fmt::format("--out '{}': expected a folder, but it is {}", out, kind_of(status.type())));
    const bool resumable = !checkpoint.empty();
    const std::string checkpoint_path = out + "/" + checkpoint;
    const auto no_checkpoint = [&] {
        return Error(fmt::format("--resume: expected a checkpoint at '{}', found none (start without --resume for "
                                 "a fresh run)", checkpoint_path));
    };
    if (start == Start::resume) {
        if (!resumable) throw Error("--resume: this program writes no checkpoint to resume from");
        if (!fs::exists(status)) throw no_checkpoint();  // and the folder is not created for it
    }
    if (!fs::exists(status)) {
        // status() fails for a path under a file or an unreadable folder: create_directories says why.
        fs::create_directories(out, ec);
        if (ec) throw Error(fmt::format("--out '{}': cannot create the folder: {}", out, ec.message()));
    }
    if (lock) *lock = lock_out_folder(out);
    // Writable? Create a file in it the way every output is written, then drop it.
    { const AtomicFile probe(out + "/" + (outputs.empty() ? std::string("output") : outputs.front()), "--out"); }

    std::vector<std::string> present;
    for (const std::string& name : outputs) {
        const std::string path = out + "/" + name;
        const fs::file_status s = fs::symlink_status(path, ec);
        if (!fs::exists(s)) continue;
        if (!fs::is_regular_file(s))
            throw Error(fmt::format("--out '{}': expected '{}' to be a file this run writes, but it is {} "
                                    "(move it away)", out, path, kind_of(s.type())));
        present.push_back(name);
    }
    if (start == Start::resume && !fs::exists(fs::symlink_status(checkpoint_path, ec))) throw no_checkpoint();
    if (start == Start::fresh && !present.empty())
        throw Error(fmt::format("--out '{}' already holds an earlier run ({}): pass {}--overwrite to replace "
                                "it, or choose another --out", out, fmt::join(present, ", "),
                                resumable ? "--resume to continue it, " : ""));
    return present;
}

}  // namespace

Start start_from_flags(bool resume, bool overwrite) {
    if (resume && overwrite)
        throw Error("--resume and --overwrite: expected at most one (--resume continues the run in --out, "
                    "--overwrite replaces it), got both");
    return resume ? Start::resume : overwrite ? Start::overwrite : Start::fresh;
}

OutFolder::OutFolder(OutFolder&& other) noexcept
    : m_fd(std::exchange(other.m_fd, -1)), m_owner(other.m_owner), m_lock_path(std::move(other.m_lock_path)) {}

OutFolder& OutFolder::operator=(OutFolder&& other) noexcept {
    if (this != &other) {
        release();
        m_fd = std::exchange(other.m_fd, -1);
        m_owner = other.m_owner;
        m_lock_path = std::move(other.m_lock_path);
    }
    return *this;
}

OutFolder::~OutFolder() { release(); }

void OutFolder::release() noexcept {
    if (m_fd < 0) return;
    // Removed while still locked, and only by the process that took it (a forked child leaving
    // would otherwise take the file from under its parent). A run that opened the file just
    // before finds, once it gets the lock, that the path no longer names it, and starts again.
    if (::getpid() == m_owner && same_file(m_fd, m_lock_path)) ::unlink(m_lock_path.c_str());
    ::close(m_fd);
    m_fd = -1;
}

OutFolder lock_out_folder(const std::string& out) {
    const std::string path = out + "/" + kOutLockName;
    // A few rounds at most: each one lost means another run released the folder meanwhile.
    for (int round = 0; round < 100; ++round) {
        // Not through a symbolic link, and without waiting for a writer should it be a FIFO.
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
        if (fd < 0 && errno == ELOOP)
            throw Error(fmt::format("--out '{}': expected '{}' to be the lock file runs keep there, but it is a "
                                    "symbolic link (move it away)", out, path));
        if (fd < 0)
            throw Error(fmt::format("--out '{}': cannot create the lock file '{}' that keeps other runs out: {}", out,
                                    path, std::strerror(errno)));
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            ::close(fd);
            throw Error(fmt::format("--out '{}': expected '{}' to be the lock file runs keep there, but it is not a "
                                    "regular file (move it away)", out, path));
        }
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int error = errno;
            const std::string holder = error == EWOULDBLOCK ? holder_of(fd) : "";
            ::close(fd);
            if (error == EWOULDBLOCK)
                throw Error(fmt::format("--out '{}' is in use by another run ({}): two runs in one folder would mix "
                                        "their files; wait for it to end, or choose another --out", out, holder));
            throw Error(fmt::format("--out '{}': cannot lock '{}': {}", out, path, std::strerror(error)));
        }
        if (!same_file(fd, path)) {  // the run before removed it as we opened it
            ::close(fd);
            continue;
        }
        OutFolder folder;
        folder.m_fd = fd;
        folder.m_owner = ::getpid();
        folder.m_lock_path = path;
        const std::string record = this_run() + "\n";
        if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, record.data(), record.size(), 0) != ssize_t(record.size()))
            throw Error(fmt::format("--out '{}': cannot write the lock file '{}': {}", out, path,
                                    std::strerror(errno)));
        return folder;
    }
    throw Error(fmt::format("--out '{}': cannot lock '{}': other runs keep taking and releasing it", out, path));
}

OutFolder prepare_out_folder(const std::string& out, const std::vector<std::string>& outputs, Start start,
                             const std::string& checkpoint) {
    OutFolder folder;
    const std::vector<std::string> present = check(out, outputs, start, checkpoint, &folder);
    if (start == Start::overwrite)
        for (const std::string& name : present) {
            const std::string path = out + "/" + name;
            std::error_code ec;
            if (!fs::remove(path, ec) && ec)
                throw Error(fmt::format("--overwrite: cannot remove '{}': {}", path, ec.message()));
        }
    return folder;
}

void check_out_folder(const std::string& out, const std::vector<std::string>& outputs, Start start,
                      const std::string& checkpoint) {
    check(out, outputs, start, checkpoint, nullptr);
}

}  // namespace xgrad::examples
