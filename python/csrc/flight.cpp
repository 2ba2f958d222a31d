#include "flight.hpp"

#include <cstdlib>
#include <sstream>

namespace chorus_torch {

static size_t traceCapacity() {
  for (const char *name : {"CHORUS_TORCH_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}) {
    const char *v = std::getenv(name);
    if (v && *v) return static_cast<size_t>(std::strtoull(v, nullptr, 10));
  }
  return 256;
}

static std::vector<std::vector<int64_t>> shapesOf(const std::vector<at::Tensor> &ts) {
  std::vector<std::vector<int64_t>> out;
  out.reserve(ts.size());
  for (const at::Tensor &t : ts) out.emplace_back(t.sizes().begin(), t.sizes().end());
  return out;
}

static std::string spell(const std::vector<std::vector<int64_t>> &shapes) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < shapes.size(); i++) {
    o << (i ? ", [" : "[");
    for (size_t j = 0; j < shapes[i].size(); j++) o << (j ? ", " : "") << shapes[i][j];
    o << "]";
  }
  o << "]";
  return o.str();
}

FlightRecorder::FlightRecorder() : capacity_(traceCapacity()) { ring_.resize(capacity_); }

void FlightRecorder::issued(uint64_t seq, const char *op, const std::vector<at::Tensor> &inputs,
                            const std::vector<at::Tensor> &outputs) {
  if (capacity_ == 0) return;
  const at::Tensor *any = !inputs.empty() ? &inputs[0] : !outputs.empty() ? &outputs[0] : nullptr;
  auto in = shapesOf(inputs), out = shapesOf(outputs);
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> g(mutex_);
  FlightEntry &e = ring_[seq % capacity_];
  e.seq = seq;
  e.op = op;
  e.inputs = std::move(in);
  e.outputs = std::move(out);
  e.scalarType = any ? any->scalar_type() : at::ScalarType::Undefined;
  e.issued = now;
  e.state = "scheduled";
}

void FlightRecorder::finished(uint64_t seq, bool ok) {
  if (capacity_ == 0) return;
  std::lock_guard<std::mutex> g(mutex_);
  FlightEntry &e = ring_[seq % capacity_];
  if (e.seq != seq) return;
  e.state = ok ? "completed" : "failed";
  e.finished = std::chrono::steady_clock::now();
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::vector<FlightEntry> out;
  {
    std::lock_guard<std::mutex> g(mutex_);
    for (const FlightEntry &e : ring_)
      if (e.seq) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const FlightEntry &a, const FlightEntry &b) { return a.seq < b.seq; });
  for (FlightEntry &e : out) {
    e.inputSizes = spell(e.inputs);
    e.outputSizes = spell(e.outputs);
    e.dtype = e.scalarType == at::ScalarType::Undefined ? "-" : c10::toString(e.scalarType);
  }
  for (FlightEntry &e : out)
    if (e.state == "scheduled") {
      e.state = "started";
      break;
    }
  return out;
}

std::string FlightRecorder::dump() const {
  auto now = std::chrono::steady_clock::now();
  std::ostringstream o;
  for (const FlightEntry &e : snapshot()) {
    auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    o << "  #" << e.seq << " " << e.op << " " << e.dtype << " in " << e.inputSizes << " out " << e.outputSizes << " "
      << e.state;
    if (e.state == "completed" || e.state == "failed")
      o << " after " << ms(e.finished - e.issued) << " ms";
    else
      o << ", issued " << ms(now - e.issued) << " ms ago";
    o << "\n";
  }
  return o.str();
}

}  // namespace chorus_torch
