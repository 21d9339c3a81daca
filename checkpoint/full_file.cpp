// A consolidated checkpoint file written by every rank of the shard group at once (full_file.h).
#include "checkpoint/full_file.h"

#include <ATen/ops/empty.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>  // crc32_combine: the block checksum from its parts

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>

#include "checkpoint/block_crc.h"
#include "checkpoint/crc32.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_dataset.h"
#include "checkpoint/h5_handle.h"
#include "common/error.h"
#include "common/file_io.h"

namespace shardtune::checkpoint {
namespace {

using common::ErrorKind;
constexpr int64_t kStage = int64_t{4} << 20;  // elements staged at a time for a shard not on the CPU in fp32

// Every tensor of the units, in order: (unit, parameter index).
std::vector<std::pair<const FullUnit*, size_t>> tensors_of(const std::vector<FullUnit>& units) {
  std::vector<std::pair<const FullUnit*, size_t>> out;
  for (const FullUnit& u : units)
    for (size_t p = 0; p < u.layout->params().size(); ++p) out.emplace_back(&u, p);
  return out;
}

// Checksums of `data` (the elements `start`.. of a tensor), cut at the tensor's block boundaries.
void add_parts(std::vector<CrcPart>& parts, int64_t tensor, int64_t start, const float* data, int64_t count,
               int64_t block) {
  while (count > 0) {
    const int64_t n = std::min(count, block - start % block);
    parts.push_back({tensor, start, n, checkpoint::crc32(data, static_cast<size_t>(n) * 4)});
    start += n;
    data += n;
    count -= n;
  }
}

}  // namespace

std::vector<int64_t> create_contiguous_file(const std::string& path, const std::vector<std::string>& groups,
                                            const std::vector<DatasetSpec>& specs, int64_t alignment) {
  H5Handle file = create_checkpoint_file(path, alignment);
  // Space allocated now, in one piece, and never filled: the writers' bytes are the only ones.
  const H5Handle dcpl = contiguous_unfilled_dataset();
  std::map<std::string, H5Handle> made;
  auto group = [&](const std::string& name) -> hid_t {
    auto g = made.find(name);
    if (g == made.end()) g = made.emplace(name, create_group(file.get(), name)).first;
    return g->second.get();
  };
  for (const std::string& g : groups) group(g);
  std::vector<int64_t> offsets;
  for (const DatasetSpec& spec : specs) {
    std::vector<hsize_t> dims(spec.shape.begin(), spec.shape.end());
    hsize_t numel = 1;
    for (hsize_t d : dims) numel *= d;
    H5Handle space(ST_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
    H5Handle ds(ST_H5_CHECK(H5Dcreate2(group(spec.group), spec.name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                       dcpl.get(), H5P_DEFAULT)),
                H5Dclose);
    const haddr_t at = H5Dget_offset(ds.get());
    ST_CHECK(numel == 0 || at != HADDR_UNDEF, ErrorKind::kIo, "{}: no place in the file for {}/{}", path, spec.group,
             spec.name);
    offsets.push_back(numel == 0 ? -1 : static_cast<int64_t>(at));
    ST_H5_CHECK(ds.close());
  }
  for (auto& [name, g] : made) ST_H5_CHECK(g.close());
  ST_H5_CHECK(file.close());  // writes the metadata and sets the file's length to its end
  return offsets;
}

std::vector<fsdp::ShardPiece> unit_pieces(const FullUnit& unit) {
  std::vector<fsdp::ShardPiece> pieces =
      unit.layout->pieces_in_part(unit.shard_rank, {unit.shard_begin, unit.shard_begin + unit.shard.numel()});
  for (fsdp::ShardPiece& p : pieces) p.shard_offset -= unit.shard_begin;
  return pieces;
}

std::vector<int64_t> create_full_file(const std::string& path, const std::vector<FullUnit>& units) {
  std::vector<DatasetSpec> specs;
  for (const auto& [unit, p] : tensors_of(units)) {
    const fsdp::ParamSpan& span = unit->layout->params()[p];
    specs.push_back({unit->kind, span.name, span.shape});
  }
  return create_contiguous_file(path, {}, specs);
}

std::vector<CrcPart> write_full_pieces(const std::string& path, const std::vector<FullUnit>& units,
                                       const std::vector<int64_t>& offsets, int64_t block) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ST_CHECK(fd >= 0, ErrorKind::kIo, "cannot open {}: {}", path, std::strerror(errno));
  std::vector<CrcPart> parts;
  try {
    at::Tensor stage;
    int64_t first = 0;  // the index of the unit's first tensor
    for (const FullUnit& u : units) {
      for (const fsdp::ShardPiece& piece : unit_pieces(u)) {
        if (piece.length == 0) continue;  // a tensor without elements has no place in the file
        const int64_t tensor = first + static_cast<int64_t>(piece.param);
        ST_CHECK(tensor < static_cast<int64_t>(offsets.size()) && offsets[static_cast<size_t>(tensor)] >= 0,
                 ErrorKind::kInternal, "{}: no offset for tensor {}", path, tensor);
        const at::Tensor src = u.shard.narrow(0, piece.shard_offset, piece.length);
        const bool direct = src.device().is_cpu() && src.scalar_type() == at::kFloat && src.is_contiguous();
        for (int64_t done = 0; done < piece.length;) {
          const int64_t n = direct ? piece.length : std::min(kStage, piece.length - done);
          const float* data = nullptr;
          if (direct) {
            data = src.data_ptr<float>();
          } else {
            if (!stage.defined())
              stage = at::empty({kStage}, at::TensorOptions().dtype(at::kFloat).pinned_memory(!src.device().is_cpu()));
            stage.narrow(0, 0, n).copy_(src.narrow(0, done, n));  // converts to fp32; waits for the device
            data = stage.data_ptr<float>();
          }
          const int64_t element = piece.param_offset + done;
          common::pwrite_all(fd, data, static_cast<size_t>(n) * 4, offsets[static_cast<size_t>(tensor)] + element * 4, path);
          add_parts(parts, tensor, element, data, n, block);
          done += n;
        }
      }
      first += static_cast<int64_t>(u.layout->params().size());
    }
    ST_CHECK(::fdatasync(fd) == 0, ErrorKind::kIo, "cannot sync {}: {}", path, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ST_CHECK(::close(fd) == 0, ErrorKind::kIo, "cannot close {}: {}", path, std::strerror(errno));
  return parts;
}

std::vector<ManifestSlice> full_slices(const std::vector<FullUnit>& units, const std::string& file_name,
                                       std::vector<CrcPart> parts, int64_t block) {
  std::sort(parts.begin(), parts.end(),
            [](const CrcPart& a, const CrcPart& b) { return std::tie(a.tensor, a.start) < std::tie(b.tensor, b.start); });
  std::vector<ManifestSlice> slices;
  size_t next = 0;  // the first part not yet used
  int64_t index = 0;
  for (const auto& [unit, p] : tensors_of(units)) {
    const fsdp::ParamSpan& span = unit->layout->params()[p];
    ManifestSlice s{unit->kind, span.name, file_name, span.name, 0, span.numel, block, {}};
    for (int64_t b = 0; b * block < span.numel; ++b) {
      const int64_t begin = b * block, end = std::min(begin + block, span.numel);
      uLong crc = 0;
      int64_t at = begin;
      for (; next < parts.size() && parts[next].tensor == index && parts[next].start < end; ++next) {
        const CrcPart& part = parts[next];
        ST_CHECK(part.start == at && part.start + part.length <= end, ErrorKind::kInternal,
                 "{}: the writers' parts of {}/{} do not tile elements {}..{} (a part at {}, {} elements)", file_name,
                 unit->kind, span.name, begin, end, part.start, part.length);
        crc = crc32_combine(crc, part.crc, static_cast<z_off_t>(part.length * 4));
        at += part.length;
      }
      ST_CHECK(at == end, ErrorKind::kInternal, "{}: no writer wrote elements {}..{} of {}/{}", file_name, at, end,
               unit->kind, span.name);
      s.crcs.push_back(static_cast<uint32_t>(crc));
    }
    ST_CHECK(next == parts.size() || parts[next].tensor != index, ErrorKind::kInternal,
             "{}: a part beyond the end of {}/{}", file_name, unit->kind, span.name);
    slices.push_back(std::move(s));
    ++index;
  }
  ST_CHECK(next == parts.size(), ErrorKind::kInternal, "{}: parts of tensors that are not in the file", file_name);
  return slices;
}

std::string offsets_text(const std::vector<int64_t>& offsets) {
  std::string out;
  for (int64_t o : offsets) out += fmt::format("{}\n", o);
  return out;
}

std::vector<int64_t> parse_offsets_text(const std::string& text) {
  std::istringstream in(text);
  std::vector<int64_t> out;
  for (int64_t o = 0; in >> o;) out.push_back(o);
  return out;
}

std::string crc_parts_text(const std::vector<CrcPart>& parts) {
  std::string out;
  for (const CrcPart& p : parts) out += fmt::format("{} {} {} {}\n", p.tensor, p.start, p.length, p.crc);
  return out;
}

std::vector<CrcPart> parse_crc_parts_text(const std::string& text) {
  std::istringstream in(text);
  std::vector<CrcPart> out;
  for (CrcPart p; in >> p.tensor >> p.start >> p.length >> p.crc;) out.push_back(p);
  return out;
}

}  // namespace shardtune::checkpoint
