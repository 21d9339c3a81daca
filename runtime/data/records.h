// Records of the files users bring: a JSON array of objects (alpaca), JSON Lines, or CSV with a
// header row; for chat data, conversations in JSON or JSON Lines. Every record remembers where it
// came from (file:line), so a bad one is reported precisely; on_bad_record decides whether it stops
// the job or is skipped and counted.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardtune::data {

// A turn of a conversation, its role one of "system", "user" and "assistant".
struct Turn {
  std::string role;
  std::string content;
  bool operator==(const Turn&) const = default;
};

struct Record {
  std::map<std::string, std::string> fields;  // every string field of the record (numbers as text)
  std::string where;                          // "file:line"
  std::vector<Turn> turns;                    // a conversation's turns (read_conversations)
};

struct RecordFile {
  std::vector<Record> records;
  int64_t skipped = 0;
  std::vector<std::string> skip_reasons;  // the first few, for the log
};

enum class RecordFormat { kJson, kJsonLines, kCsv };

// By extension: .json -> kJson, .jsonl/.ndjson -> kJsonLines, .csv -> kCsv. Throws otherwise.
RecordFormat record_format_of(const std::string& path);

// Reads every record. `required` fields must be present and (except those in `may_be_empty`)
// non-empty. A malformed line, a missing or empty field, or text that is not UTF-8 is an error
// naming file:line (skip_bad = false: throws common::Error(kConfig)), or is skipped and counted.
RecordFile read_records(const std::string& path, const std::vector<std::string>& required,
                        const std::vector<std::string>& may_be_empty, bool skip_bad);

// Reads conversations from JSON or JSON Lines: each record holds either OpenAI-style "messages"
// ([{"role", "content"}]) or ShareGPT-style "conversations" ([{"from", "value"}], where "human" is
// the user and "gpt" the assistant). A conversation is an optional system turn, then user and
// assistant turns alternating from the user's, with at least one assistant turn; every content a
// string, and only the system's may be empty. Anything else is a bad record naming the turn.
RecordFile read_conversations(const std::string& path, bool skip_bad);

// Reads preference pairs (JSON, JSON Lines or CSV): each record's "chosen" and "rejected" answers to
// its "prompt", as text (then `required` and `may_be_empty` apply, as for read_records: the job's
// prompt fields), or, in JSON, as a conversation: "prompt" a list of messages ({"role", "content"},
// an optional system turn, then user and assistant alternating, ending with the user's) and each
// answer a string or a list of one assistant message, or no "prompt" and "chosen" and "rejected"
// whole conversations that differ only in their last, assistant, turn. A conversational pair keeps
// the prompt's turns in `turns` and its answers in fields["chosen"] and fields["rejected"]. Two
// equal answers, an empty one, or a prompt of another form are bad records naming file:line.
RecordFile read_preferences(const std::string& path, const std::vector<std::string>& required,
                            const std::vector<std::string>& may_be_empty, bool skip_bad);

// Pure: RFC 4180 CSV (quoted fields may hold commas, quotes as "", and newlines). Each row with
// the 1-based line it starts on. Throws on an unterminated quote.
std::vector<std::pair<int64_t, std::vector<std::string>>> parse_csv(const std::string& text, const std::string& name);

}  // namespace shardtune::data
