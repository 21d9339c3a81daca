// bitsandbytes 4-bit folders.
#include "checkpoint/hf/bnb_nf4.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "common/error.h"
#include "runtime/model/llama_config.h"

namespace shardtune::checkpoint {
namespace {

using common::ErrorKind;
using nlohmann::json;

constexpr const char* kStateSuffix = ".quant_state.bitsandbytes__";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The whole of a (small) tensor's bytes.
std::vector<uint8_t> bytes_of(const HfFolder& folder, const std::string& name) {
  const TensorInfo& t = folder.info(name);
  std::vector<uint8_t> out(t.nbytes);
  folder.file_of(name).read_bytes(t, 0, t.nbytes, out.data());
  return out;
}

// The folder and the names of its tensors, looked up once.
struct Folder {
  const HfFolder& hf;
  std::set<std::string> names;
};

// A tensor that must exist with this dtype and this many elements; `why` says what it is.
const TensorInfo& expect(const Folder& f, const std::string& name, common::Dtype dtype, int64_t elements,
                         const char* why) {
  const HfFolder& folder = f.hf;
  ST_CHECK(f.names.count(name) != 0, ErrorKind::kConfig, "{}: the 4-bit weight lacks {} ({})", folder.dir(), name, why);
  const TensorInfo& t = folder.info(name);
  ST_CHECK(t.dtype == dtype && static_cast<int64_t>(t.nbytes) == elements * static_cast<int64_t>(common::element_size(dtype)),
           ErrorKind::kConfig, "{} in {}: {} {} bytes, expected {} {} ({})", name, folder.file_of(name).path(),
           common::safetensors_name(t.dtype), t.nbytes, elements, common::safetensors_name(dtype), why);
  return t;
}

// A stored value table must be bitsandbytes' own, bit for bit: dequantising with another would not
// be bitsandbytes' arithmetic.
void expect_table(const Folder& f, const std::string& name, const float* want, size_t n, const char* what) {
  const HfFolder& folder = f.hf;
  expect(f, name, common::Dtype::kF32, static_cast<int64_t>(n), what);
  const std::vector<uint8_t> raw = bytes_of(folder, name);
  for (size_t i = 0; i < n; ++i) {
    float got = 0;
    std::memcpy(&got, raw.data() + 4 * i, 4);
    ST_CHECK(std::memcmp(&got, &want[i], 4) == 0, ErrorKind::kConfig,
             "{} in {}: value {} is {:.9g}, bitsandbytes' {} has {:.9g} there (a map from another build or version "
             "of bitsandbytes, which shardtune does not dequantise)",
             name, folder.file_of(name).path(), i, got, what, want[i]);
  }
}

BnbNf4Weight read_weight(const Folder& f, const std::string& state_name) {
  const HfFolder& folder = f.hf;
  const std::string weight = state_name.substr(0, state_name.find(kStateSuffix));
  const std::string where = fmt::format("{} in {}", state_name, folder.file_of(state_name).path());
  const std::string kind = state_name.substr(state_name.find(kStateSuffix) + std::strlen(kStateSuffix));
  ST_CHECK(kind == "nf4", ErrorKind::kConfig, "{}: quant_type {}: only NF4 bases are supported (bnb_4bit_quant_type = \"nf4\")",
           where, kind);
  const std::vector<uint8_t> raw = bytes_of(folder, state_name);
  json state;
  try {
    state = json::parse(raw.begin(), raw.end());
  } catch (const json::exception& e) {
    common::raise(ErrorKind::kConfig, fmt::format("{}: not valid JSON: {}", where, e.what()));
  }
  auto field = [&](const char* key) -> const json& {
    ST_CHECK(state.is_object() && state.contains(key), ErrorKind::kConfig, "{}: no \"{}\"", where, key);
    return state.at(key);
  };
  BnbNf4Weight w;
  w.name = weight;
  ST_CHECK(field("quant_type") == "nf4", ErrorKind::kConfig, "{}: quant_type {}: only NF4 is supported", where,
           field("quant_type").dump());
  ST_CHECK(field("blocksize").is_number_integer(), ErrorKind::kConfig, "{}: blocksize {} is not an integer", where,
           field("blocksize").dump());
  w.format.block_size = field("blocksize").get<int64_t>();
  quant::check_format(w.format);
  const json& shape = field("shape");
  ST_CHECK(shape.is_array() && !shape.empty(), ErrorKind::kConfig, "{}: shape {} is not a list", where, shape.dump());
  w.numel = 1;
  for (const json& d : shape) {
    ST_CHECK(d.is_number_integer() && d.get<int64_t>() > 0, ErrorKind::kConfig, "{}: shape {} is not a list of sizes",
             where, shape.dump());
    w.shape.push_back(d.get<int64_t>());
    w.numel *= w.shape.back();
  }
  w.format.double_quant = state.contains("nested_blocksize");
  const int64_t blocks = div_up(w.numel, w.format.block_size);
  const TensorInfo& packed = folder.info(weight);  // throws naming the folder when absent
  ST_CHECK(static_cast<int64_t>(packed.nbytes) * 2 >= w.numel, ErrorKind::kConfig,
           "{} in {}: {} bytes cannot hold the {} codes of shape [{}]", weight, folder.file_of(weight).path(),
           packed.nbytes, w.numel, fmt::join(w.shape, ", "));
  expect_table(f, weight + ".quant_map", quant::nf4_values().data(), 16, "NF4 table");
  if (!w.format.double_quant) {
    expect(f, weight + ".absmax", common::Dtype::kF32, blocks, "an fp32 absmax per block");
    return w;
  }
  ST_CHECK(field("nested_blocksize") == quant::kNestedBlock, ErrorKind::kConfig,
           "{}: nested_blocksize {}: bitsandbytes double-quantises in blocks of 256", where,
           field("nested_blocksize").dump());
  ST_CHECK(field("nested_offset").is_number(), ErrorKind::kConfig, "{}: nested_offset {} is not a number", where,
           field("nested_offset").dump());
  w.offset = static_cast<float>(field("nested_offset").get<double>());
  expect(f, weight + ".absmax", common::Dtype::kU8, blocks, "an 8-bit scale per block");
  expect(f, weight + ".nested_absmax", common::Dtype::kF32, div_up(blocks, quant::kNestedBlock),
         "an fp32 absmax2 per 256 blocks");
  expect_table(f, weight + ".nested_quant_map", quant::dynamic_map().data(), 256, "8-bit dynamic map");
  return w;
}

}  // namespace

bool is_bnb_4bit(const HfFolder& folder) { return model::is_bnb_4bit_config(folder.config()); }

std::map<std::string, BnbNf4Weight> read_bnb_nf4_weights(const HfFolder& folder) {
  std::map<std::string, BnbNf4Weight> out;
  const std::vector<std::string> names = folder.tensor_names();
  const Folder f{folder, {names.begin(), names.end()}};
  for (const std::string& name : names)
    if (name.find(kStateSuffix) != std::string::npos) {
      BnbNf4Weight w = read_weight(f, name);
      out.emplace(w.name, std::move(w));
    }
  return out;
}

bool is_bnb_storage_tensor(const std::string& tensor) {
  for (const char* suffix : {".weight.absmax", ".weight.quant_map", ".weight.nested_absmax", ".weight.nested_quant_map"})
    if (ends_with(tensor, suffix)) return true;
  return tensor.find(kStateSuffix) != std::string::npos;
}

void read_bnb_records(const HfFolder& folder, const BnbNf4Weight& w, int64_t first, int64_t count, uint8_t* out,
                      uint64_t* bytes_read) {
  const quant::Nf4Format& f = w.format;
  const int64_t valid = w.numel - first * f.record_elements();
  const int64_t blocks = div_up(w.numel, f.block_size);
  ST_CHECK(first >= 0 && count > 0 && valid > 0, ErrorKind::kInternal, "records {}..{} of {} ({} elements)", first,
           first + count, w.name, w.numel);
  // A slice [begin, end) of a tensor's elements of `size` bytes each, clipped to what it holds.
  auto slice = [&](const std::string& name, int64_t begin, int64_t end, int64_t size) {
    const TensorInfo& t = folder.info(name);
    const int64_t have = static_cast<int64_t>(t.nbytes) / size;
    end = std::min(end, have);
    std::vector<uint8_t> buf(static_cast<size_t>(std::max<int64_t>(end - begin, 0) * size + 8));
    if (end > begin) {
      folder.file_of(name).read_bytes(t, static_cast<uint64_t>(begin * size), static_cast<uint64_t>((end - begin) * size),
                                      buf.data());
      *bytes_read += static_cast<uint64_t>((end - begin) * size);
    }
    return buf;
  };
  const std::vector<uint8_t> codes =
      slice(w.name, first * f.code_bytes(), std::min((first + count) * f.code_bytes(), div_up(w.numel, 2)), 1);
  std::vector<uint8_t> scales = slice(w.name + ".absmax", first * quant::kNestedBlock,
                                      std::min((first + count) * quant::kNestedBlock, blocks), f.double_quant ? 1 : 4);
  std::vector<uint8_t> absmax2;
  if (f.double_quant) absmax2 = slice(w.name + ".nested_absmax", first, first + count, 4);
  std::vector<float> absmax(f.double_quant ? 0 : scales.size() / 4), second(absmax2.size() / 4);
  if (!f.double_quant) std::memcpy(absmax.data(), scales.data(), absmax.size() * 4);
  std::memcpy(second.data(), absmax2.data(), second.size() * 4);
  quant::pack_records(codes.data(), absmax.data(), scales.data(), second.data(), w.offset, valid, count, f, out);
}

}  // namespace shardtune::checkpoint
