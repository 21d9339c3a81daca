// Writes one safetensors file tensor by tensor: the header (every name, dtype and shape, known up
// front) first, then each tensor's bytes as it comes, so a shard of any size needs one tensor of
// memory. Committed by rename when finished; an unfinished file is removed.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/atomic_file.h"
#include "common/direct_file.h"

namespace shardtune::checkpoint {

struct StreamedTensor {
  std::string name;
  common::Dtype dtype;
  std::vector<int64_t> shape;
};

class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(std::string path, std::vector<StreamedTensor> tensors,
                          const std::map<std::string, std::string>& metadata = {});
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  // The next tensor, in the order given; converted to its declared dtype.
  void append(const at::Tensor& tensor);
  // The next elements of the tensors in the order given (flattened, row-major), converted to their
  // declared dtypes: a tensor may come in any number of parts, so a writer needs no more memory
  // than one part.
  void append_elements(const at::Tensor& part);
  // After the last tensor: fsync and rename into place.
  void finish();

 private:
  std::string path_;
  std::vector<StreamedTensor> tensors_;
  size_t next_ = 0;       // the tensor being written
  int64_t written_ = 0;   // of its elements
  std::unique_ptr<common::AtomicFile> file_;
  std::unique_ptr<common::DirectWriter> writes_;  // after file_: done with the file before it closes
  uint64_t at_byte_ = 0;                         // where the next bytes go
  static constexpr int64_t kConvertElements = int64_t{4} << 20;
  at::Tensor staging_;  // conversions to the declared dtype, kConvertElements at a time
};

}  // namespace shardtune::checkpoint
