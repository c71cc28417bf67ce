#include "core/io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

namespace xgrad {

namespace {

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

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string op) : m_path(std::move(path)), m_op(std::move(op)) {
    if (m_path.empty() || m_path.back() == '/')
        throw Error(fmt::format("{}: '{}' is not a file path", m_op, m_path));
    // A unique name in the same folder (rename is atomic only within one file system). O_EXCL
    // makes a clash fail instead of sharing a file; the mode 0666 is narrowed by the umask,
    // as for any newly created file.
    static std::atomic<unsigned> counter{0};
    const auto stamp = static_cast<unsigned long long>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    const std::string folder = folder_of(m_path);
    for (int attempt = 0; attempt < 100; ++attempt) {
        m_temp = fmt::format("{}/.{}.tmp-{}-{}-{:x}", folder, base_of(m_path), ::getpid(),
                             counter.fetch_add(1), stamp & 0xffffff);
        m_fd = ::open(m_temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (m_fd >= 0) return;
        if (errno != EEXIST) break;
    }
    const int err = errno;
    throw Error(fmt::format("{}: cannot write '{}': cannot create a temporary file in '{}': {}", m_op,
                            m_path, folder, std::strerror(err)));
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
    if (m_fd >= 0) {
        ::close(m_fd);
        m_fd = -1;
    }
    if (!m_committed && !m_temp.empty()) {
        ::unlink(m_temp.c_str());
        m_temp.clear();
    }
}

void AtomicFile::fail(const std::string& what, int err) {
    discard();
    throw Error(fmt::format("{}: cannot write '{}': {}: {} (the previous file, if any, is unchanged)",
                            m_op, m_path, what, std::strerror(err)));
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
    const int fd = m_fd;
    m_fd = -1;
    if (::close(fd) != 0) fail("close failed", errno);
    if (::rename(m_temp.c_str(), m_path.c_str()) != 0) fail("rename failed", errno);
    m_committed = true;
    // Make the rename itself durable. Some file systems refuse fsync on a folder; the data is
    // already safe then, so that is not an error.
    const int dir = ::open(folder_of(m_path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
        ::fsync(dir);
        ::close(dir);
    }
}

void write_file_atomic(const std::string& path, std::string_view content, const std::string& op) {
    AtomicFile f(path, op);
    f.write(content);
    f.commit();
}

std::string read_file(const std::string& path, const std::string& op) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        throw Error(fmt::format("{}: cannot open '{}': {}", op, path, std::strerror(err)));
    }
    std::string out;
    char buf[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            throw Error(fmt::format("{}: cannot read '{}': {}", op, path, std::strerror(err)));
        }
        out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
}

}  // namespace xgrad
