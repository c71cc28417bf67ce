#include "core/io/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <new>

#include <fmt/format.h>

namespace xgrad {

namespace {

std::atomic<bool> g_use_tmpfile{true};

// As the kernel's own limit on links followed in one path lookup (MAXSYMLINKS).
constexpr int kMaxLinks = 40;

std::string folder_of(const std::string& path) {
    const auto slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
    const auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// `rel` read from inside `folder`, for messages.
std::string joined(const std::string& folder, const std::string& rel) {
    if (!rel.empty() && rel[0] == '/') return rel;
    if (folder == ".") return rel;
    if (rel == ".") return folder;
    return folder == "/" ? "/" + rel : folder + "/" + rel;
}

const char* kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "not a regular file";
}

// Distinguishes this host's temporaries from those of other hosts sharing the folder (a
// network file system), whose pids mean nothing here. FNV-1a of the host name.
std::uint32_t host_tag() {
    static const std::uint32_t tag = [] {
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        std::uint32_t h = 2166136261u;
        for (const char* p = host; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 16777619u;
        return h;
    }();
    return tag;
}

// Short whatever the destination's name, so a destination name of NAME_MAX bytes still works.
std::string temp_name() {
    static std::atomic<unsigned> counter{0};
    const auto stamp = static_cast<unsigned long long>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    return fmt::format("{}{:08x}-{}-{}-{:x}", kTempPrefix, host_tag(), ::getpid(), counter.fetch_add(1),
                       stamp & 0xffffff);
}

// Removes the named temporaries in `dir` left by writers on this host that no longer run
// (killed mid-write). A live writer's temporary (its pid answers kill(pid, 0)) is kept.
void sweep_stale_temporaries(int dir) noexcept {
    const int fd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;  // a folder we may write but not list: nothing to sweep
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
        ::close(fd);
        return;
    }
    const std::string mine = fmt::format("{}{:08x}-", kTempPrefix, host_tag());
    while (const dirent* e = ::readdir(d)) {
        const std::string_view name(e->d_name);
        if (name.substr(0, mine.size()) != mine) continue;
        long pid = 0;
        std::size_t at = mine.size();
        for (; at < name.size() && at - mine.size() < 10 && name[at] >= '0' && name[at] <= '9'; ++at)
            pid = pid * 10 + (name[at] - '0');
        if (at == mine.size() || at == name.size() || name[at] != '-' || pid <= 0 || pid > INT_MAX) continue;
        if (pid == ::getpid()) continue;  // another thread of this process may be writing it
        if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
        struct stat st {};
        if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            ::unlinkat(::dirfd(d), e->d_name, 0);
    }
    ::closedir(d);
}

// An unnamed O_TMPFILE file is given a name through /proc/self/fd (linkat with AT_EMPTY_PATH
// needs CAP_DAC_READ_SEARCH); without /proc, named temporaries are used from the start.
bool can_name_unnamed_files() {
    static const bool ok = ::access("/proc/self/fd", X_OK) == 0;
    return ok;
}

struct Fd {
    int fd;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

namespace detail {
void set_atomic_file_tmpfile(bool enabled) { g_use_tmpfile = enabled; }
}  // namespace detail

AtomicFile::AtomicFile(std::string path, std::string op) : m_path(std::move(path)), m_op(std::move(op)) {
    if (m_path.empty()) throw Error(fmt::format("{}: the path is empty; expected a file path", m_op));
    if (m_path.find('\0') != std::string::npos)
        throw Error(fmt::format("{}: the path '{}' contains a NUL byte", m_op, m_path.c_str()));
    if (m_path.back() == '/')
        throw Error(fmt::format("{}: '{}' ends in '/', which names a folder; expected a file path", m_op, m_path));
    try {
        resolve_target();
        sweep_stale_temporaries(m_dir);
        open_temporary();
    } catch (...) {
        discard();
        throw;
    }
}

AtomicFile::~AtomicFile() { discard(); }

std::string AtomicFile::target_shown() const {
    if (m_links.empty()) return fmt::format("'{}'", m_path);
    return fmt::format("'{}' (a symbolic link to '{}')", m_path, joined(m_folder, m_name));
}

// Follows symbolic links at the final component until it names a regular file, nothing, or
// something a save must not replace; leaves m_dir open on the folder the file lives in.
void AtomicFile::resolve_target() {
    m_folder = folder_of(m_path);
    m_name = base_of(m_path);
    m_dir = ::open(m_folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (m_dir < 0) {
        const int err = errno;
        if (err == ENOENT)
            throw Error(fmt::format("{}: cannot write '{}': the folder '{}' does not exist", m_op, m_path, m_folder));
        if (err == ENOTDIR)
            throw Error(fmt::format("{}: cannot write '{}': '{}' is not a folder (or a folder on its way is not)",
                                    m_op, m_path, m_folder));
        throw Error(fmt::format("{}: cannot write '{}': cannot open the folder '{}': {}", m_op, m_path, m_folder,
                                std::strerror(err)));
    }
    for (int hops = 0;; ++hops) {
        struct stat st {};
        if (::fstatat(m_dir, m_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            const int err = errno;
            if (err == ENOENT) {
                m_exists = false;
                return;
            }
            if (err == ENAMETOOLONG)
                throw Error(fmt::format("{}: cannot write {}: the name '{}' is {} bytes, longer than the folder's "
                                        "file system allows ({} bytes)",
                                        m_op, target_shown(), m_name, m_name.size(),
                                        ::fpathconf(m_dir, _PC_NAME_MAX)));
            throw Error(fmt::format("{}: cannot write {}: {}", m_op, target_shown(), std::strerror(err)));
        }
        if (S_ISREG(st.st_mode)) {
            if (::faccessat(m_dir, m_name.c_str(), W_OK, AT_EACCESS) != 0 && (errno == EACCES || errno == EPERM))
                throw Error(fmt::format("{}: cannot write {}: the file is read-only for this user (no write "
                                        "permission); it is left unchanged",
                                        m_op, target_shown()));
            m_exists = true;
            m_mode = st.st_mode & 0777;
            return;
        }
        if (!S_ISLNK(st.st_mode))
            throw Error(fmt::format("{}: {} is {}, not a regular file; a save replaces only a regular file (or "
                                    "creates one), so it is left as it is",
                                    m_op, target_shown(), kind_of(st.st_mode)));
        if (hops == kMaxLinks)
            throw Error(fmt::format("{}: cannot write '{}': more than {} symbolic links in a row (a loop?)", m_op,
                                    m_path, kMaxLinks));
        // The link's text, resolved from the folder that holds the link.
        std::string target(static_cast<std::size_t>(st.st_size > 0 ? st.st_size : PATH_MAX) + 1, '\0');
        const ssize_t n = ::readlinkat(m_dir, m_name.c_str(), target.data(), target.size());
        if (n < 0 || static_cast<std::size_t>(n) >= target.size()) {
            const int err = n < 0 ? errno : ENAMETOOLONG;
            throw Error(fmt::format("{}: cannot write '{}': cannot read the symbolic link '{}': {}", m_op, m_path,
                                    joined(m_folder, m_name), std::strerror(err)));
        }
        target.resize(static_cast<std::size_t>(n));
        m_links = target;
        if (target.empty() || target.back() == '/')
            throw Error(fmt::format("{}: '{}' is a symbolic link to '{}', which names a folder, not a regular file; "
                                    "it is left as it is",
                                    m_op, m_path, target));
        const std::string folder = folder_of(target);
        const int next = ::openat(m_dir, folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);  // absolute: dir ignored
        if (next < 0) {
            const int err = errno;
            throw Error(fmt::format("{}: cannot write '{}': it is a symbolic link to '{}', whose folder '{}' {}", m_op,
                                    m_path, target, joined(m_folder, folder),
                                    err == ENOENT ? std::string("does not exist")
                                                  : fmt::format("cannot be opened: {}", std::strerror(err))));
        }
        ::close(m_dir);
        m_dir = next;
        m_folder = joined(m_folder, folder);
        m_name = base_of(target);
    }
}

// Just before the rename: the destination must still be a regular file or absent. Something
// else put there during the write (a folder, a FIFO, a device) is left alone.
void AtomicFile::check_target() {
    struct stat st {};
    if (::fstatat(m_dir, m_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;  // absent, or rename will say
    if (S_ISREG(st.st_mode)) return;
    discard();
    throw Error(fmt::format("{}: {} became {} while the new content was written; a save replaces only a regular "
                            "file, so it is left as it is",
                            m_op, target_shown(), kind_of(st.st_mode)));
}

void AtomicFile::open_temporary() {
    if (g_use_tmpfile && can_name_unnamed_files()) {
        m_fd = ::openat(m_dir, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
        // Not supported by this file system (EOPNOTSUPP) or kernel (EISDIR, EINVAL): use a name.
        if (m_fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
            const int err = errno;
            throw Error(fmt::format("{}: cannot write {}: cannot create a temporary file in '{}': {}", m_op,
                                    target_shown(), m_folder, std::strerror(err)));
        }
    }
    for (int attempt = 0; m_fd < 0 && attempt < 100; ++attempt) {
        m_temp = temp_name();
        m_fd = ::openat(m_dir, m_temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (m_fd < 0) {
            const int err = errno;
            m_temp.clear();
            if (err != EEXIST)
                throw Error(fmt::format("{}: cannot write {}: cannot create a temporary file in '{}': {}", m_op,
                                        target_shown(), m_folder, std::strerror(err)));
        }
    }
    if (m_fd < 0)
        throw Error(fmt::format("{}: cannot write {}: no free temporary name in '{}'", m_op, target_shown(), m_folder));
    // The replacement keeps the permissions of what it replaces (a file made private stays
    // private). A file system without permission bits may refuse; the content matters more.
    if (m_exists) (void)::fchmod(m_fd, static_cast<mode_t>(m_mode));
}

void AtomicFile::name_temporary() {
    const std::string self = fmt::format("/proc/self/fd/{}", m_fd);
    for (int attempt = 0; attempt < 100; ++attempt) {
        const std::string name = temp_name();
        if (::linkat(AT_FDCWD, self.c_str(), m_dir, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
            m_temp = name;
            return;
        }
        if (errno != EEXIST) fail("cannot give the temporary file a name (linkat)", errno);
    }
    fail("no free temporary name", EEXIST);
}

void AtomicFile::discard() noexcept {
    if (m_fd >= 0) {
        ::close(m_fd);
        m_fd = -1;
    }
    if (!m_committed && !m_temp.empty() && m_dir >= 0) ::unlinkat(m_dir, m_temp.c_str(), 0);
    m_temp.clear();
    if (m_dir >= 0) {
        ::close(m_dir);
        m_dir = -1;
    }
}

void AtomicFile::fail(const std::string& what, int err) {
    discard();
    throw Error(fmt::format("{}: cannot write {}: {}: {} (the previous file, if any, is unchanged)", m_op,
                            target_shown(), what, std::strerror(err)));
}

void AtomicFile::write(const void* data, std::size_t size) {
    if (m_fd < 0) throw Error(fmt::format("{}: '{}' is already closed", m_op, m_path));
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
        const ssize_t n = ::write(m_fd, p, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("write failed", errno);
        }
        p += n;
        size -= static_cast<std::size_t>(n);
    }
}

void AtomicFile::commit() {
    if (m_fd < 0) throw Error(fmt::format("{}: '{}' is already closed", m_op, m_path));
    if (::fsync(m_fd) != 0) fail("fsync failed", errno);
    if (m_temp.empty()) name_temporary();
    check_target();
    const int fd = m_fd;
    m_fd = -1;
    if (::close(fd) != 0) fail("close failed", errno);
    if (::renameat(m_dir, m_temp.c_str(), m_dir, m_name.c_str()) != 0) fail("rename failed", errno);
    m_committed = true;
    // Make the rename itself durable. Some file systems refuse fsync on a folder; the data is
    // already safe then, so that is not an error.
    const int dir = ::openat(m_dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
        ::fsync(dir);
        ::close(dir);
    }
    discard();
}

void write_file_atomic(const std::string& path, std::string_view content, const std::string& op) {
    AtomicFile f(path, op);
    f.write(content);
    f.commit();
}

std::string read_file(const std::string& path, const std::string& op) {
    if (path.empty()) throw Error(fmt::format("{}: the path is empty; expected a file path", op));
    if (path.find('\0') != std::string::npos)
        throw Error(fmt::format("{}: the path '{}' contains a NUL byte", op, path.c_str()));
    auto not_regular = [&](mode_t mode) {
        return Error(fmt::format("{}: '{}' is {}, not a regular file; only regular files are read", op, path,
                                 kind_of(mode)));
    };
    // stat before open: opening a FIFO blocks, and opening a device can act on it (a tape rewinds).
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int err = errno;
        throw Error(fmt::format("{}: cannot open '{}': {}", op, path, std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) throw not_regular(st.st_mode);
    // O_NONBLOCK: should the path have become a FIFO since, the open returns at once and
    // fstat refuses it.
    const Fd fd{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
    if (fd.fd < 0) {
        const int err = errno;
        throw Error(fmt::format("{}: cannot open '{}': {}", op, path, std::strerror(err)));
    }
    if (::fstat(fd.fd, &st) != 0) {
        const int err = errno;
        throw Error(fmt::format("{}: cannot read '{}': {}", op, path, std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) throw not_regular(st.st_mode);

    const auto size = static_cast<std::size_t>(st.st_size);
    std::string out;
    try {
        out.resize(size);
    } catch (const std::exception&) {  // bad_alloc, or length_error past max_size()
        throw Error(fmt::format("{}: cannot read '{}': it is {} bytes, more than can be allocated", op, path, size));
    }
    std::size_t got = 0;
    auto read_some = [&](char* dst, std::size_t room) -> std::size_t {
        for (;;) {
            const ssize_t n = ::read(fd.fd, dst, room);
            if (n >= 0) return static_cast<std::size_t>(n);
            if (errno == EINTR) continue;
            const int err = errno;
            throw Error(fmt::format("{}: cannot read '{}': {}", op, path, std::strerror(err)));
        }
    };
    while (got < size) {
        const std::size_t n = read_some(out.data() + got, size - got);
        if (n == 0)
            throw Error(fmt::format("{}: '{}' shrank while it was read: {} bytes when opened, {} there", op, path,
                                    size, got));
        got += n;
    }
    // The size bounds the read: bytes beyond it mean a writer is at work, or a file whose size
    // says nothing (as /proc's); either way not a file to load.
    char extra;
    if (read_some(&extra, 1) != 0)
        throw Error(fmt::format("{}: '{}' holds more than its size of {} bytes (it grew while it was read, or "
                                "is a special file)",
                                op, path, size));
    return out;
}

}  // namespace xgrad
