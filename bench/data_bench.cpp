// Reading and tokenizing the user's data at growing sizes: N alpaca records (the tiny example's,
// repeated with their instructions numbered, written as json.dump(indent=4) writes them, a record
// over several lines) read by read_records and tokenized into examples. Prints one JSON object per
// size with both times; bench/data.sh sets them against each other.
// usage: data_bench TOKENIZER_JSON ALPACA_JSON WORK_DIR SIZE...
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "common/job/job.h"
#include "runtime/data/records.h"
#include "runtime/data/sft_examples.h"
#include "runtime/data/tokenizer.h"

using namespace shardtune;

namespace {

double seconds_of(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    fmt::print(stderr, "usage: data_bench TOKENIZER_JSON ALPACA_JSON WORK_DIR SIZE...\n");
    return 2;
  }
  const data::Tokenizer tokenizer = data::Tokenizer::from_file(argv[1]);
  const nlohmann::json base = nlohmann::json::parse(std::ifstream(argv[2]));
  job::DataSection section;
  section.format = job::DataFormat::kAlpaca;
  const data::PromptFormat format = data::prompt_format(section);
  data::ExampleOptions options;
  options.bos = tokenizer.bos_id().value_or(-1);
  options.eos = tokenizer.eos_id().value_or(-1);
  for (int a = 4; a < argc; ++a) {
    const int64_t n = std::stoll(argv[a]);
    nlohmann::json records = nlohmann::json::array();
    for (int64_t i = 0; i < n; ++i) {
      nlohmann::json r = base[static_cast<size_t>(i) % base.size()];
      r["instruction"] = fmt::format("{} (#{})", r["instruction"].get<std::string>(), i);
      records.push_back(std::move(r));
    }
    const std::string path = fmt::format("{}/alpaca-{}.json", argv[3], n);
    std::ofstream(path) << records.dump(4);
    data::RecordFile file;
    const double read = seconds_of([&] { file = data::read_records(path, format.required, format.may_be_empty, false); });
    int64_t tokens = 0;
    const double tokenize = seconds_of([&] {
      for (const data::Record& r : file.records)
        tokens += static_cast<int64_t>(
            data::make_example(tokenizer, format.prompt(r), r.fields.at(format.response_field), options).ids.size());
    });
    fmt::print("{{\"records\": {}, \"read_s\": {:.4f}, \"tokenize_s\": {:.4f}, \"tokens\": {}}}\n", file.records.size(),
               read, tokenize, tokens);
  }
  return 0;
}
