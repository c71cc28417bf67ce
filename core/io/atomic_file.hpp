#pragma once
/// Writing a file so that a crash or an error never leaves a half-written one behind, and
/// reading one without blocking or reading without bound. Every file the library writes goes
/// through AtomicFile; every file it reads goes through read_file.
///
/// What a save replaces: only a regular file, or a name that does not exist yet. A directory,
/// FIFO, socket or device node at the path is refused before anything is written, and so is a
/// regular file without write permission (as numpy's open(path, "wb") would fail). A symbolic
/// link is followed, as numpy's writers follow it: the link stays and the file it points to is
/// replaced, beside that file; a dangling link creates its target. Only the final component is
/// resolved here (at most 40 links, then "too many levels of symbolic links"); the folders on
/// the way are the kernel's business. A replaced file keeps its permission bits.
///
/// How: the bytes go to an unnamed file in the destination's folder (Linux O_TMPFILE), so a
/// writer killed at any point leaves nothing behind. commit() flushes it (fsync), links it to
/// a short fresh name in that folder, renames that over the destination (atomic within one
/// file system) and syncs the folder. Where the file system has no O_TMPFILE the temporary is
/// a named file from the start. Named temporaries start with kTempPrefix and carry the writer's
/// pid; every writer first removes those of writers on this host that no longer run, so a
/// killed writer's litter lasts until the next save in that folder. Temporary names are short
/// whatever the destination's name, so a name of NAME_MAX bytes can be saved.
///
/// Until commit() succeeds the destination keeps its old content, and a failed or abandoned
/// write removes its temporary. A save checks the destination again just before the rename; a
/// folder that another process rearranges during the write is not otherwise defended against.
/// Every failure throws xgrad::Error naming the operation, the path, what was expected and what
/// was found, or the system's reason.
#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace xgrad {

/// Named temporary files begin with this (".xgrad-tmp-<host>-<pid>-<n>").
inline constexpr std::string_view kTempPrefix = ".xgrad-tmp-";

class AtomicFile {
public:
    /// Checks the destination and creates the temporary file beside it. `op` prefixes error
    /// messages ("save_npz").
    AtomicFile(std::string path, std::string op);
    /// Removes the temporary file unless commit() succeeded.
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    void write(const void* data, std::size_t size);
    void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
    /// fsync, name the temporary, rename it over the destination, fsync the folder. Call once.
    void commit();

    /// The path as given.
    const std::string& path() const { return m_path; }

private:
    [[noreturn]] void fail(const std::string& what, int err);
    void resolve_target();
    void check_target();
    void open_temporary();
    void name_temporary();
    void discard() noexcept;
    std::string target_shown() const;

    std::string m_path;
    std::string m_op;
    std::string m_folder;  // the folder the file is replaced in (after following links), for messages
    std::string m_name;    // the final component within it
    std::string m_links;   // the text of the last symbolic link followed; empty if none
    int m_dir = -1;        // m_folder, opened once (O_PATH): every step acts on the same folder
    int m_fd = -1;
    std::string m_temp;    // the temporary's name in m_dir; empty while it is unnamed (O_TMPFILE)
    bool m_exists = false;
    unsigned m_mode = 0;   // the replaced file's permission bits
    bool m_committed = false;
};

/// Replaces the file at `path` with `content` through an AtomicFile.
void write_file_atomic(const std::string& path, std::string_view content, const std::string& op);

/// The whole content of the regular file at `path` (a symbolic link is followed). A directory,
/// FIFO, socket or device is refused before it is opened, so reading never blocks and never runs
/// without bound; a file that changes size while it is read is refused too. Throws xgrad::Error
/// "<op>: cannot open '<path>': <reason>" and the like.
std::string read_file(const std::string& path, const std::string& op);

namespace detail {
/// For tests: false makes AtomicFile use named temporaries, as on a file system without
/// O_TMPFILE; true (the default) lets it try O_TMPFILE first. Process-wide.
void set_atomic_file_tmpfile(bool enabled);
}  // namespace detail

}  // namespace xgrad
