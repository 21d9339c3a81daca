// shardtune-generate (also `shardtune generate`): text from a fine-tuned model, to try it. The model
// comes from a Hugging Face folder, a checkpoint (any world size), a job's output folder, or an
// adapter checkpoint with its base (tools/generate_model.h); the prompt is plain text, a chat turn
// in the model's chat format, token ids, or an interactive chat on the terminal. Tokens stream to
// stdout as they are chosen; the rate goes to stderr.
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/job/job.h"
#include "common/job/schema.h"
#include "runtime/data/chat.h"
#include "runtime/data/tokenizer.h"
#include "runtime/model/generate.h"
#include "tools/generate_model.h"

namespace {

using namespace shardtune;
using common::ErrorKind;

struct Options {
  std::string source, base, tokenizer, prompt, chat, system, ids, chat_format, device = "cpu";
  bool interactive = false, json = false, json_logits = false;
  model::GenerateOptions generate;
};

// Prints the text of the tokens generated so far as it grows, whole characters only.
class Streamer {
 public:
  Streamer(const data::Tokenizer* tokenizer, bool quiet) : tokenizer_(tokenizer), quiet_(quiet) {}
  void add(int32_t token) {
    tokens_.push_back(token);
    if (quiet_ || tokenizer_ == nullptr) return;
    const std::string text = tokenizer_->decode(tokens_);
    // A character cut between tokens decodes to U+FFFD until its last byte comes.
    if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return;
    if (text.size() > printed_ && text.compare(0, printed_, shown_, 0, printed_) == 0) {
      std::cout << text.substr(printed_) << std::flush;
      printed_ = text.size();
      shown_ = text;
    }
  }

 private:
  const data::Tokenizer* tokenizer_;
  bool quiet_;
  std::vector<int32_t> tokens_;
  std::string shown_;
  size_t printed_ = 0;
};

struct Chat {
  data::ChatOptions options;
  std::vector<int32_t> stop_ids;
};

Chat chat_of(const Options& o, const tools::GenerationModel& m, const data::Tokenizer& tokenizer) {
  const std::string format = o.chat_format.empty() ? m.chat_format : o.chat_format;
  data::ChatChoice choice;
  try {
    choice = data::choose_chat_style(job::enum_value<job::ChatFormat>(format).value(), m.tokenizer);
  } catch (const common::Error& e) {
    // Its hint names the job's key; here the format is chosen on the command line.
    common::raise(e.kind(), fmt::format("{}\nHere: give --chat-format llama3, llama3.1 or llama2", e.what()));
  }
  Chat c{data::chat_options(choice.style, tokenizer, m.tokenizer), {}};
  c.options.generation_prompt = true;
  const char* end = choice.style == data::ChatStyle::kLlama2 ? nullptr : "<|eot_id|>";
  if (end != nullptr)
    if (auto id = tokenizer.token_to_id(end)) c.stop_ids.push_back(*id);
  std::cerr << fmt::format("chat format {} ({})\n", data::chat_style_name(choice.style), choice.how);
  return c;
}

std::vector<int32_t> chat_ids(const data::Tokenizer& tokenizer, const Chat& chat, const std::vector<data::Turn>& turns) {
  return data::chat_example(tokenizer, data::render_chat(turns, chat.options), 0, "the conversation").ids;
}

// The tokens of the answer's text: without the end token that stopped it.
std::vector<int32_t> text_tokens(const model::Generation& out) {
  std::vector<int32_t> tokens = out.tokens;
  if (out.stopped) tokens.pop_back();
  return tokens;
}

// One generation: streamed (without its end token), then the rate; the new tokens.
model::Generation run_once(const Options& o, const tools::GenerationModel& m, const data::Tokenizer* tokenizer,
                           const std::vector<int32_t>& prompt, model::GenerateOptions g) {
  Streamer streamer(tokenizer, o.json);
  const model::Generation out = model::generate(*m.model, prompt, g, [&](int32_t t) {
    if (std::find(g.stop_ids.begin(), g.stop_ids.end(), t) == g.stop_ids.end()) streamer.add(t);
  });
  if (!o.json) std::cout << "\n";
  const double decode_rate = out.tokens.size() > 1 ? static_cast<double>(out.tokens.size() - 1) / out.decode_seconds : 0;
  std::cerr << fmt::format("{} new token(s){}: the {}-token prompt in {:.3f} s, then {:.1f} tokens/s\n", out.tokens.size(),
                           out.stopped ? " (stopped at an end token)" : "", prompt.size(), out.prefill_seconds,
                           decode_rate);
  return out;
}

// A conversation on the terminal: each answer joins the history the next turn is rendered with.
void interactive_chat(const Options& o, const tools::GenerationModel& m, const data::Tokenizer& tokenizer,
                      const Chat& chat, std::vector<data::Turn> turns, const model::GenerateOptions& g) {
  for (std::string line; (std::cerr << "> " << std::flush), std::getline(std::cin, line);) {
    if (line.empty()) continue;
    turns.push_back({"user", line});
    const model::Generation out = run_once(o, m, &tokenizer, chat_ids(tokenizer, chat, turns), g);
    turns.push_back({"assistant", tokenizer.decode(text_tokens(out))});
  }
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  for (std::string id; std::getline(in, id, ',');) {
    // The whole item, spaces around it aside: "2x" is no id (std::stoi would read its 2).
    const size_t first = id.find_first_not_of(' '), last = id.find_last_not_of(' ');
    const std::string_view digits =
        first == std::string::npos ? std::string_view() : std::string_view(id).substr(first, last - first + 1);
    int32_t value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size())
      common::raise(ErrorKind::kUsage, fmt::format("--ids: \"{}\" is not a token id", id));
    ids.push_back(value);
  }
  return ids;
}

int run(const Options& o) {
  at::TensorOptions options = at::TensorOptions().dtype(at::kFloat);
  if (o.device == "cuda") options = options.device(at::kCUDA);
  const tools::GenerationModel m = tools::load_generation_model(o.source, o.base, o.tokenizer, options);
  std::cerr << "loaded " << m.description << "\n";
  std::optional<data::Tokenizer> tokenizer;
  if (!m.tokenizer.empty()) tokenizer.emplace(data::Tokenizer::from_file(m.tokenizer));
  ST_CHECK(tokenizer || !o.ids.empty(), ErrorKind::kUsage,
           "no tokenizer.json found for {}: give --tokenizer, or the prompt as --ids", o.source);
  model::GenerateOptions g = o.generate;
  for (int64_t id : m.model->config().eos_token_ids) g.stop_ids.push_back(static_cast<int32_t>(id));
  if (tokenizer && tokenizer->eos_id()) g.stop_ids.push_back(*tokenizer->eos_id());

  std::vector<int32_t> prompt;
  if (!o.ids.empty()) {
    prompt = parse_ids(o.ids);
    for (int32_t id : prompt)
      ST_CHECK(id >= 0 && id < m.model->config().vocab_size, ErrorKind::kUsage, "--ids: {} is not in the vocabulary (0..{})",
               id, m.model->config().vocab_size - 1);
  } else if (!o.chat.empty() || o.interactive) {
    const Chat chat = chat_of(o, m, *tokenizer);
    g.stop_ids.insert(g.stop_ids.end(), chat.stop_ids.begin(), chat.stop_ids.end());
    std::vector<data::Turn> turns;
    if (!o.system.empty()) turns.push_back({"system", o.system});
    if (o.interactive) {
      interactive_chat(o, m, *tokenizer, chat, turns, g);
      return 0;
    }
    turns.push_back({"user", o.chat});
    prompt = chat_ids(*tokenizer, chat, turns);
  } else {
    prompt = tokenizer->encode(o.prompt);
    if (auto bos = tokenizer->bos_id()) prompt.insert(prompt.begin(), *bos);
  }
  if (o.chat.empty() && !o.interactive && (!o.system.empty() || !o.chat_format.empty()))
    std::cerr << "note: --system and --chat-format shape --chat and --interactive only; the prompt of "
              << (o.ids.empty() ? "--prompt" : "--ids") << " is used as given\n";
  std::vector<std::vector<float>> logits;  // --json-logits: each step's
  if (o.json_logits)
    g.on_logits = [&](const at::Tensor& l) {
      const at::Tensor host = l.to(at::kCPU, at::kFloat).contiguous();
      logits.emplace_back(host.data_ptr<float>(), host.data_ptr<float>() + host.numel());
    };
  const model::Generation out = run_once(o, m, tokenizer ? &*tokenizer : nullptr, prompt, g);
  if (o.json) {
    nlohmann::json j{{"prompt_ids", prompt}, {"tokens", out.tokens}, {"stopped", out.stopped}};
    if (o.json_logits) {
      j["logits"] = logits;
      // Every prompt position's, from one forward of the whole prompt (no cache).
      const at::Tensor ids = at::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), at::kLong)
                                 .to(m.model->options().device())
                                 .view({1, -1});
      const at::Tensor all = m.model->forward(ids).select(0, 0).to(at::kCPU, at::kFloat).contiguous();
      std::vector<std::vector<float>> rows;
      for (int64_t i = 0; i < all.size(0); ++i)
        rows.emplace_back(all[i].data_ptr<float>(), all[i].data_ptr<float>() + all.size(1));
      j["prompt_logits"] = rows;
    }
    if (tokenizer) j["text"] = tokenizer->decode(text_tokens(out));
    std::cout << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Generate text with a model: a Hugging Face folder, a checkpoint, a job's output folder, or an adapter "
               "checkpoint with its base"};
  Options o;
  model::SamplingOptions& s = o.generate.sampling;
  app.add_option("source", o.source, "Model folder, checkpoint, or job output folder (its newest checkpoint)")->required();
  auto* prompt = app.add_option("--prompt", o.prompt, "Plain text to continue (after BOS)");
  auto* chat = app.add_option("--chat", o.chat, "A user turn, rendered in the model's chat format");
  auto* ids = app.add_option("--ids", o.ids, "The prompt as token ids, comma-separated");
  auto* interactive = app.add_flag("-i,--interactive", o.interactive, "Chat on the terminal, a turn per line");
  prompt->excludes(chat)->excludes(ids)->excludes(interactive);
  chat->excludes(ids)->excludes(interactive);
  ids->excludes(interactive);
  app.add_option("--system", o.system, "A system prompt for --chat and --interactive");
  app.add_option("--chat-format", o.chat_format,
                 "auto, llama3, llama3.1 or llama2 (default: the job's [data] chat_format, else auto)")
      ->check(CLI::IsMember({"auto", "llama3", "llama3.1", "llama2"}));
  app.add_option("--base", o.base, "The base model folder of an adapter checkpoint (default: the one it records)");
  app.add_option("--tokenizer", o.tokenizer, "tokenizer.json (default: the model's, or the job's)");
  app.add_option("-n,--max-new-tokens", o.generate.max_new_tokens, "Tokens to generate at most")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--temperature", s.temperature, "0: greedy; else sample at this temperature")->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", s.top_k, "Sample among the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", s.top_p, "Sample among the most likely tokens whose probabilities sum to p")
      ->check(CLI::Range(1e-9, 1.0));
  app.add_option("--seed", s.seed, "Seed of the sampling");
  app.add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--json", o.json, "Print one JSON line (prompt ids, new tokens, text) instead of streaming the text");
  app.add_flag("--json-logits", o.json_logits, "With --json: each step's logits too, and every prompt position's (vocab floats each)");
  CLI11_PARSE(app, argc, argv);
  if (o.prompt.empty() && o.chat.empty() && o.ids.empty() && !o.interactive) {
    std::cerr << "shardtune-generate: give --prompt, --chat, --ids or --interactive\n";
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "shardtune-generate: " << e.what() << "\n";
    return 1;
  }
}
