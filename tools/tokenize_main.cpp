// shardtune-tokenize: a tokenizer.json applied to the lines of a file, for checks against other
// implementations and for timing. Lines are split on '\n' as bytes; each line's ids are printed
// as one JSON array per line.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <iostream>

#include "common/file_io.h"
#include "common/job/schema.h"
#include "runtime/data/chat.h"
#include "runtime/data/records.h"
#include "runtime/data/sentencepiece_model.h"
#include "runtime/data/tokenizer.h"
#include "runtime/data/utf8.h"
#include "tools/tool_progress.h"

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  const std::string text = shardtune::common::read_file(path);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(text.substr(start, nl - start));
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

// Each conversation of a chat data file: its rendered text, ids and labels, one JSON object a line.
void print_chat(const shardtune::data::Tokenizer& tokenizer, const std::string& tokenizer_path,
                const std::string& data_path, const std::string& format, bool train_on_all, bool generation_prompt) {
  using namespace shardtune;
  const data::ChatChoice choice =
      data::choose_chat_style(job::enum_value<job::ChatFormat>(format).value(), tokenizer_path);
  data::ChatOptions options = data::chat_options(choice.style, tokenizer, tokenizer_path);
  options.train_on_all = train_on_all;
  options.generation_prompt = generation_prompt;
  std::cerr << fmt::format("chat format {} ({})\n", data::chat_style_name(choice.style), choice.how);
  for (const data::Record& r : data::read_conversations(data_path, false).records) {
    const std::vector<data::ChatPiece> pieces = data::render_chat(r.turns, options);
    std::string text;
    for (const data::ChatPiece& p : pieces) text += p.text;
    const data::Example e = data::chat_example(tokenizer, pieces, 0, r.where);
    std::cout << nlohmann::json{{"where", r.where}, {"text", text}, {"ids", e.ids}, {"labels", e.labels}}.dump() << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tokenize the lines of a file with a Hugging Face tokenizer.json"};
  std::string tokenizer_path, lines_path;
  int repeat = 0;
  bool check_roundtrip = false, skip_special_lines = false;
  app.add_option("tokenizer", tokenizer_path, "tokenizer.json")->required();
  std::string write_json;
  app.add_option("lines", lines_path, "Text file: one input per line");
  app.add_option("--write-json", write_json,
                 "Convert a SentencePiece tokenizer.model to this tokenizer.json (as transformers converts Llama's) "
                 "and exit");
  app.add_option("--bench", repeat, "Print only tokens/s over this many passes")->check(CLI::Range(1, 1000));
  app.add_flag("--check-roundtrip", check_roundtrip, "Exit 1 unless decode(encode(line)) == line for every line");
  app.add_flag("--roundtrip-skip-special", skip_special_lines,
               "SentencePiece style: leave out of the round-trip check the lines that hold special tokens (a space "
               "is prepended to the text after each) or U+2581 (the format's own symbol for a space)");
  bool json_lines = false, generation_prompt = false;
  std::string chat, train_on = "assistant";
  app.add_flag("--json-lines", json_lines, "Each line is a JSON string (so it may hold newlines) to tokenize");
  app.add_option("--chat", chat,
                 "The lines file is chat data (JSON or JSONL conversations): print each conversation's ids and "
                 "labels as [data] format = \"chat\" makes them, in this chat_format")
      ->check(CLI::IsMember({"auto", "llama3", "llama3.1", "llama2"}));
  app.add_option("--train-on", train_on, "With --chat: [data] train_on")->check(CLI::IsMember({"assistant", "all"}));
  app.add_flag("--generation-prompt", generation_prompt, "With --chat: end with the assistant's header");
  CLI11_PARSE(app, argc, argv);
  try {
    using namespace shardtune::data;
    if (!write_json.empty()) {
      const SentencePieceModel model(tokenizer_path);
      shardtune::common::write_file_atomically(write_json, model.to_tokenizer_json());
      // BOS and EOS beside it, unless that folder already says.
      const auto config = std::filesystem::path(write_json).parent_path() / "tokenizer_config.json";
      if (!std::filesystem::exists(config)) {
        shardtune::common::write_file_atomically(
            config.string(), nlohmann::json{{"bos_token", model.bos_id() >= 0 ? model.piece(model.bos_id()) : ""},
                                            {"eos_token", model.eos_id() >= 0 ? model.piece(model.eos_id()) : ""}}
                                 .dump());
      }
      return 0;
    }
    ST_CHECK(!lines_path.empty(), shardtune::common::ErrorKind::kUsage, "no lines file given");
    // A tokenizer.json through shardtune's tokenizer; a tokenizer.model through libsentencepiece.
    std::function<std::vector<int32_t>(const std::string&)> encode;
    std::function<std::string(const std::vector<int32_t>&)> decode;
    std::function<bool(int32_t)> is_special;
    std::optional<Tokenizer> tokenizer;
    std::optional<SentencePieceModel> model;
    if (tokenizer_path.size() > 6 && tokenizer_path.compare(tokenizer_path.size() - 6, 6, ".model") == 0) {
      model.emplace(tokenizer_path);
      encode = [&](const std::string& t) { return model->encode(t); };
      decode = [&](const std::vector<int32_t>& ids) { return model->decode(ids); };
      is_special = [&](int32_t id) { return model->is_control(id) || model->is_unknown(id); };
    } else {
      tokenizer.emplace(Tokenizer::from_file(tokenizer_path));
      encode = [&](const std::string& t) { return tokenizer->encode(t); };
      decode = [&](const std::vector<int32_t>& ids) { return tokenizer->decode(ids); };
      is_special = [&](int32_t id) { return tokenizer->is_added_token(id); };
    }
    if (!chat.empty()) {
      ST_CHECK(tokenizer.has_value(), shardtune::common::ErrorKind::kUsage, "--chat takes a tokenizer.json");
      print_chat(*tokenizer, tokenizer_path, lines_path, chat, train_on == "all", generation_prompt);
      return 0;
    }
    std::vector<std::string> lines = read_lines(lines_path);
    if (json_lines)
      for (std::string& line : lines) line = nlohmann::json::parse(line).get<std::string>();
    if (repeat > 0) {
      int64_t tokens = 0, bytes = 0;
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < repeat; ++r)
        for (const std::string& line : lines) {
          tokens += static_cast<int64_t>(encode(line).size());
          bytes += static_cast<int64_t>(line.size());
        }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fmt::print("{{\"tokens\": {}, \"bytes\": {}, \"seconds\": {:.6f}, \"tokens_per_second\": {:.1f}}}\n", tokens, bytes, s,
                 static_cast<double>(tokens) / s);
      return 0;
    }
    int mismatches = 0;
    std::string out;
    shardtune::common::Progress progress(shardtune::tools::tool_progress(
        "tokenizing", static_cast<int64_t>(lines.size()), shardtune::common::ProgressUnit::kCount, "lines"));
    for (size_t i = 0; i < lines.size(); ++i) {
      progress.add(1);
      const std::vector<int32_t> ids = encode(lines[i]);
      out += fmt::format("[{}]\n", fmt::join(ids, ","));
      const bool special = std::any_of(ids.begin(), ids.end(), is_special) ||
                           lines[i].find("\xe2\x96\x81") != std::string::npos;
      if (check_roundtrip && !(skip_special_lines && special) && decode(ids) != repair_utf8(lines[i])) {
        if (++mismatches <= 5) std::cerr << fmt::format("line {}: decode(encode(x)) != x\n", i + 1);
      }
    }
    progress.finish("tokenized");
    std::cout << out;
    if (mismatches > 0) {
      std::cerr << fmt::format("{} of {} lines do not round-trip\n", mismatches, lines.size());
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "shardtune-tokenize: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
