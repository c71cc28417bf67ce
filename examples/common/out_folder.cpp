#include "out_folder.hpp"

#include <filesystem>
#include <system_error>

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

}  // namespace

Start start_from_flags(bool resume, bool overwrite) {
    if (resume && overwrite)
        throw Error("--resume and --overwrite: expected at most one (--resume continues the run in --out, "
                    "--overwrite replaces it), got both");
    return resume ? Start::resume : overwrite ? Start::overwrite : Start::fresh;
}

void prepare_out_folder(const std::string& out, const std::vector<std::string>& outputs, Start start,
                        const std::string& checkpoint) {
    if (out.empty()) throw Error("--out: expected a folder, got ''");
    std::error_code ec;
    const fs::file_status status = fs::status(out, ec);
    if (fs::exists(status) && !fs::is_directory(status))
        throw Error(fmt::format("--out '{}': expected a folder, but it is {}", out, kind_of(status.type())));
    const bool resumable = !checkpoint.empty();
    if (start == Start::resume) {
        if (!resumable) throw Error("--resume: this program writes no checkpoint to resume from");
        const std::string path = out + "/" + checkpoint;
        if (!fs::exists(fs::symlink_status(path, ec)))
            throw Error(fmt::format("--resume: expected a checkpoint at '{}', found none (start without "
                                    "--resume for a fresh run)", path));
    }
    if (!fs::exists(status)) {
        // status() fails for a path under a file or an unreadable folder: create_directories says why.
        fs::create_directories(out, ec);
        if (ec) throw Error(fmt::format("--out '{}': cannot create the folder: {}", out, ec.message()));
    }
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

    if (start == Start::fresh && !present.empty())
        throw Error(fmt::format("--out '{}' already holds an earlier run ({}): pass {}--overwrite to replace "
                                "it, or choose another --out", out, fmt::join(present, ", "),
                                resumable ? "--resume to continue it, " : ""));
    if (start == Start::overwrite)
        for (const std::string& name : present) {
            const std::string path = out + "/" + name;
            if (!fs::remove(path, ec) && ec)
                throw Error(fmt::format("--overwrite: cannot remove '{}': {}", path, ec.message()));
        }
}

}  // namespace xgrad::examples
