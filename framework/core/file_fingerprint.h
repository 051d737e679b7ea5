// file_fingerprint — a short name for a file's content, so that a run can tell whether the model
// or draft files it reads are the ones an earlier run (a resumed file, another shard) read, when
// their paths differ between machines.
//
//   "<bytes>:<16 hex>"   FNV-1a (framework/core/fnv.h) over the size and the content: all of it
//                        up to kFingerprintWhole bytes; beyond, kFingerprintChunks chunks of
//                        kFingerprintChunk bytes at evenly spaced offsets (first and last
//                        included), so that a 1 GB model costs a 16 MiB read. Two files of one
//                        size that differ only between the chunks get one fingerprint: a retrained
//                        or re-quantised model differs everywhere, which is what it guards against.
//   "<bytes>:<16 hex>"   for a directory (an HF checkpoint): its regular files in name order, each
//                        name with its own fingerprint, hashed again; bytes is their sum.
//   "missing"            nothing at the path, or a file that cannot be read.
#pragma once

#include <cstdint>
#include <string>

namespace speclab {

constexpr int64_t kFingerprintWhole = int64_t(32) << 20;
constexpr int64_t kFingerprintChunks = 512;
constexpr int64_t kFingerprintChunk = int64_t(32) << 10;

std::string file_fingerprint(const std::string& path);

}  // namespace speclab
