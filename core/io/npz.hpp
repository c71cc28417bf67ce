#pragma once
/// numpy's .npy and .npz files, so that model and optimiser state saved here opens with
/// numpy.load, and arrays saved with np.save / np.savez load here.
///
/// .npy: format 1.0 written (1.0, 2.0 and 3.0 read); little-endian C-order data of dtype
/// '<f4' (float32), '<f8' (float64), '<i8' (int64) or '|b1' (bool), loaded as that dtype.
/// Written headers are byte-for-byte what numpy 1.24's np.save writes. numpy has no bfloat16:
/// a bfloat16 tensor is written as '<f4' (its float32 values, exact), and loads back as float32;
/// converting that into a bfloat16 destination (load_state_dict, .to(kBFloat16)) rounds to
/// nearest even, which gives back the saved values unchanged.
/// .npz: a zip archive with one member NAME.npy per array, written stored (as np.savez) or
/// deflated (as np.savez_compressed), and read either way. Names may hold dots ("W_q.weight"),
/// and numpy.load(path)["W_q.weight"] reads them back. Deflate and CRC-32 are zlib's.
///
/// The readers treat the bytes as untrusted: every length, offset and count is checked against
/// the bytes present before use, CRC-32s are verified, and nothing is allocated from a length
/// field before that check. A deflated member's declared size must be one its compressed bytes
/// can reach and must agree with the array its .npy header describes before its data is
/// inflated, into a buffer of exactly that size; output beyond it, or short of it, is refused.
/// Members may not share bytes (an overlapped zip bomb), and an archive whose declared sizes add
/// up to more than the machine's memory is refused before any member is inflated.
/// Anything else is refused with a message: other dtypes, big-endian data, Fortran order
/// (rank >= 2), other compression methods, encrypted or zip64 archives, members that are not
/// .npy files.
///
/// Every failure, bad bytes and I/O alike, throws xgrad::Error naming the file (or the `what`
/// given to the in-memory forms) and what was wrong. Files are written and read through
/// core/io/atomic_file.hpp: a save replaces only a regular file (following a symbolic link),
/// atomically, and a load reads only a regular file.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace xgrad {

/// Arrays with their names, in order (the order of the archive's members).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// The entry named `name` (the first with that name): numpy's np.load(path)["X"], torch's
/// checkpoint["iter_num"]. A handle to the entry's tensor (it aliases the entry, as torch's dict
/// lookup does), returned by value so that `const auto& x = find_entry(load_npz(path), "X")`
/// keeps x alive after the loaded list is gone. Throws naming `name` and the names there are.
Tensor find_entry(const NamedTensors& entries, const std::string& name);
/// Every entry named "<prefix>.<rest>" with <rest> not empty, renamed <rest>, in order: a
/// state_dict kept inside a checkpoint, as torch's checkpoint["model"]
/// (`model->load_state_dict(sub_entries(ckpt, "model"))`). "<prefix>" and "<prefix>." themselves
/// are not among them. Empty when there is none.
NamedTensors sub_entries(const NamedTensors& entries, const std::string& prefix);
/// `entries` renamed "<prefix>.<name>", in order (an empty name is refused: it would not come
/// back from sub_entries): one part of a checkpoint, as torch's
/// torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), ...}):
///   NamedTensors ckpt = with_prefix("model", model->state_dict());
///   for (auto& e : with_prefix("optimizer", opt.state_dict())) ckpt.push_back(e);
NamedTensors with_prefix(const std::string& prefix, const NamedTensors& entries);

/// Writes one .npy (format 1.0; little-endian '<f4' '<f8' '<i8' '|b1'; C order), atomically.
void save_npy(const std::string& path, const Tensor& t);
/// Reads one .npy as a leaf tensor of the file's dtype.
Tensor load_npy(const std::string& path);

/// Writes an uncompressed .npz (a zip of NAME.npy members, CRC-32 computed) atomically:
/// to a temporary file in the same folder, flushed (fsync), then renamed over `path`.
/// Names must be non-empty and distinct. As numpy.savez.
void save_npz(const std::string& path, const NamedTensors& arrays);
/// As save_npz, with every member deflated (zip method 8, zlib's default level): as
/// numpy.savez_compressed. Smaller for data that repeats (masks, sparse or quantised weights);
/// random float weights shrink little, and reading costs an inflate.
void save_npz_compressed(const std::string& path, const NamedTensors& arrays);
/// Reads every member of an .npz written by np.savez, np.savez_compressed, save_npz or
/// save_npz_compressed, in archive order, with the ".npy" suffix removed from the names.
NamedTensors load_npz(const std::string& path);

/// In-memory forms, for tests and fuzzing. `what` names the source in error messages.
std::string npy_bytes(const Tensor& t);
Tensor parse_npy(std::string_view bytes, const std::string& what = "npy");
std::string npz_bytes(const NamedTensors& arrays);
std::string npz_compressed_bytes(const NamedTensors& arrays);
NamedTensors parse_npz(std::string_view bytes, const std::string& what = "npz");

}  // namespace xgrad
