// TensorBoard's event files, written by hand: TFRecord framing (length, masked CRC-32C of the
// length, the record, masked CRC-32C of the record) around `Event` protocol buffers (TensorFlow's
// tensorflow/core/util/event.proto and summary.proto) holding scalar summaries. No LibTorch and no
// protobuf library: LibTorch carries its own protobuf, which may not share a process with another.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardtune::train {

// CRC-32C (Castagnoli, reflected, polynomial 0x82F63B78), and TFRecord's mask of it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// One TFRecord: the framing around `record`.
std::string tfrecord(std::string_view record);

// Event{wall_time, file_version = "brain.Event:2"}: the first record of every event file.
std::string file_version_event(double wall_time);
// Event{wall_time, step, session_log{status = START}}: TensorBoard discards what earlier files hold
// at `step` and after (a restarted run).
std::string session_start_event(double wall_time, int64_t step);
// Event{wall_time, step, summary{value{tag, simple_value}...}}.
std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars);

}  // namespace shardtune::train
