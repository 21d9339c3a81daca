// Where weights come from when they are streamed into shards: element ranges of named tensors,
// converted to the dtype asked for. The loader owns this interface; a Hugging Face folder
// (checkpoint/hf_tensor_source.h) is one implementation. Only the ranks that read ever create one.
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/quant/nf4.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shardtune::fsdp {

struct SourceTensor {
  std::string name;
  std::string stored_dtype;                  // as the storage names it ("BF16", "F8_E4M3", "I64"): for messages
  std::optional<at::ScalarType> trainable;   // the floating type it loads as; nullopt when it cannot be trained
  std::vector<int64_t> shape;
};

// A weight stored already quantised to NF4 (a bitsandbytes 4-bit folder): its logical shape and
// format. Its storage is several tensors of the source (codes, scales, maps, quantisation state).
struct Nf4Stored {
  std::vector<int64_t> shape;
  quant::Nf4Format format;
};

// One range of a tensor to read: elements [offset, offset + count) of `name`, as `dtype`, to `dst`.
struct ReadRequest {
  const std::string* name = nullptr;
  int64_t offset = 0;
  int64_t count = 0;
  at::ScalarType dtype = at::kFloat;
  void* dst = nullptr;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual std::vector<SourceTensor> tensors() const = 0;
  // Elements [offset, offset + count) of `name`, flattened in row-major order, converted to `dtype`,
  // written to `dst`. Reads only those bytes.
  virtual void read(const std::string& name, int64_t offset, int64_t count, at::ScalarType dtype, void* dst) = 0;
  // Every tensor's name, in the order the storage holds them (reading in this order is reading
  // front to back).
  virtual std::vector<std::string> storage_order() const {
    std::vector<std::string> names;
    for (const SourceTensor& t : tensors()) names.push_back(t.name);
    return names;
  }
  // Every request, in whatever order the storage serves best (a disk: in file order).
  virtual void read_batch(std::vector<ReadRequest> requests) {
    for (const ReadRequest& r : requests) read(*r.name, r.offset, r.count, r.dtype, r.dst);
  }
  // A hint that these ranges will be read soon: the storage may start fetching them.
  virtual void prefetch(const std::vector<ReadRequest>& requests) {}
  // Where a tensor is stored (a file path), for error messages; "" when the source cannot say.
  virtual std::string location(const std::string& name) const { return {}; }
  // Bytes read from storage so far.
  virtual uint64_t bytes_read() const = 0;

  // Weights stored in NF4, by name; empty for a source of plain tensors. Their records (runtime/
  // quant/nf4.h) [first, first + count) read straight from storage into `out`, and whether a
  // tensor of the source is part of such a weight's storage rather than a weight of its own.
  virtual std::map<std::string, Nf4Stored> nf4_weights() const { return {}; }
  virtual void read_nf4_records(const std::string& name, int64_t first, int64_t count, uint8_t* out);
  virtual bool nf4_storage(const std::string& name) const { return false; }
};

}  // namespace shardtune::fsdp
