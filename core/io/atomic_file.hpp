#pragma once
/// Writing a file so that a crash or an error never leaves a half-written one behind.
///
/// The bytes go to a new temporary file in the destination's own folder; commit() flushes it
/// to disk (fsync), renames it over the destination (atomic on POSIX within one file system)
/// and syncs the folder. Until commit() succeeds the destination keeps its old content, and
/// a failed or abandoned write removes the temporary file. Every failure throws xgrad::Error
/// naming the operation, the path and the system's reason.
#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace xgrad {

class AtomicFile {
public:
    /// Creates the temporary file next to `path`. `op` prefixes error messages ("save_npz").
    AtomicFile(std::string path, std::string op);
    /// Removes the temporary file unless commit() succeeded.
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    void write(const void* data, std::size_t size);
    void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
    /// fsync, close, rename over the destination, fsync the folder. Call once.
    void commit();

    const std::string& path() const { return m_path; }

private:
    [[noreturn]] void fail(const std::string& what, int err);
    void discard() noexcept;

    std::string m_path;
    std::string m_op;
    std::string m_temp;
    int m_fd = -1;
    bool m_committed = false;
};

/// Replaces the file at `path` with `content` through an AtomicFile.
void write_file_atomic(const std::string& path, std::string_view content, const std::string& op);

/// The whole content of a file; throws xgrad::Error "<op>: cannot open '<path>': <reason>".
std::string read_file(const std::string& path, const std::string& op);

}  // namespace xgrad
