// .npy / .npz: round trips, numpy's own bytes, every kind of bad input, atomic writes.
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include <catch2/catch.hpp>

#include "core/creation.hpp"
#include "core/io/npz.hpp"
#include "file_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
namespace fs = std::filesystem;

namespace {

// Bytes written by numpy 1.24.2 (Debian 12 python3-numpy) with /usr/bin/python3:
//   f = io.BytesIO()
//   np.savez(f, **{"W_q.weight": np.arange(6, dtype=np.float32).reshape(2, 3) / 4 - 0.5,
//                  "idx": np.array([3, -1, 7], dtype=np.int64)})
// (numpy adds a zip64 extra field to each local header; the central directory has none.)
const unsigned char kNumpySavez[] = {
    0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x97, 0xb7,
    0x05, 0xb3, 0x98, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x14, 0x00, 0x57, 0x5f,
    0x71, 0x2e, 0x77, 0x65, 0x69, 0x67, 0x68, 0x74, 0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00,
    0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20,
    0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x00, 0xbf, 0x00, 0x00, 0x80, 0xbe, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3e,
    0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x40, 0x3f, 0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x10, 0xfb, 0xea, 0xc3, 0x98, 0x00, 0x00, 0x00, 0x98, 0x00,
    0x00, 0x00, 0x07, 0x00, 0x14, 0x00, 0x69, 0x64, 0x78, 0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10,
    0x00, 0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73,
    0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x69, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72,
    0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c,
    0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x33, 0x2c,
    0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x0a, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x4b, 0x01, 0x02, 0x14, 0x03, 0x14,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x97, 0xb7, 0x05, 0xb3, 0x98, 0x00, 0x00,
    0x00, 0x98, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x57, 0x5f, 0x71, 0x2e, 0x77, 0x65, 0x69, 0x67, 0x68,
    0x74, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x01, 0x02, 0x14, 0x03, 0x14, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x21, 0x00, 0x10, 0xfb, 0xea, 0xc3, 0x98, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00,
    0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0xd8,
    0x00, 0x00, 0x00, 0x69, 0x64, 0x78, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x05, 0x06, 0x00, 0x00,
    0x00, 0x00, 0x02, 0x00, 0x02, 0x00, 0x71, 0x00, 0x00, 0x00, 0xa9, 0x01, 0x00, 0x00, 0x00, 0x00,
};

// np.savez_compressed(f, a=np.ones(3, dtype=np.float32)): a deflate member (fixed Huffman codes).
const unsigned char kNumpySavezCompressed[] = {
    0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x52, 0x7e,
    0x32, 0xbf, 0x4a, 0x00, 0x00, 0x00, 0x8c, 0x00, 0x00, 0x00, 0x05, 0x00, 0x14, 0x00, 0x61, 0x2e,
    0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x8c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x4a,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9b, 0xec, 0x17, 0xea, 0x1b, 0x10, 0xc9, 0xc8, 0x50,
    0xc6, 0x50, 0xad, 0x9e, 0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5, 0xa0, 0x6e, 0x93, 0x66, 0xa2,
    0xae, 0xa3, 0xa0, 0x9e, 0x96, 0x5f, 0x54, 0x52, 0x94, 0x98, 0x17, 0x9f, 0x5f, 0x94, 0x92, 0x0a,
    0x12, 0x77, 0x4b, 0xcc, 0x29, 0x4e, 0x05, 0x8a, 0x17, 0x67, 0x24, 0x16, 0xa4, 0x02, 0xf9, 0x1a,
    0xc6, 0x3a, 0x9a, 0x3a, 0x0a, 0xb5, 0x0a, 0x14, 0x00, 0x2e, 0x06, 0x86, 0x06, 0x7b, 0x18, 0x06,
    0x00, 0x50, 0x4b, 0x01, 0x02, 0x14, 0x03, 0x14, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21,
    0x00, 0x52, 0x7e, 0x32, 0xbf, 0x4a, 0x00, 0x00, 0x00, 0x8c, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x61,
    0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x05, 0x06, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00,
    0x33, 0x00, 0x00, 0x00, 0x81, 0x00, 0x00, 0x00, 0x00, 0x00,
};

// np.savez_compressed(f, mask=np.random.default_rng(0).random(1500) < 0.1): dynamic Huffman
// codes. The mask has 152 true values, the first at 2, 3, 11, 13, 20, the last at 1477, 1483, 1487.
const unsigned char kNumpySavezCompressedDynamic[] = {
    0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x6d, 0x1c,
    0x7e, 0x42, 0x00, 0x01, 0x00, 0x00, 0x5c, 0x06, 0x00, 0x00, 0x08, 0x00, 0x14, 0x00, 0x6d, 0x61,
    0x73, 0x6b, 0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x5c, 0x06, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9d, 0x53, 0x3b, 0x0e, 0xc2, 0x30,
    0x0c, 0xcd, 0x5b, 0x39, 0x45, 0xb6, 0x80, 0xd4, 0xa1, 0x1d, 0x58, 0x38, 0x00, 0x1b, 0x88, 0x85,
    0x81, 0x09, 0x15, 0x5a, 0xc4, 0x80, 0x00, 0xb5, 0x88, 0x05, 0x38, 0x05, 0x17, 0xa6, 0x7c, 0x4a,
    0x93, 0xd8, 0x0e, 0x2d, 0x1e, 0xda, 0xe6, 0xd9, 0x7d, 0x7e, 0x76, 0xec, 0xfb, 0x74, 0x3e, 0x99,
    0x2d, 0xa0, 0xce, 0xea, 0x62, 0xb2, 0xbc, 0x5c, 0x17, 0x66, 0xa4, 0xcd, 0x75, 0x95, 0x98, 0x48,
    0x9b, 0xcd, 0xa1, 0x38, 0x15, 0xe9, 0x7e, 0x79, 0x28, 0xb2, 0xfc, 0x89, 0x8f, 0xd3, 0x5d, 0x99,
    0x57, 0x78, 0xb9, 0x4d, 0x8f, 0x79, 0x75, 0xee, 0x27, 0xc3, 0x38, 0x8e, 0x06, 0x91, 0xbe, 0xe9,
    0x7f, 0xad, 0xa7, 0x14, 0xa0, 0xde, 0x06, 0x85, 0xfa, 0x43, 0x36, 0x34, 0x01, 0x08, 0x47, 0x52,
    0x2f, 0xea, 0x1c, 0x08, 0xfd, 0xe8, 0x04, 0x84, 0x13, 0x50, 0x15, 0x1f, 0x79, 0xdf, 0x92, 0x7c,
    0x17, 0x3d, 0x81, 0x03, 0x1d, 0x4c, 0xe4, 0x20, 0xa0, 0x2d, 0x9a, 0x09, 0xf5, 0xd5, 0x90, 0x10,
    0xf8, 0x51, 0x1d, 0xcd, 0x51, 0x22, 0xd3, 0xb0, 0xb9, 0xdb, 0xf4, 0x5a, 0x24, 0x80, 0xf5, 0x74,
    0xc9, 0x24, 0x52, 0x11, 0xf7, 0xb9, 0x01, 0xd2, 0xdf, 0x9f, 0x24, 0xad, 0xf3, 0xc9, 0x17, 0xc2,
    0x94, 0x27, 0xcd, 0x87, 0xe7, 0x16, 0x6e, 0xbf, 0x0d, 0x62, 0xfb, 0x98, 0xb9, 0xf6, 0x5f, 0xad,
    0xd6, 0x0f, 0x6e, 0x69, 0x78, 0x75, 0x18, 0x01, 0x99, 0xdd, 0x84, 0x52, 0x41, 0x70, 0x1a, 0xc1,
    0xd1, 0x7b, 0xf2, 0x85, 0x71, 0xb4, 0x3d, 0x92, 0x26, 0x92, 0x88, 0x50, 0x83, 0xd7, 0x22, 0x94,
    0x09, 0xf1, 0x84, 0x66, 0x39, 0xe9, 0x68, 0x30, 0x6c, 0x56, 0x51, 0xfc, 0x9a, 0x87, 0xad, 0xb9,
    0x23, 0xbb, 0x7e, 0xd8, 0x4e, 0x42, 0x48, 0xfa, 0xf8, 0x00, 0x50, 0x4b, 0x01, 0x02, 0x14, 0x03,
    0x14, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x6d, 0x1c, 0x7e, 0x42, 0x00, 0x01,
    0x00, 0x00, 0x5c, 0x06, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x6d, 0x61, 0x73, 0x6b, 0x2e, 0x6e, 0x70, 0x79,
    0x50, 0x4b, 0x05, 0x06, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x36, 0x00, 0x00, 0x00,
    0x3a, 0x01, 0x00, 0x00, 0x00, 0x00,
};

// Deflate's stored blocks (compression level 0), written by Python's zipfile:
//   z = zipfile.ZipFile(f, 'w', compression=zipfile.ZIP_DEFLATED, compresslevel=0)
//   z.writestr('s.npy', <np.save of np.arange(4, dtype=np.float64) * 1.5>)
const unsigned char kZipDeflateStored[] = {
    0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x08, 0x00, 0xe5, 0x02, 0x75, 0x5d, 0xe9, 0x87,
    0xdb, 0xb7, 0xa5, 0x00, 0x00, 0x00, 0xa0, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x73, 0x2e,
    0x6e, 0x70, 0x79, 0x01, 0xa0, 0x00, 0x5f, 0xff, 0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00,
    0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x38,
    0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65,
    0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70,
    0x65, 0x27, 0x3a, 0x20, 0x28, 0x34, 0x2c, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x40,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x40, 0x50, 0x4b, 0x01, 0x02, 0x14, 0x03, 0x14, 0x00,
    0x00, 0x00, 0x08, 0x00, 0xe5, 0x02, 0x75, 0x5d, 0xe9, 0x87, 0xdb, 0xb7, 0xa5, 0x00, 0x00, 0x00,
    0xa0, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x73, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x05, 0x06, 0x00,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x33, 0x00, 0x00, 0x00, 0xc8, 0x00, 0x00, 0x00, 0x00,
    0x00,
};

// np.save(f, arr) for arr = np.array([[True, False, True]]), np.array(2.5) and
// np.zeros((0, 3), np.float32): our writer must produce these bytes exactly.
const unsigned char kNumpyBool[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x7c, 0x62, 0x31, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x31, 0x2c, 0x20,
    0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x01, 0x00, 0x01,
};
const unsigned char kNumpyScalarF64[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x29, 0x2c, 0x20,
    0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x40,
};
const unsigned char kNumpyEmptyF32[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x30, 0x2c, 0x20,
    0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
};

template <std::size_t N> std::string bytes_of(const unsigned char (&a)[N]) {
    return std::string(reinterpret_cast<const char*>(a), N);
}

// Same shape, dtype and bit-identical values (NaN payloads and -0.0 included).
bool identical(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
    if (a.numel() == 0) return true;
    switch (a.dtype()) {
        case kFloat32: return std::memcmp(a.data_ptr<float>(), b.data_ptr<float>(), a.numel() * 4) == 0;
        case kFloat64: return std::memcmp(a.data_ptr<double>(), b.data_ptr<double>(), a.numel() * 8) == 0;
        case kInt64: return a.to_vector<std::int64_t>() == b.to_vector<std::int64_t>();
        case kBool: return a.to_vector<bool>() == b.to_vector<bool>();
    }
    return false;
}

// A tensor of `shape` and `dtype` with varied values, special ones included.
Tensor sample(const Shape& shape, Dtype dtype, std::uint64_t seed = 1) {
    std::size_t n = 1;
    for (auto s : shape) n *= s;
    std::mt19937_64 rng(seed);
    if (dtype == kInt64) {
        std::vector<std::int64_t> v(n);
        for (auto& x : v) x = static_cast<std::int64_t>(rng());
        if (n > 1) v[1] = std::numeric_limits<std::int64_t>::min();
        return from_vector(v, shape);
    }
    std::vector<double> v(n);
    std::normal_distribution<double> normal;
    for (auto& x : v) x = dtype == kBool ? double(rng() % 2) : normal(rng);
    if (dtype != kBool && n > 3) {
        v[0] = std::numeric_limits<double>::quiet_NaN();
        v[1] = -std::numeric_limits<double>::infinity();
        v[2] = -0.0;
        v[3] = 1e-310;  // subnormal in float64
    }
    return from_vector(v, shape, dtype);
}

// A fresh folder under /tmp, removed at the end of the test.
struct TempDir {
    fs::path path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "xgrad_npz_XXXXXX").string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
    }
    ~TempDir() { fs::remove_all(path); }
    std::string operator/(const std::string& name) const { return (path / name).string(); }
    std::vector<std::string> entries() const {
        std::vector<std::string> out;
        for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
        std::sort(out.begin(), out.end());
        return out;
    }
};


void put32_at(std::string& b, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put16_at(std::string& b, std::size_t at, std::uint16_t v) {
    b[at] = static_cast<char>(v & 0xff);
    b[at + 1] = static_cast<char>(v >> 8);
}
// Offsets of the zip records in a buffer (first match of a signature after `from`).
std::size_t find_sig(const std::string& b, const char* sig, std::size_t from = 0) {
    auto at = b.find(std::string(sig, 4), from);
    REQUIRE(at != std::string::npos);
    return at;
}

// An .npy with a hand-written header dict (padded as numpy pads) and `data` after it.
std::string npy_with_header(const std::string& dict, const std::string& data = "",
                            std::string version = std::string("\x01\x00", 2)) {
    std::string h = dict;
    const std::size_t len_size = version[0] == 1 ? 2 : 4;
    while ((8 + len_size + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    std::string out = std::string("\x93NUMPY", 6) + version;
    for (std::size_t i = 0; i < len_size; ++i) out += static_cast<char>((h.size() >> (8 * i)) & 0xff);
    return out + h + data;
}

std::uint16_t get16_at(const std::string& b, std::size_t at) {
    return static_cast<std::uint16_t>(static_cast<unsigned char>(b.at(at)) |
                                      static_cast<unsigned char>(b.at(at + 1)) << 8);
}
std::uint32_t get32_at(const std::string& b, std::size_t at) {
    return get16_at(b, at) | static_cast<std::uint32_t>(get16_at(b, at + 2)) << 16;
}

// What the central directory says of each member, in archive order (no archive comment).
struct MemberInfo {
    std::string name;
    std::uint16_t method;
    std::uint32_t crc, csize, usize, local;
};
std::vector<MemberInfo> members_of(const std::string& b) {
    REQUIRE(b.size() >= 22);
    const std::size_t end = b.size() - 22;
    REQUIRE(get32_at(b, end) == 0x06054b50);
    std::vector<MemberInfo> out;
    std::size_t pos = get32_at(b, end + 16);
    for (std::size_t i = 0, n = get16_at(b, end + 10); i < n; ++i) {
        const std::size_t name_len = get16_at(b, pos + 28);
        out.push_back({b.substr(pos + 46, name_len), get16_at(b, pos + 10), get32_at(b, pos + 16),
                       get32_at(b, pos + 20), get32_at(b, pos + 24), get32_at(b, pos + 42)});
        pos += 46 + name_len + get16_at(b, pos + 30) + get16_at(b, pos + 32);
    }
    return out;
}
// The bytes a member's local header says it holds (compressed as they are).
std::string member_data(const std::string& b, const MemberInfo& m) {
    const std::size_t at = m.local + 30 + get16_at(b, m.local + 26) + get16_at(b, m.local + 28);
    return b.substr(at, m.csize);
}

// One raw-deflate stored block: the bytes as they are, so that a test says exactly what a
// stream inflates to, and where it ends.
std::string stored_block(const std::string& data, bool final) {
    REQUIRE(data.size() <= 0xffff);
    std::string out(5, '\0');
    out[0] = final ? 1 : 0;  // BFINAL, then BTYPE 00
    put16_at(out, 1, static_cast<std::uint16_t>(data.size()));
    put16_at(out, 3, static_cast<std::uint16_t>(~data.size()));
    return out + data;
}

// A zip archive of one member `name` holding `data` as given, declaring `method`, the
// uncompressed size `usize` and `crc` in both its headers.
std::string one_member_zip(const std::string& name, std::uint16_t method, const std::string& data,
                           std::uint32_t usize, std::uint32_t crc) {
    auto fields = [&](std::string& h) {
        std::string f(22, '\0');
        put16_at(f, 0, 20);  // version needed
        put16_at(f, 4, method);
        put16_at(f, 8, 0x21);  // 1980-01-01
        put32_at(f, 10, crc);
        put32_at(f, 14, static_cast<std::uint32_t>(data.size()));
        put32_at(f, 18, usize);
        h += f;
    };
    std::string name_len(2, '\0');
    put16_at(name_len, 0, static_cast<std::uint16_t>(name.size()));
    std::string local = "PK\x03\x04";
    fields(local);
    local += name_len + std::string(2, '\0') + name + data;
    std::string central = "PK\x01\x02" + std::string("\x14\x03", 2);
    fields(central);
    central += name_len + std::string(16, '\0') + name;  // extra, comment, disk, attributes, offset 0
    std::string end = "PK\x05\x06" + std::string(18, '\0');
    put16_at(end, 8, 1);
    put16_at(end, 10, 1);
    put32_at(end, 12, static_cast<std::uint32_t>(central.size()));
    put32_at(end, 16, static_cast<std::uint32_t>(local.size()));
    return local + central + end;
}

// A file under tests/data/.
std::string test_data(const std::string& name) {
    const fs::path path = fs::path(XGRAD_TEST_DATA_DIR) / name;
    REQUIRE(fs::is_regular_file(path));
    return slurp(path.string());
}

// The arrays of tests/data/npz/: xgrad-savez.npz holds them as save_npz wrote them before it
// could compress, numpy-savez-compressed.npz as numpy 1.24.2 wrote them with
//   np.savez_compressed(path, **{"w.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
//       "step": np.array(7), "mask": np.array([1, 0, 0, 1], dtype=bool),
//       "empty": np.zeros((0, 3)), "größe": np.array([-0.5, 1e-310])})
NamedTensors reference_arrays() {
    return {{"w.weight", arange(6, kFloat32).reshape({2, 3})},
            {"step", tensor(7, kInt64)},
            {"mask", from_vector({1, 0, 0, 1}, {4}, kBool)},
            {"empty", zeros({0, 3}, kFloat64)},
            {"größe", from_vector({-0.5, 1e-310}, {2}, kFloat64)}};
}

void check_same_arrays(const NamedTensors& back, const NamedTensors& want) {
    REQUIRE(back.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
        INFO(want[i].first);
        CHECK(back[i].first == want[i].first);
        CHECK(identical(back[i].second, want[i].second));
    }
}

// Resident memory at its peak since the last reset (VmHWM), in KiB.
long peak_rss_kib() {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}
// Resets the peak to the current resident memory and returns it; -1 where Linux does not
// offer the reset (/proc/self/clear_refs).
long reset_peak_rss_kib() {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5" << std::flush;
    return clear ? peak_rss_kib() : -1;
}

}  // namespace

TEST_CASE("npy round trips every dtype and shape, bit for bit", "[npz]") {
    const std::vector<Shape> shapes = {{}, {0}, {1}, {5}, {2, 3}, {0, 3}, {3, 0}, {2, 0, 4}, {2, 3, 4}, {1, 1, 1, 7}};
    for (Dtype d : {kFloat32, kFloat64, kInt64, kBool}) {
        for (const Shape& s : shapes) {
            INFO(dtype_name(d) << " " << shape_str(s));
            Tensor t = sample(s, d);
            const std::string b = npy_bytes(t);
            CHECK((b.size() - t.numel() * (d == kBool ? 1 : d == kFloat32 ? 4 : 8)) % 64 == 0);
            Tensor back = parse_npy(b);
            CHECK(back.shape() == s);
            CHECK(back.dtype() == d);
            CHECK(identical(back, t));
            CHECK_FALSE(back.requires_grad());
        }
    }
}

TEST_CASE("npz round trips names with dots, order and all dtypes", "[npz]") {
    NamedTensors arrays = {
        {"W_q.weight", sample({4, 3}, kFloat32)},
        {"W_q.bias", sample({3}, kFloat64)},
        {"step", sample({}, kInt64)},
        {"mask", sample({2, 5}, kBool)},
        {"empty", sample({0, 8}, kFloat32)},
        {"encoder.layers.0/attn.W_k.weight", sample({2, 2}, kFloat64, 3)},
        {"größe", sample({2}, kFloat32, 4)},
    };
    auto check = [&](const NamedTensors& back) { check_same_arrays(back, arrays); };
    check(parse_npz(npz_bytes(arrays)));

    TempDir dir;
    save_npz(dir / "state.npz", arrays);
    check(load_npz(dir / "state.npz"));
    CHECK(slurp(dir / "state.npz") == npz_bytes(arrays));  // the file holds exactly these bytes
    save_npy(dir / "w.npy", arrays[0].second);
    CHECK(identical(load_npy(dir / "w.npy"), arrays[0].second));
    CHECK(dir.entries() == std::vector<std::string>{"state.npz", "w.npy"});  // no temporaries left

    CHECK(parse_npz(npz_bytes({})).empty());  // as np.savez(f) with no arrays
}

TEST_CASE("npz reads numpy's np.savez output", "[npz]") {
    NamedTensors a = parse_npz(bytes_of(kNumpySavez));
    REQUIRE(a.size() == 2);
    CHECK(a[0].first == "W_q.weight");
    CHECK(a[0].second.dtype() == kFloat32);
    CHECK(a[0].second.shape() == Shape{2, 3});
    CHECK(a[0].second.to_vector<float>() == std::vector<float>{-0.5f, -0.25f, 0.f, 0.25f, 0.5f, 0.75f});
    CHECK(a[1].first == "idx");
    CHECK(a[1].second.dtype() == kInt64);
    CHECK(a[1].second.shape() == Shape{3});
    CHECK(a[1].second.to_vector<std::int64_t>() == std::vector<std::int64_t>{3, -1, 7});

    // Each member is exactly what npy_bytes writes for the loaded tensor: numpy's header layout.
    const std::string npz = bytes_of(kNumpySavez);
    const std::string first = npy_bytes(a[0].second), second = npy_bytes(a[1].second);
    CHECK(npz.find(first) != std::string::npos);
    CHECK(npz.find(second) != std::string::npos);
}

TEST_CASE("npy writes and reads numpy's np.save bytes exactly", "[npz]") {
    Tensor b = from_vector({1, 0, 1}, {1, 3}, kBool);
    CHECK(npy_bytes(b) == bytes_of(kNumpyBool));
    CHECK(identical(parse_npy(bytes_of(kNumpyBool)), b));
    Tensor s = tensor(2.5, kFloat64);
    CHECK(npy_bytes(s) == bytes_of(kNumpyScalarF64));
    CHECK(parse_npy(bytes_of(kNumpyScalarF64)).dtype() == kFloat64);
    CHECK(parse_npy(bytes_of(kNumpyScalarF64)).item<double>() == 2.5);
    Tensor e = zeros({0, 3});
    CHECK(npy_bytes(e) == bytes_of(kNumpyEmptyF32));
    CHECK(parse_npy(bytes_of(kNumpyEmptyF32)).shape() == Shape{0, 3});
}

TEST_CASE("npy accepts the header variants numpy may write", "[npz]") {
    const std::string f4(reinterpret_cast<const char*>(std::array<float, 2>{1.5f, -2.f}.data()), 8);
    // Version 2.0 and 3.0 (4-byte header length), double quotes, other key order, no trailing
    // comma, Python 2 longs, Fortran order on a 1-D array (the same bytes as C order).
    for (const auto& [dict, version] : std::vector<std::pair<std::string, std::string>>{
             {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", std::string("\x02\x00", 2)},
             {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", std::string("\x03\x00", 2)},
             {"{\"shape\": (2,), \"descr\": \"<f4\", \"fortran_order\": False}", std::string("\x01\x00", 2)},
             {"{'descr':'<f4','fortran_order':True,'shape':(2L,)}", std::string("\x01\x00", 2)},
         }) {
        INFO(dict);
        Tensor t = parse_npy(npy_with_header(dict, f4, version));
        CHECK(t.shape() == Shape{2});
        CHECK(t.to_vector<float>() == std::vector<float>{1.5f, -2.f});
    }
    // Bool bytes other than 0 and 1 are true, as in numpy.
    Tensor m = parse_npy(npy_with_header("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                                         std::string("\x00\x02\xff", 3)));
    CHECK(m.to_vector<bool>() == std::vector<bool>{false, true, true});
}

TEST_CASE("npy rejects bad headers with a clear message", "[npz]") {
    auto hdr = [](const std::string& descr, const std::string& order, const std::string& shape) {
        return fmt::format("{{'descr': {}, 'fortran_order': {}, 'shape': {}, }}", descr, order, shape);
    };
    const std::string eight(8, '\0');
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("'<i4'", "False", "(2,)"), eight), "w.npy"),
                      Catch::Contains("w.npy") && Catch::Contains("'<i4'") && Catch::Contains("not supported"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("'>f4'", "False", "(2,)"), eight)),
                      Catch::Contains("big-endian"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("'<U3'", "False", "(2,)"), eight)),
                      Catch::Contains("'<U3'"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("[('a', '<f4')]", "False", "(2,)"), eight)),
                      Catch::Contains("structured"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("'<f4'", "True", "(1, 2)"), eight)),
                      Catch::Contains("Fortran order"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("'<f4'", "0", "(2,)"), eight)),
                      Catch::Contains("True or False"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("'<f4'", "False", "(2)"), eight)),
                      Catch::Contains("not a tuple"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("'<f4'", "False", "(-2,)"), eight)),
                      Catch::Contains("non-negative integer"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header("{'descr': '<f4', 'shape': (2,), }", eight)),
                      Catch::Contains("lacks the key 'fortran_order'"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), "
                                                "'extra': 1}", eight)),
                      Catch::Contains("unexpected key 'extra'"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                                                "'shape': (2,)}", eight)),
                      Catch::Contains("repeats the key 'descr'"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("'<f4'", "False", "(2,)") + " x", eight)),
                      Catch::Contains("after the header"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header("{'descr': '<f4", eight)), Catch::Contains("unterminated"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("'<f4'", "False", "(2,)"), eight, std::string("\x04\x00", 2))),
                      Catch::Contains("version 4.0"));
}

TEST_CASE("npy checks the shape against the data present", "[npz]") {
    auto hdr = [](const std::string& shape) {
        return fmt::format("{{'descr': '<f8', 'fortran_order': False, 'shape': {}, }}", shape);
    };
    const std::string sixteen(16, '\0');
    CHECK_NOTHROW(parse_npy(npy_with_header(hdr("(2,)"), sixteen)));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("(3,)"), sixteen), "x.npy"),
                      Catch::Contains("x.npy") && Catch::Contains("truncated") && Catch::Contains("(3,)") &&
                          Catch::Contains("24 bytes"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("(1,)"), sixteen)), Catch::Contains("trailing"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("()"), sixteen)), Catch::Contains("trailing"));
    // Products that overflow 64 bits, or whose byte size does: refused before any allocation.
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("(4294967296, 4294967296)"), sixteen)),
                      Catch::Contains("too large"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("(1152921504606846976,)"), sixteen)),
                      Catch::Contains("too large"));
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("(99999999999999999999,)"), sixteen)),
                      Catch::Contains("64 bits"));
    // Huge but finite: more bytes than present.
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("(1000000000000,)"), sixteen)),
                      Catch::Contains("truncated"));
    // A zero anywhere makes the array empty, as long as the other dimensions stay in range.
    CHECK(parse_npy(npy_with_header(hdr("(0, 1000000000000)"))).numel() == 0);
    CHECK_THROWS_WITH(parse_npy(npy_with_header(hdr("(0, 4294967296, 4294967296)"))),
                      Catch::Contains("too large"));
}

TEST_CASE("npy rejects empty, foreign and truncated bytes", "[npz]") {
    CHECK_THROWS_WITH(parse_npy("", "a.npy"), Catch::Contains("a.npy") && Catch::Contains("empty"));
    CHECK_THROWS_WITH(parse_npy("PK\x03\x04 something"), Catch::Contains("bad magic"));
    CHECK_THROWS_WITH(parse_npy("\x93NUM"), Catch::Contains("truncated"));
    const std::string good = npy_bytes(sample({2, 3}, kFloat64));
    for (std::size_t len = 0; len < good.size(); ++len) {
        INFO("length " << len);
        CHECK_THROWS_AS(parse_npy(good.substr(0, len)), Error);
    }
    // A header length that points past the end.
    std::string b = good;
    put16_at(b, 8, 0xfff0);
    CHECK_THROWS_WITH(parse_npy(b), Catch::Contains("header claims"));
}

TEST_CASE("npz rejects empty, foreign and truncated bytes", "[npz]") {
    const std::string good = npz_bytes({{"a", sample({2, 3}, kFloat32)}, {"b.c", sample({4}, kInt64)}});
    CHECK_THROWS_WITH(parse_npz("", "m.npz"), Catch::Contains("m.npz") && Catch::Contains("empty"));
    CHECK_THROWS_WITH(parse_npz("hello, world, this is text and not a zip"), Catch::Contains("bad magic"));
    CHECK_THROWS_WITH(parse_npz(npy_bytes(sample({2}, kFloat32))), Catch::Contains("load_npy"));
    for (std::size_t len = 1; len < good.size(); ++len) {
        INFO("length " << len);
        CHECK_THROWS_AS(parse_npz(good.substr(0, len)), Error);
    }
    CHECK_THROWS_WITH(parse_npz(good.substr(0, good.size() - 1)), Catch::Contains("end-of-central-directory"));
    CHECK_THROWS_WITH(parse_npz(good + "junk"), Catch::Contains("end-of-central-directory"));
    CHECK_THROWS_WITH(parse_npz(good.substr(0, 3)), Catch::Contains("bad magic"));
}

TEST_CASE("npz verifies CRC-32 and the zip structure", "[npz]") {
    const NamedTensors arrays = {{"abcd", sample({2, 3}, kFloat32)}, {"step", sample({}, kInt64)}};
    const std::string good = npz_bytes(arrays);
    const std::size_t cd = find_sig(good, "PK\x01\x02"), end = find_sig(good, "PK\x05\x06");

    std::string b = good;
    b[30 + 8 + 128 + 5] ^= 0x10;  // a value byte of "abcd"
    CHECK_THROWS_WITH(parse_npz(b, "m.npz"), Catch::Contains("m.npz") && Catch::Contains("CRC-32 mismatch") &&
                                                 Catch::Contains("'abcd.npy'"));
    b = good;
    put32_at(b, cd + 16, 0x12345678);  // central CRC of the first member
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("disagrees") || Catch::Contains("CRC"));

    b = good;  // a member that is not an array (same name length, so the layout holds)
    b.replace(30 + 4, 4, ".txt");
    b.replace(cd + 46 + 4, 4, ".txt");
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("'abcd.txt'") && Catch::Contains("not an .npy"));

    b = good;  // local and central names differ
    b[30] = 'x';
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("disagrees"));

    b = good;
    put16_at(b, cd + 8, 1);  // encrypted flag
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("encrypted"));

    b = good;
    put16_at(b, cd + 10, 12);  // bzip2
    put16_at(b, 8, 12);
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("compression method 12"));

    b = good;
    put32_at(b, cd + 20, 0xffffffff);  // zip64 size marker
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("zip64"));
    b = good;
    put16_at(b, end + 8, 0xffff);
    put16_at(b, end + 10, 0xffff);
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("zip64"));

    b = good;
    put32_at(b, end + 16, static_cast<std::uint32_t>(good.size()));  // directory offset past the end
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("central directory") && Catch::Contains("outside"));
    b = good;
    put16_at(b, end + 10, 3);  // claims three entries
    put16_at(b, end + 8, 3);
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("entry 3 of 3"));
    b = good;
    put16_at(b, end + 10, 1);  // claims one entry: bytes left over
    put16_at(b, end + 8, 1);
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("after its 1 entries"));
    b = good;
    put32_at(b, cd + 42, 0x00ffffff);  // local header offset out of range
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("local header"));
    b = good;
    put32_at(b, cd + 20, 0x7fffffff);  // sizes that run past the directory
    put32_at(b, cd + 24, 0x7fffffff);
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("runs past"));

    // Two members with one name.
    std::string twice = npz_bytes({{"abcd", sample({1}, kFloat32)}, {"abce", sample({1}, kFloat32)}});
    const std::size_t cd2 = find_sig(twice, "PK\x01\x02");
    const std::size_t cd2b = find_sig(twice, "PK\x01\x02", cd2 + 1);
    const std::size_t local2 = find_sig(twice, "PK\x03\x04", 1);
    twice[local2 + 30 + 3] = 'd';
    twice[cd2b + 46 + 3] = 'd';
    CHECK_THROWS_WITH(parse_npz(twice), Catch::Contains("'abcd' appears twice"));
}

TEST_CASE("npz reads np.savez_compressed members (deflate)", "[npz]") {
    NamedTensors a = parse_npz(bytes_of(kNumpySavezCompressed));
    REQUIRE(a.size() == 1);
    CHECK(a[0].first == "a");
    CHECK(a[0].second.dtype() == kFloat32);
    CHECK(a[0].second.to_vector<float>() == std::vector<float>{1, 1, 1});

    NamedTensors m = parse_npz(bytes_of(kNumpySavezCompressedDynamic));
    REQUIRE(m.size() == 1);
    CHECK(m[0].first == "mask");
    REQUIRE(m[0].second.dtype() == kBool);
    REQUIRE(m[0].second.shape() == Shape{1500});
    std::vector<std::size_t> on;
    const auto mv = m[0].second.to_vector<bool>();
    for (std::size_t i = 0; i < mv.size(); ++i)
        if (mv[i]) on.push_back(i);
    REQUIRE(on.size() == 152);
    CHECK(std::vector<std::size_t>(on.begin(), on.begin() + 5) == std::vector<std::size_t>{2, 3, 11, 13, 20});
    CHECK(std::vector<std::size_t>(on.end() - 3, on.end()) == std::vector<std::size_t>{1477, 1483, 1487});

    NamedTensors s = parse_npz(bytes_of(kZipDeflateStored));
    REQUIRE(s.size() == 1);
    CHECK(s[0].second.to_vector<double>() == std::vector<double>{0, 1.5, 3, 4.5});
}

TEST_CASE("npz: corrupt or truncated deflate data is caught", "[npz]") {
    for (const std::string& good : {bytes_of(kNumpySavezCompressed), bytes_of(kNumpySavezCompressedDynamic),
                                    bytes_of(kZipDeflateStored), npz_compressed_bytes({{"x", sample({3, 5}, kFloat64)}})}) {
        const NamedTensors want = parse_npz(good);
        const std::size_t cd = find_sig(good, "PK\x01\x02");
        for (std::size_t i = 0; i < cd; ++i) {  // every byte of the member, header and data
            for (unsigned char mask : {0x01, 0x10, 0xff}) {
                std::string b = good;
                b[i] = static_cast<char>(b[i] ^ mask);
                INFO("byte " << i << " ^ " << int(mask));
                try {
                    NamedTensors back = parse_npz(b);
                    REQUIRE(back.size() == 1);
                    CHECK(identical(back[0].second, want[0].second));
                } catch (const Error&) {
                }
            }
        }
    }
    // The message says what is wrong: here the declared size disagrees with the .npy header the
    // member starts with, which is found before any of the data is inflated.
    std::string b = bytes_of(kNumpySavezCompressed);
    const std::size_t cd = find_sig(b, "PK\x01\x02");
    put32_at(b, cd + 24, 141);
    put32_at(b, 22, 141);
    CHECK_THROWS_WITH(parse_npz(b, "c.npz"), Catch::Contains("c.npz") && Catch::Contains("'a.npy'") &&
                                                 Catch::Contains("141") && Catch::Contains("140 bytes") &&
                                                 Catch::Contains("(3,) of float32"));
    b = bytes_of(kNumpySavezCompressed);
    put32_at(b, cd + 24, 100);  // smaller than the .npy header itself
    put32_at(b, 22, 100);
    CHECK_THROWS_WITH(parse_npz(b), Catch::Contains("inflates to 100 bytes") && Catch::Contains("header alone"));
}

TEST_CASE("npz_compressed_bytes round trips every dtype and shape, bit for bit", "[npz]") {
    const std::vector<Shape> shapes = {{}, {0}, {1}, {5}, {2, 3}, {0, 3}, {3, 0}, {2, 0, 4}, {2, 3, 4}, {1, 1, 1, 7}};
    NamedTensors arrays;
    for (Dtype d : {kFloat32, kFloat64, kInt64, kBool})
        for (const Shape& s : shapes)
            arrays.emplace_back(fmt::format("{}{}", dtype_name(d), shape_str(s)), sample(s, d, arrays.size()));
    for (const auto& [name, t] : arrays) {  // each alone, then all in one archive
        INFO(name);
        check_same_arrays(parse_npz(npz_compressed_bytes({{name, t}})), {{name, t}});
    }
    const std::string b = npz_compressed_bytes(arrays);
    check_same_arrays(parse_npz(b), arrays);

    // Deflated members of the same .npy bytes that save_npz stores.
    const auto deflated = members_of(b), stored = members_of(npz_bytes(arrays));
    REQUIRE(deflated.size() == arrays.size());
    for (std::size_t i = 0; i < arrays.size(); ++i) {
        INFO(arrays[i].first);
        CHECK(deflated[i].name == stored[i].name);
        CHECK(deflated[i].method == 8);
        CHECK(stored[i].method == 0);
        CHECK(deflated[i].crc == stored[i].crc);
        CHECK(deflated[i].usize == stored[i].usize);
    }
    CHECK(parse_npz(npz_compressed_bytes({})).empty());
    // Random doubles barely compress: the deflated member outgrows the writer's first buffer.
    const NamedTensors big = {{"big", sample({300, 300}, kFloat64)}};
    check_same_arrays(parse_npz(npz_compressed_bytes(big)), big);

    // Data that repeats shrinks.
    const NamedTensors mask = {{"mask", zeros({4096}, kBool)}};
    CHECK(npz_compressed_bytes(mask).size() * 20 < npz_bytes(mask).size());

    // To a file, atomically, as save_npz.
    TempDir dir;
    const std::string target = dir / "c.npz";
    save_npz_compressed(target, arrays);
    CHECK(slurp(target) == b);
    check_same_arrays(load_npz(target), arrays);
    CHECK_THROWS_WITH(save_npz_compressed(target, {{"w", zeros({3})}, {"w", zeros({3})}}), Catch::Contains("twice"));
    CHECK_THROWS_WITH(save_npz_compressed(dir / "no/such/folder/c.npz", arrays),
                      Catch::Contains("save_npz_compressed") && Catch::Contains("no/such/folder/c.npz"));
    CHECK(slurp(target) == b);
    CHECK(dir.entries() == std::vector<std::string>{"c.npz"});
}

TEST_CASE("npz reads numpy.savez_compressed files, and save_npz still writes the same bytes", "[npz]") {
    const NamedTensors want = reference_arrays();
    const std::string numpy = test_data("npz/numpy-savez-compressed.npz");
    check_same_arrays(parse_npz(numpy, "numpy-savez-compressed.npz"), want);
    // Uncompressed stays the default, byte for byte what save_npz wrote before it could deflate,
    // so existing checkpoints and their checksums do not change.
    const std::string before = test_data("npz/xgrad-savez.npz");
    CHECK(npz_bytes(want) == before);
    check_same_arrays(parse_npz(before), want);
    // The compressed writer deflates the same .npy bytes numpy does: same CRC-32s and sizes.
    // (With Debian 12's zlib the deflate streams are identical too, but that is zlib's choice.)
    const auto ours = members_of(npz_compressed_bytes(want)), numpys = members_of(numpy);
    REQUIRE(ours.size() == numpys.size());
    for (std::size_t i = 0; i < ours.size(); ++i) {
        INFO(numpys[i].name);
        CHECK(ours[i].name == numpys[i].name);
        CHECK(ours[i].method == numpys[i].method);
        CHECK(ours[i].crc == numpys[i].crc);
        CHECK(ours[i].usize == numpys[i].usize);
    }
}

TEST_CASE("npz: a deflate bomb is refused before it allocates", "[npz]") {
    // Declared sizes that the compressed bytes cannot reach (deflate expands 1032 times at most):
    // refused from the directory alone, nothing inflated.
    std::string b = bytes_of(kNumpySavezCompressed);
    const std::size_t cd = find_sig(b, "PK\x01\x02");
    for (std::uint32_t claim : {0xfffffff0u, 0x7fffffffu, 1u << 24}) {
        INFO(claim);
        put32_at(b, 22, claim);
        put32_at(b, cd + 24, claim);
        CHECK_THROWS_WITH(parse_npz(b, "bomb.npz"), Catch::Contains("bomb.npz") && Catch::Contains("'a.npy'") &&
                                                        Catch::Contains("deflate can expand"));
    }
    // An .npy header that agrees with a 400 MB declared size, and a stream holding only it.
    const std::string header_only =
        npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000,), }");
    CHECK_THROWS_WITH(parse_npz(one_member_zip("h.npy", 8, stored_block(header_only, true),
                                               static_cast<std::uint32_t>(header_only.size()) + 400000000u, 0)),
                      Catch::Contains("'h.npy'") && Catch::Contains("deflate can expand"));
    // Within reach, but 128 bytes short of the 8 MB of float64 zeros its .npy header describes.
    CHECK_THROWS_WITH(parse_npz(test_data("fuzz-regressions/handmade-npz-deflate-size-disagrees.npz")),
                      Catch::Contains("'w.npy'") && Catch::Contains("inflates to 8000000 bytes") &&
                          Catch::Contains("makes it 8000128 bytes") && Catch::Contains("refused before inflating"));

    // A real bomb: the member declares the 144 bytes of a float32 (4,) .npy, and its header
    // agrees, but the stream goes on for 32 MiB more (a stored block holding the .npy, then a
    // deflate stream of zeros). Reading stops at the declared size, so the peak memory of the
    // read stays far below those 32 MiB.
    const std::string bomb = test_data("fuzz-regressions/handmade-npz-deflate-bomb.npz");
    const long before = reset_peak_rss_kib();
    CHECK_THROWS_WITH(parse_npz(bomb, "bomb.npz"), Catch::Contains("bomb.npz") && Catch::Contains("'a.npy'") &&
                                                       Catch::Contains("more than the 144 bytes"));
    if (before < 0) {
        WARN("/proc/self/clear_refs is not available: the bomb's memory use is not measured");
    } else {
        CHECK(peak_rss_kib() - before < 8 * 1024);
    }
}

TEST_CASE("npz: short, cut, mislabelled or mis-summed deflate members give clear errors", "[npz]") {
    // numpy's deflated ones(3) of kNumpySavezCompressed, and the same .npy stored by hand.
    const Tensor t = from_vector(std::vector<double>{1, 1, 1}, {3});
    const std::string npy = npy_bytes(t);  // 140 bytes
    const std::string numpy = bytes_of(kNumpySavezCompressed);
    const MemberInfo info = members_of(numpy).at(0);
    const std::string deflated = member_data(numpy, info);
    auto zip = [&](std::uint16_t method, const std::string& data, std::uint32_t crc_change = 0) {
        return one_member_zip("t.npy", method, data, static_cast<std::uint32_t>(npy.size()), info.crc ^ crc_change);
    };
    // The hand-made streams are right when whole, so what fails below fails for the reason named.
    check_same_arrays(parse_npz(zip(8, deflated)), {{"t", t}});
    check_same_arrays(parse_npz(zip(8, stored_block(npy, true))), {{"t", t}});
    check_same_arrays(parse_npz(zip(8, stored_block(npy.substr(0, 100), false) + stored_block(npy.substr(100), true))),
                      {{"t", t}});

    // The .npy header agrees with the declared size, but the stream ends short of it.
    CHECK_THROWS_WITH(parse_npz(zip(8, stored_block(npy.substr(0, 136), true)), "s.npz"),
                      Catch::Contains("s.npz") && Catch::Contains("'t.npy'") &&
                          Catch::Contains("inflates to 136 bytes, but the archive says 140"));
    // Cut off: inside a block, after a block that is not the last, and zlib's own stream cut.
    CHECK_THROWS_WITH(parse_npz(zip(8, stored_block(npy, true).substr(0, 100))),
                      Catch::Contains("'t.npy'") && Catch::Contains("ends early (truncated)"));
    CHECK_THROWS_WITH(parse_npz(zip(8, stored_block(npy, false))), Catch::Contains("ends early (truncated)"));
    CHECK_THROWS_WITH(parse_npz(zip(8, deflated.substr(0, deflated.size() - 1))),
                      Catch::Contains("'t.npy'") && Catch::Contains("compressed data"));
    // A CRC-32 that does not match the inflated bytes.
    CHECK_THROWS_WITH(parse_npz(zip(8, deflated, 1), "c.npz"),
                      Catch::Contains("c.npz") && Catch::Contains("CRC-32 mismatch") && Catch::Contains("'t.npy'"));
    // Method codes: deflate over bytes that are not deflate, stored over deflate, and others.
    CHECK_THROWS_WITH(parse_npz(zip(8, std::string(4, '\xff') + npy)),
                      Catch::Contains("'t.npy'") && Catch::Contains("corrupt compressed data"));
    CHECK_THROWS_WITH(parse_npz(zip(0, deflated)), Catch::Contains("'t.npy'") && Catch::Contains("stored but its sizes differ"));
    for (std::uint16_t method : {1, 9, 12, 14, 93}) {
        INFO(method);
        CHECK_THROWS_WITH(parse_npz(zip(method, deflated)),
                          Catch::Contains("'t.npy'") && Catch::Contains(fmt::format("compression method {}", method)));
    }
}

TEST_CASE("npz: any single corrupted byte is caught or harmless", "[npz]") {
    // Each byte flipped in turn: the reader either throws xgrad::Error or returns the same
    // arrays (fields it does not use, such as timestamps, may change freely). Never a crash,
    // never silently different values.
    const NamedTensors arrays = {{"w.x", sample({3, 2}, kFloat32)}, {"n", sample({2}, kInt64)},
                                 {"m", sample({3}, kBool)}};
    const std::string good = npz_bytes(arrays);
    for (std::size_t i = 0; i < good.size(); ++i) {
        for (unsigned char mask : {0x01, 0x80, 0xff}) {
            std::string b = good;
            b[i] = static_cast<char>(b[i] ^ mask);
            INFO("byte " << i << " ^ " << int(mask));
            try {
                NamedTensors back = parse_npz(b);
                REQUIRE(back.size() == arrays.size());
                for (std::size_t k = 0; k < arrays.size(); ++k) {
                    CHECK(back[k].first == arrays[k].first);
                    CHECK(identical(back[k].second, arrays[k].second));
                }
            } catch (const Error&) {
            }
        }
    }
    // And random garbage, including garbage that starts like a zip.
    std::mt19937 rng(5);
    for (int trial = 0; trial < 2000; ++trial) {
        std::string b(rng() % 200, '\0');
        for (auto& c : b) c = static_cast<char>(rng());
        if (trial % 2 == 0 && b.size() >= 4) b.replace(0, 4, "PK\x03\x04");
        if (trial % 4 == 0 && b.size() >= 26) {  // an end record with no comment: parsing goes deeper
            b.replace(b.size() - 22, 4, "PK\x05\x06");
            b[b.size() - 2] = b[b.size() - 1] = '\0';
        }
        CHECK_THROWS_AS(parse_npz(b), Error);
    }
}

TEST_CASE("npz writing checks names and tensors", "[npz]") {
    CHECK_THROWS_WITH(npz_bytes({{"a", zeros({1})}, {"a", zeros({2})}}), Catch::Contains("'a' appears twice"));
    CHECK_THROWS_WITH(npz_bytes({{"", zeros({1})}}), Catch::Contains("non-empty"));
    CHECK_THROWS_WITH(npz_bytes({{"a", Tensor()}}), Catch::Contains("'a'") && Catch::Contains("undefined"));
    CHECK_THROWS_WITH(npy_bytes(Tensor()), Catch::Contains("undefined"));
}

TEST_CASE("load_npz and load_npy name the file on I/O errors", "[npz]") {
    TempDir dir;
    CHECK_THROWS_WITH(load_npz(dir / "missing.npz"),
                      Catch::Contains("load_npz") && Catch::Contains("missing.npz") &&
                          Catch::Contains("No such file"));
    CHECK_THROWS_WITH(load_npy(dir / "missing.npy"), Catch::Contains("missing.npy"));
    spit(dir / "empty.npz", "");
    CHECK_THROWS_WITH(load_npz(dir / "empty.npz"), Catch::Contains("empty.npz") && Catch::Contains("empty"));
    spit(dir / "cut.npz", npz_bytes({{"a", zeros({10})}}).substr(0, 60));
    CHECK_THROWS_WITH(load_npz(dir / "cut.npz"), Catch::Contains("cut.npz") && Catch::Contains("truncated"));
    CHECK_THROWS_WITH(load_npz(dir.path.string()), Catch::Contains("load_npz"));  // a folder
}

TEST_CASE("save_npz is atomic: a failed write leaves the old file and no temporary", "[npz]") {
    TempDir dir;
    const std::string target = dir / "model.npz";
    const NamedTensors old_state = {{"w", sample({4}, kFloat32)}};
    save_npz(target, old_state);
    const std::string old_bytes = slurp(target);

    // A folder that does not exist: nothing can be created.
    CHECK_THROWS_WITH(save_npz(dir / "no/such/folder/model.npz", old_state),
                      Catch::Contains("save_npz") && Catch::Contains("no/such/folder/model.npz") &&
                          Catch::Contains("'" + dir / "no/such/folder" + "' does not exist"));

    // The write itself fails half-way: a file-size limit below the size of the new archive.
    {
        const NamedTensors big = {{"w", sample({4}, kFloat32)}, {"big", zeros({1 << 16})}};
        const FileSizeLimit full_disk(4096);
        bool threw = false;
        std::string message;
        try {
            save_npz(target, big);
        } catch (const Error& e) {
            threw = true;
            message = e.what();
        }
        CHECK(threw);
        CHECK_THAT(message, Catch::Contains("model.npz") && Catch::Contains("write failed"));
    }
    CHECK(slurp(target) == old_bytes);
    CHECK(dir.entries() == std::vector<std::string>{"model.npz"});

    // Bad input found part-way through the archive (after the first member was written).
    CHECK_THROWS_WITH(save_npz(target, {{"w", zeros({3})}, {"w", zeros({3})}}), Catch::Contains("twice"));
    CHECK(slurp(target) == old_bytes);
    CHECK(dir.entries() == std::vector<std::string>{"model.npz"});

    // The target is a non-empty folder: refused before anything is written.
    fs::create_directory(dir / "taken.npz");
    spit(dir / "taken.npz/keep", "x");
    CHECK_THROWS_WITH(save_npz(dir / "taken.npz", old_state), Catch::Contains("is a directory, not a regular file"));
    CHECK(slurp(dir / "taken.npz/keep") == "x");
    CHECK(dir.entries() == std::vector<std::string>{"model.npz", "taken.npz"});

    // A successful write replaces the file.
    const NamedTensors new_state = {{"w", sample({4}, kFloat32, 9)}};
    save_npz(target, new_state);
    CHECK(identical(load_npz(target)[0].second, new_state[0].second));
    CHECK(dir.entries() == std::vector<std::string>{"model.npz", "taken.npz"});
}
