// Manifest reading, validation and writing.
#include "checkpoint/manifest.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "checkpoint/crc32.h"
#include "common/strict_json.h"
#include "common/error.h"
#include "common/file_io.h"

namespace shardtune::checkpoint {

using common::StrictJson;
using common::described;
using common::json_quoted;
using common::parse_json_strict;
namespace {

using common::ErrorKind;
using nlohmann::json;

constexpr const char* kFormat = "shardtune-sharded";
constexpr const char* kChecksumKey = "manifest_crc32";
constexpr size_t kMaxListedProblems = 20;
const json kEmptyObject = json::object();
const json kEmptyArray = json::array();

// The CRC-32 of the manifest as written without its checksum (objects' keys sorted, one-space
// indentation): what the writer summed and what a reader recomputes from the parsed document.
uint32_t checksum_of(const json& without_checksum) {
  const std::string text = without_checksum.dump(1);
  return crc32(text.data(), text.size());
}

// Typed fields, each problem recorded (not thrown) so that every one is reported.
class Fields {
 public:
  explicit Fields(std::vector<std::string>& problems) : problems_(problems) {}

  void problem(std::string text) { problems_.push_back(std::move(text)); }

  const json* get(const json& object, const char* key, const std::string& where, bool required = true) {
    if (!object.is_object()) {
      problem(fmt::format("{} is {}, expected an object", where, described(object)));
      return nullptr;
    }
    auto it = object.find(key);
    if (it == object.end()) {
      if (required) problem(fmt::format("{}: \"{}\" is missing", where, key));
      return nullptr;
    }
    return &*it;
  }

  int64_t integer(const json& object, const char* key, const std::string& where, int64_t min, int64_t fallback = 0,
                  bool required = true) {
    const json* v = get(object, key, where, required);
    if (v == nullptr) return fallback;
    if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) ||
        v->get<int64_t>() < min) {
      problem(fmt::format("{}: \"{}\" is {}, expected an integer of at least {}", where, key, v->dump(), min));
      return fallback;
    }
    return v->get<int64_t>();
  }

  double number(const json& object, const char* key, const std::string& where, double fallback = 0) {
    const json* v = get(object, key, where, false);
    if (v == nullptr) return fallback;
    if (!v->is_number()) {
      problem(fmt::format("{}: \"{}\" is {}, expected a number", where, key, v->dump()));
      return fallback;
    }
    return v->get<double>();
  }

  bool boolean(const json& object, const char* key, const std::string& where, bool fallback = false) {
    const json* v = get(object, key, where, false);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) {
      problem(fmt::format("{}: \"{}\" is {}, expected true or false", where, key, v->dump()));
      return fallback;
    }
    return v->get<bool>();
  }

  std::string string(const json& object, const char* key, const std::string& where, bool required = true) {
    const json* v = get(object, key, where, required);
    if (v == nullptr) return "";
    if (!v->is_string()) {
      problem(fmt::format("{}: \"{}\" is {}, expected a string", where, key, described(*v)));
      return "";
    }
    return v->get<std::string>();
  }

 private:
  std::vector<std::string>& problems_;
};

std::vector<uint32_t> crc_list(const json& v, const std::string& where, Fields& f) {
  std::vector<uint32_t> out;
  if (!v.is_array()) {
    f.problem(fmt::format("{}: \"crc32_blocks\" is {}, expected an array", where, described(v)));
    return out;
  }
  for (const json& c : v) {
    if (!c.is_number_unsigned() || c.get<uint64_t>() > UINT32_MAX) {
      f.problem(fmt::format("{}: a block checksum is {}, expected a 32-bit unsigned integer", where, c.dump()));
      return {};
    }
    out.push_back(c.get<uint32_t>());
  }
  return out;
}

// Each (kind, tensor)'s slices, sorted by offset, must cover [0, numel) exactly once; parameters
// of every tensor must be there, moments of every tensor or of none (frozen tensors have none).
void check_tiling(const Manifest& m, Fields& f, const std::string& where) {
  std::map<std::pair<std::string, std::string>, std::vector<const ManifestSlice*>> by_tensor;
  for (const ManifestSlice& s : m.slices) by_tensor[{s.kind, s.tensor}].push_back(&s);
  for (const auto& [name, tensor] : m.tensors)
    if (!by_tensor.count({kParamKind, name})) f.problem(fmt::format("{}: no slice holds the parameter {}", where, name));
  for (auto& [key, slices] : by_tensor) {
    const auto& [kind, name] = key;
    auto t = m.tensors.find(name);
    if (t == m.tensors.end()) continue;  // reported with the slice
    std::sort(slices.begin(), slices.end(), [](const ManifestSlice* a, const ManifestSlice* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->length < b->length;
    });
    int64_t covered = 0;
    for (const ManifestSlice* s : slices) {
      if (s->offset != covered) {
        f.problem(fmt::format("{}: {} of {}: {} at element {} (slice {} in {}), where element {} comes next", where, kind,
                              name, s->offset < covered ? "slices overlap" : "a gap", covered, s->dataset, s->file,
                              covered));
        covered = std::max(covered, s->offset + s->length);
        continue;
      }
      covered += s->length;
    }
    const int64_t numel = kind_numel(kind, t->second, m.state_block);
    if (covered != numel)
      f.problem(fmt::format("{}: {} of {}: the slices cover {} of its {} elements", where, kind, name, covered, numel));
  }
}

}  // namespace

bool is_scale_kind(const std::string& kind) {
  return std::find(std::begin(kScaleKinds), std::end(kScaleKinds), kind) != std::end(kScaleKinds);
}

bool is_factor_kind(const std::string& kind) {
  return std::find(std::begin(kFactorKinds), std::end(kFactorKinds), kind) != std::end(kFactorKinds);
}

int64_t kind_numel(const std::string& kind, const ManifestTensor& t, int64_t state_block) {
  if (is_factor_kind(kind)) return t.shape.size() != 2 ? -1 : kind == kFactorKinds[0] ? t.shape[0] : t.shape[1];
  if (!is_scale_kind(kind)) return t.numel();
  return state_block > 0 ? (t.numel() + state_block - 1) / state_block : 0;
}

std::vector<int64_t> kind_shape(const std::string& kind, const ManifestTensor& t, int64_t state_block) {
  if (is_scale_kind(kind) || is_factor_kind(kind)) return {kind_numel(kind, t, state_block)};
  return t.shape;
}

int64_t ManifestTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  return std::none_of(name.begin(), name.end(), [](char c) { return c == '/' || static_cast<unsigned char>(c) < 0x20; });
}

namespace {

json slices_json(const std::vector<ManifestSlice>& slices) {
  json out = json::array();
  for (const ManifestSlice& s : slices) {
    out.push_back({{"kind", s.kind}, {"tensor", s.tensor}, {"file", s.file}, {"dataset", s.dataset},
                   {"offset", s.offset}, {"length", s.length}, {"crc32_blocks", s.crcs}});
    if (s.dataset_offset != 0) out.back()["dataset_offset"] = s.dataset_offset;
  }
  return out;
}

}  // namespace

std::string slices_text(const std::vector<ManifestSlice>& slices) { return slices_json(slices).dump(); }

std::vector<ManifestSlice> parse_slices_text(const std::string& text) {
  std::vector<ManifestSlice> out;
  for (const json& s : json::parse(text)) {
    ManifestSlice m{s.at("kind"), s.at("tensor"), s.at("file"), s.at("dataset"), s.at("offset"), s.at("length"),
                    kCrcBlock, s.at("crc32_blocks").get<std::vector<uint32_t>>()};
    m.dataset_offset = s.value("dataset_offset", int64_t{0});
    out.push_back(std::move(m));
  }
  return out;
}

std::string manifest_text(const Manifest& m) {
  json tensors = json::object();
  for (const auto& [name, t] : m.tensors) tensors[name] = {{"shape", t.shape}, {"dtype", t.dtype}};
  const json slices = slices_json(m.slices);
  json j = {{"format", kFormat},
            {"version", kManifestVersion},
            {"layout", m.layout},
            {"step", m.step},
            {"epoch", m.epoch},
            {"sample_in_epoch", m.sample_in_epoch},
            {"loss_scale", m.loss_scale},
            {"reference_batch", m.reference_batch},
            {"validation_pending", m.validation_pending},
            {"optimizer_step", m.optimizer_step},
            {"has_optimizer", m.has_optimizer},
            {"optimizer", m.optimizer},
            {"world_size", m.world_size},
            {"shard_group_size", m.shard_group_size},
            {"job", m.job_toml},
            {"crc32_block", kCrcBlock},
            {"tensors", tensors},
            {"slices", slices}};
  if (!m.model_config.is_null()) j["model_config"] = m.model_config;
  if (!m.moment_steps.empty()) j["moment_steps"] = m.moment_steps;
  if (m.state_block > 0) j["state_block"] = m.state_block;
  if (m.commit > 0) j["commit"] = m.commit;
  if (!m.data.empty()) j["data"] = {{"decides", m.data.decides}, {"made_from", m.data.made_from}};
  if (m.adapter) {
    const AdapterRecord& a = *m.adapter;
    j["adapter"] = {{"method", a.method},
                    {"r", a.r},
                    {"alpha", a.alpha},
                    {"dropout", a.dropout},
                    {"target_modules", a.target_modules},
                    {"base_model",
                     {{"path", a.base_path},
                      {"config_sha256", a.base_config_sha256},
                      {"tensors_sha256", a.base_tensors_sha256},
                      {"weights_hash", kWeightsHash},
                      {"weights_sha256", a.base_weights_sha256},
                      {"weights_sample_sha256", a.base_weights_sample_sha256}}}};
    if (a.method == "qlora")
      j["adapter"]["quantization"] = {{"type", "nf4"}, {"block_size", a.nf4_block_size}, {"double_quant", a.nf4_double_quant}};
  }
  j[kChecksumKey] = checksum_of(j);
  return j.dump(1);
}

namespace {
std::atomic<int64_t> parses{0};

// Stops at the top-level "commit" key's value; every other event is skipped.
class CommitReader final : public json::json_sax_t {
 public:
  std::optional<int64_t> commit;
  bool null() override { return done_value(); }
  bool boolean(bool) override { return done_value(); }
  bool number_integer(number_integer_t v) override { return take(v); }
  bool number_unsigned(number_unsigned_t v) override { return take(static_cast<int64_t>(v)); }
  bool number_float(number_float_t, const string_t&) override { return done_value(); }
  bool string(string_t&) override { return done_value(); }
  bool binary(binary_t&) override { return done_value(); }
  bool start_object(std::size_t) override { return ++depth_, done_value(true); }
  bool key(string_t& k) override {
    wanted_ = depth_ == 1 && k == "commit";
    return true;
  }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return ++depth_, done_value(true); }
  bool end_array() override { return --depth_, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool take(int64_t v) {
    if (wanted_ && depth_ == 1) {
      commit = v;
      return false;  // found: stop reading
    }
    return true;
  }
  // A value that is not the commit number; `opening` for an object or array that begins.
  bool done_value(bool opening = false) {
    if (wanted_ && depth_ == (opening ? 2 : 1)) wanted_ = false;
    return true;
  }
  int depth_ = 0;
  bool wanted_ = false;
};
}  // namespace

int64_t manifests_parsed() { return parses.load(); }

std::optional<int64_t> read_manifest_commit(const std::string& dir) {
  std::ifstream in(dir + "/" + kManifestFile, std::ios::binary);
  if (!in) return std::nullopt;
  CommitReader reader;
  json::sax_parse(in, &reader, json::input_format_t::json, false);
  return reader.commit;
}

Manifest parse_manifest(const std::string& text, const std::string& where) {
  ++parses;
  StrictJson parsed;
  try {
    parsed = parse_json_strict(text.data(), text.data() + text.size(), 16);
  } catch (const json::exception& e) {
    common::raise(ErrorKind::kIo, fmt::format("{}: not valid JSON: {}", where, e.what()));
  }
  ST_CHECK(!parsed.too_deep, ErrorKind::kIo, "{}: nested more than 16 deep: not a shardtune manifest", where);
  ST_CHECK(!parsed.duplicate, ErrorKind::kIo, "{}: the key {} appears twice in one object", where,
           json_quoted(parsed.duplicate ? parsed.duplicate->second : ""));
  json& j = parsed.value;
  ST_CHECK(j.is_object() && j.value("format", json()) == kFormat, ErrorKind::kIo,
           "{}: not a shardtune checkpoint manifest (no \"format\": \"{}\")", where, kFormat);

  std::vector<std::string> problems;
  Fields f(problems);
  Manifest m;
  m.version = static_cast<int>(f.integer(j, "version", where, 1));
  ST_CHECK(m.version >= 1 && m.version <= kManifestVersion, ErrorKind::kIo,
           "{}: format version {} is not one this build reads (1 to {})", where, m.version, kManifestVersion);
  if (m.version >= 3) {
    const int64_t stored = f.integer(j, kChecksumKey, where, 0, -1);
    j.erase(kChecksumKey);
    if (stored >= 0 && static_cast<uint32_t>(stored) != checksum_of(j))
      common::raise(ErrorKind::kIo, fmt::format("{}: the manifest fails its own checksum: it was changed or damaged "
                                                "after it was written",
                                                where));
  }
  m.layout = f.string(j, "layout", where, false);
  if (m.layout.empty()) m.layout = "sharded";
  if (m.layout != "sharded" && m.layout != "full") f.problem(fmt::format("{}: layout \"{}\" is not sharded or full", where, m.layout));
  m.step = f.integer(j, "step", where, 0);
  m.commit = f.integer(j, "commit", where, 0, 0, false);
  const bool v3 = m.version >= 3;  // earlier versions did not always record the layout and cursor
  m.epoch = f.integer(j, "epoch", where, 0, 0, v3);
  m.sample_in_epoch = f.integer(j, "sample_in_epoch", where, 0, 0, v3);
  m.loss_scale = f.number(j, "loss_scale", where);
  m.reference_batch = f.integer(j, "reference_batch", where, 0, 0, false);
  m.validation_pending = f.boolean(j, "validation_pending", where, false);
  m.optimizer_step = f.integer(j, "optimizer_step", where, 0, 0, false);
  m.has_optimizer = f.boolean(j, "has_optimizer", where);
  if (f.get(j, "optimizer", where, false) != nullptr) m.optimizer = f.string(j, "optimizer", where);
  if (std::find(std::begin(kOptimizerNames), std::end(kOptimizerNames), m.optimizer) == std::end(kOptimizerNames))
    f.problem(fmt::format("{}: optimizer {} is not one of {}", where, json_quoted(m.optimizer),
                          fmt::join(std::begin(kOptimizerNames), std::end(kOptimizerNames), ", ")));
  m.state_block = f.integer(j, "state_block", where, 1, 0, m.optimizer == "adamw_8bit");
  if (const json* steps = f.get(j, "moment_steps", where, false)) {
    bool ok = steps->is_object();
    if (ok) {
      for (const auto& [name, n] : steps->items()) {
        ok = ok && n.is_number_integer() && n.get<int64_t>() >= 0;
        if (ok) m.moment_steps[name] = n.get<int64_t>();
      }
    }
    if (!ok) f.problem(fmt::format("{}: moment_steps is not a map of tensor names to steps", where));
  }
  m.world_size = f.integer(j, "world_size", where, 1, 1, v3);
  m.shard_group_size = f.integer(j, "shard_group_size", where, 1, 1, v3);
  m.job_toml = f.string(j, "job", where, false);
  if (const json* c = f.get(j, "model_config", where, false)) m.model_config = *c;
  if (const json* d = f.get(j, "data", where, false)) {
    bool ok = d->is_object();
    for (const auto& [part, into] : {std::pair{"decides", &m.data.decides}, std::pair{"made_from", &m.data.made_from}}) {
      const json* items = ok && d->contains(part) ? &d->at(part) : nullptr;
      ok = ok && items != nullptr && items->is_object();
      for (const auto& [name, value] : ok ? items->items() : kEmptyObject.items()) {
        ok = ok && value.is_string();
        if (ok) (*into)[name] = value.get<std::string>();
      }
    }
    if (!ok) f.problem(fmt::format("{}: data is not {{\"decides\": {{...}}, \"made_from\": {{...}}}} of strings", where));
  }
  if (const json* a = f.get(j, "adapter", where, false)) {
    const std::string at = where + ": adapter";
    AdapterRecord r;
    r.method = f.string(*a, "method", at);
    if (r.method != "lora" && r.method != "qlora")
      f.problem(fmt::format("{}: method {} is not lora or qlora", at, json_quoted(r.method)));
    if (r.method == "qlora") {
      if (const json* q = f.get(*a, "quantization", at)) {
        const std::string qat = at + ".quantization";
        if (f.string(*q, "type", qat) != "nf4") f.problem(fmt::format("{}: type is not nf4", qat));
        r.nf4_block_size = f.integer(*q, "block_size", qat, 32);
        if (const json* d = f.get(*q, "double_quant", qat)) {
          if (!d->is_boolean()) f.problem(fmt::format("{}: double_quant {} is not true or false", qat, d->dump()));
          r.nf4_double_quant = d->is_boolean() && d->get<bool>();
        }
      }
    }
    r.r = f.integer(*a, "r", at, 1);
    r.alpha = f.number(*a, "alpha", at);
    r.dropout = f.number(*a, "dropout", at);
    if (const json* t = f.get(*a, "target_modules", at)) {
      bool ok = t->is_array() && !t->empty();
      for (const json& name : ok ? *t : kEmptyArray) {
        ok = ok && name.is_string();
        if (ok) r.target_modules.push_back(name.get<std::string>());
      }
      if (!ok) f.problem(fmt::format("{}: target_modules {} is not a list of names", at, t->dump()));
    }
    if (const json* b = f.get(*a, "base_model", at)) {
      r.base_path = f.string(*b, "path", at + ".base_model");
      r.base_config_sha256 = f.string(*b, "config_sha256", at + ".base_model");
      r.base_tensors_sha256 = f.string(*b, "tensors_sha256", at + ".base_model");
      // Before "weights_hash", weights_sha256 was the first-64-bytes sample. "all-bytes" hashed each
      // tensor whole, which no reader can any more: such a record compares by its sample alone.
      const std::string scheme = f.string(*b, "weights_hash", at + ".base_model", false);
      const std::string weights = f.string(*b, "weights_sha256", at + ".base_model");
      if (scheme.empty()) {
        r.base_weights_sample_sha256 = weights;
      } else {
        if (scheme == kWeightsHash) r.base_weights_sha256 = weights;
        r.base_weights_sample_sha256 = f.string(*b, "weights_sample_sha256", at + ".base_model");
      }
    }
    m.adapter = std::move(r);
  }
  const int64_t block = m.version >= 2 ? f.integer(j, "crc32_block", where, 1, kCrcBlock) : kCrcBlock;

  if (const json* tensors = f.get(j, "tensors", where)) {
    if (!tensors->is_object()) f.problem(fmt::format("{}: \"tensors\" is {}, expected an object", where, described(*tensors)));
    const json& all = tensors->is_object() ? *tensors : kEmptyObject;
    for (const auto& [name, t] : all.items()) {
      const std::string at = fmt::format("{}: tensor {}", where, json_quoted(name));
      ManifestTensor mt;
      if (const json* shape = f.get(t, "shape", at)) {
        bool ok = shape->is_array() && shape->size() <= 8;
        int64_t numel = 1;
        for (const json& d : ok ? *shape : kEmptyArray) {
          ok = ok && d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() <= (int64_t{1} << 40);
          if (ok) numel *= d.get<int64_t>();
          ok = ok && numel <= (int64_t{1} << 40);
          if (ok) mt.shape.push_back(d.get<int64_t>());
        }
        if (!ok) f.problem(fmt::format("{}: shape {} is not a list of sizes", at, shape->dump()));
      }
      mt.dtype = f.string(t, "dtype", at);
      if (mt.dtype != "F32") f.problem(fmt::format("{}: dtype {} is not F32", at, json_quoted(mt.dtype)));
      m.tensors.emplace(name, std::move(mt));
    }
  }

  if (const json* slices = f.get(j, "slices", where)) {
    if (!slices->is_array()) f.problem(fmt::format("{}: \"slices\" is {}, expected an array", where, described(*slices)));
    size_t index = 0;
    for (const json& s : slices->is_array() ? *slices : kEmptyArray) {
      const std::string at = fmt::format("{}: slice {}", where, index++);
      ManifestSlice ms;
      ms.kind = f.string(s, "kind", at);
      ms.tensor = f.string(s, "tensor", at);
      ms.file = f.string(s, "file", at);
      ms.dataset = f.string(s, "dataset", at);
      ms.offset = f.integer(s, "offset", at, 0);
      ms.length = f.integer(s, "length", at, 0);
      ms.dataset_offset = m.version >= 4 ? f.integer(s, "dataset_offset", at, 0, 0, false) : 0;
      const std::string what = fmt::format("{} ({} of {} in {})", at, ms.kind, json_quoted(ms.tensor), json_quoted(ms.file));
      if (std::find(std::begin(kStateKinds), std::end(kStateKinds), ms.kind) == std::end(kStateKinds))
        f.problem(fmt::format("{}: kind {} is not one of {}", what, json_quoted(ms.kind),
                              fmt::join(std::begin(kStateKinds), std::end(kStateKinds), ", ")));
      else if (is_scale_kind(ms.kind) && m.state_block == 0)
        f.problem(fmt::format("{}: scales of an 8-bit optimizer's state in a checkpoint of optimizer {}", what,
                              json_quoted(m.optimizer)));
      else if (is_factor_kind(ms.kind) && m.optimizer != "adafactor")
        f.problem(fmt::format("{}: Adafactor's factored statistics in a checkpoint of optimizer {}", what,
                              json_quoted(m.optimizer)));
      else if (is_factor_kind(ms.kind) && m.tensors.count(ms.tensor) && m.tensors.at(ms.tensor).shape.size() != 2)
        f.problem(fmt::format("{}: factored statistics of a tensor that is not a matrix", what));
      if (!m.tensors.count(ms.tensor)) f.problem(fmt::format("{}: the tensor is not among \"tensors\"", what));
      if (!is_plain_file_name(ms.file))
        f.problem(fmt::format("{}: the file name is not a plain name inside the checkpoint directory", what));
      if (ms.dataset_offset > (int64_t{1} << 40))  // as a tensor's elements: their sum stays far from overflow
        f.problem(fmt::format("{}: dataset_offset {} is past any dataset", what, ms.dataset_offset));
      if (ms.dataset.empty() || ms.dataset.find('/') != std::string::npos)
        f.problem(fmt::format("{}: the dataset name {} is not a plain name", what, json_quoted(ms.dataset)));
      if (m.version == 1) {  // one checksum for the whole slice
        ms.block = std::max<int64_t>(ms.length, 1);
        const int64_t crc = f.integer(s, "crc32", at, 0, 0);
        if (crc > UINT32_MAX) f.problem(fmt::format("{}: crc32 {} is not a 32-bit checksum", what, crc));
        if (ms.length > 0) ms.crcs = {static_cast<uint32_t>(crc)};
      } else {
        ms.block = block;
        if (const json* c = f.get(s, "crc32_blocks", at)) ms.crcs = crc_list(*c, what, f);
        const int64_t want = (ms.length + block - 1) / block;
        if (static_cast<int64_t>(ms.crcs.size()) != want)
          f.problem(fmt::format("{}: {} checksums listed for {} blocks", what, ms.crcs.size(), want));
      }
      m.slices.push_back(std::move(ms));
    }
  }
  if (problems.empty()) check_tiling(m, f, where);
  if (!problems.empty()) {
    const size_t shown = std::min(problems.size(), kMaxListedProblems);
    common::raise(ErrorKind::kIo,
                  fmt::format("{} is broken ({} problem{}): {}{}", where, problems.size(), problems.size() == 1 ? "" : "s",
                              fmt::join(problems.begin(), problems.begin() + static_cast<ptrdiff_t>(shown), "; "),
                              problems.size() > shown ? fmt::format("; and {} more", problems.size() - shown) : ""));
  }
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestFile;
  std::error_code ec;
  ST_CHECK(std::filesystem::exists(path, ec), ErrorKind::kIo, "{} is not a committed checkpoint: {} is missing", dir,
           kManifestFile);
  return parse_manifest(common::read_file(path, ErrorKind::kIo, "the manifest"), path);
}

}  // namespace shardtune::checkpoint
