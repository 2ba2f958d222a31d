// A flight recorder (as torch's NCCL backend has): the group's last
// operations in a ring, with sequence number, operation, sizes, datatype and
// state, dumped to the log when an operation times out.
#pragma once
#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace chorus_torch {

struct FlightEntry {
  uint64_t seq = 0;
  const char *op = "";
  // Kept as numbers; snapshot() spells them out ("[[4, 2], [8]]", "Float").
  std::vector<std::vector<int64_t>> inputs, outputs;
  std::string inputSizes, outputSizes;
  at::ScalarType scalarType = at::ScalarType::Undefined;
  std::string dtype;
  std::chrono::steady_clock::time_point issued, finished;
  // "scheduled", "started" (the oldest one not finished: the group's stream
  // runs in order), "completed" or "failed".
  std::string state;
};

class FlightRecorder {
 public:
  // capacity from CHORUS_TORCH_TRACE_BUFFER_SIZE, TORCH_FR_BUFFER_SIZE or
  // TORCH_NCCL_TRACE_BUFFER_SIZE (the first set), else 256; 0 turns it off
  FlightRecorder();
  void issued(uint64_t seq, const char *op, const std::vector<at::Tensor> &inputs,
              const std::vector<at::Tensor> &outputs);
  void finished(uint64_t seq, bool ok);
  std::vector<FlightEntry> snapshot() const;
  // One line per entry, oldest first.
  std::string dump() const;

 private:
  mutable std::mutex mutex_;
  size_t capacity_;
  std::vector<FlightEntry> ring_;  // ring_[seq % capacity_]
};

}  // namespace chorus_torch
