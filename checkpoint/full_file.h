// A consolidated checkpoint file (model.h5: every tensor whole, in its own shape) written by every
// rank of the shard group at once, each its own pieces, straight to their places in the one file:
//   1. world rank 0 creates the file with a dataset per tensor, allocated but not written, and
//      reads where each dataset's bytes start (create_full_file);
//   2. every writer pwrite()s its shard's pieces there and syncs them (write_full_pieces), and
//      returns the checksums of the parts of each checksum block it wrote;
//   3. world rank 0 combines the parts into each block's checksum (full_slices).
// No rank gathers a unit; the ranks write side by side. Readers see an ordinary file: contiguous
// little-endian fp32 datasets, as any HDF5 writer would leave them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "runtime/fsdp/shard_layout.h"

namespace shardtune::checkpoint {

// One flat parameter's state of one kind (its shard, or a moment of it): its tensors' datasets go
// in group /<kind>/ under the tensors' names.
struct FullUnit {
  std::string kind;
  const fsdp::FlatLayout* layout = nullptr;
  int shard_rank = 0;  // which shard of the layout this rank holds
  at::Tensor shard;    // any device and dtype; written as fp32: the shard, or the part this rank writes
  // The block checksums of its slices (layout->pieces_in_shard(shard_rank), in order), when taken
  // of this very memory as the optimizer last wrote it (checkpoint/update_crcs.h); else empty, and
  // the writer computes them. Used only where the shard is written in place, as fp32 on the host.
  std::vector<std::vector<uint32_t>> crcs;
  int64_t shard_begin = 0;  // where `shard` starts in the rank's shard (replicas write a part each)
};

// The pieces of parameters `unit.shard` holds (FlatLayout::pieces_in_part), their shard_offset
// counted from its start.
std::vector<fsdp::ShardPiece> unit_pieces(const FullUnit& unit);

// What one rank wrote of one checksum block of a tensor.
struct CrcPart {
  int64_t tensor = 0;  // index over the units' tensors, in order
  int64_t start = 0;   // element within the tensor
  int64_t length = 0;
  uint32_t crc = 0;
};

// A dataset of a file laid out before its bytes are written: /<group>/<name>, fp32, of `shape`.
struct DatasetSpec {
  std::string group, name;
  std::vector<int64_t> shape;
};

// Creates `path` (which must not exist) with every group of `groups` and a dataset per spec,
// contiguous, allocated and never filled (its bytes are the writer's); returns the byte offset in
// the file of each spec's dataset (-1 for one without elements). The file is closed: its bytes go
// in with pwrite() (write_full_pieces, common::WriteBehind, common::DirectWriter). `alignment` > 0:
// every dataset of at least that many bytes starts at a multiple of it (for O_DIRECT writes).
std::vector<int64_t> create_contiguous_file(const std::string& path, const std::vector<std::string>& groups,
                                            const std::vector<DatasetSpec>& specs, int64_t alignment = 0);

// World rank 0: creates `path` (which must not exist), its groups and every dataset; returns the
// byte offset in the file of each tensor, in the order of the units and their parameters (-1 for a
// tensor without elements).
std::vector<int64_t> create_full_file(const std::string& path, const std::vector<FullUnit>& units);

// Every writer: its pieces of every unit at `offsets` in the file, synced to disk. Returns the
// checksums of the parts of blocks (`block` elements from each tensor's start) it wrote.
std::vector<CrcPart> write_full_pieces(const std::string& path, const std::vector<FullUnit>& units,
                                       const std::vector<int64_t>& offsets, int64_t block = kCrcBlock);

// World rank 0: the manifest's slices of the file, each block's checksum combined from the parts
// every writer reported. Throws common::Error(kInternal) unless the parts cover every block exactly.
std::vector<ManifestSlice> full_slices(const std::vector<FullUnit>& units, const std::string& file_name,
                                       std::vector<CrcPart> parts, int64_t block = kCrcBlock);

std::string offsets_text(const std::vector<int64_t>& offsets);
std::vector<int64_t> parse_offsets_text(const std::string& text);
std::string crc_parts_text(const std::vector<CrcPart>& parts);
std::vector<CrcPart> parse_crc_parts_text(const std::string& text);

}  // namespace shardtune::checkpoint
