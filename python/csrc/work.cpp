#include "work.hpp"

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include "completion.hpp"
#include "convert.hpp"
#include "pyexit.hpp"

namespace chorus_torch {

namespace {
const c10::TypePtr &tensorListType() {
  static const c10::TypePtr t = c10::ListType::create(c10::TensorType::get());
  return t;
}
}  // namespace

WorkChorus::WorkChorus(std::shared_ptr<Group> group, uint64_t seq, Launch &l)
    : c10d::Work(group->rank(), l.type, nullptr, std::optional<std::vector<at::Tensor>>(l.inputs)),
      group_(std::move(group)),
      seq_(seq),
      name_(l.name),
      outputs_(l.outputs),
      keep_(std::move(l.keep)),  // with the inputs below: chorus reads them until the work has run
      copyBack_(std::move(l.copyBack)),
      future_(c10::make_intrusive<c10::ivalue::Future>(tensorListType())) {
  keep_.insert(keep_.end(), l.inputs.begin(), l.inputs.end());
  if (l.type == c10d::OpType::RECV) source_ = l.peer;
  ncclResult_t r = chorusEventCreate(&event_);
  TORCH_CHECK(r == ncclSuccess, "chorus: cannot create an event: ", resultName(r));
}

WorkChorus::~WorkChorus() {
  if (event_) chorusEventDestroy(event_);
}

void WorkChorus::release_resources() {
  outputs_.clear();
  keep_.clear();
  copyBack_.clear();
  future_.reset();
}

void WorkChorus::markEnqueued(cudaStream_t stream) {
  chorusEventRecord(event_, stream);
  enqueued_.store(true);
  deferred_.store(false);
  coalesced_.store(false);
}

// Issued inside a coalescing block that has not ended: it runs with the
// block, when the block ends.
bool WorkChorus::pendingInBlock() { return coalesced_.load() && !done(); }

bool WorkChorus::done() {
  std::lock_guard<std::mutex> g(mutex_);
  return completed_;
}

bool WorkChorus::drain() {
  if (deferred_.load()) group_->flush();
  if (!enqueued_.load()) return true;
  CollectFinished collect;
  return chorusEventSynchronize(event_) == ncclSuccess;
}

void WorkChorus::stagingFailed(const std::string &text) { stagingError_ = text; }

void WorkChorus::complete(ncclResult_t status) {
  if (!stagingError_.empty()) {
    fail(stagingError_);
    return;
  }
  if (status != ncclSuccess) {
    if (status == ncclTimeout) group_->logFlightRecorder(c10::str(name_, " #", seq_, " timed out").c_str());
    fail(group_->failureText(name_, seq_, status, p2p_));
    return;
  }
  std::vector<c10::intrusive_ptr<WorkChorus>> parts;
  parts.swap(parts_);
  std::string why;
  for (auto &part : parts)  // each has completed: this runs after the point that follows it on its stream
    if (!(why = part->failure()).empty()) break;
  letGo(parts);
  if (!why.empty()) {
    fail(c10::str("chorus: a batch of point-to-point operations failed: ", why));
    return;
  }
  try {
    // Below autograd, as gloo writes the caller's memory: a parameter that
    // requires grad, or an inference tensor used outside inference mode,
    // takes the result as a contiguous one does.
    c10::InferenceMode below;
    for (auto &[dst, src] : copyBack_) dst.copy_(src);
  } catch (const std::exception &e) {
    fail(c10::str("chorus: ", name_, ": copying the result back failed: ", e.what()));
    return;
  }
  letGo(copyBack_);
  letGo(keep_);
  group_->flight().finished(seq_, true);
  finish();
  settle();
}

std::string WorkChorus::failure() {
  std::lock_guard<std::mutex> g(mutex_);
  return failText_;
}

void WorkChorus::fail(const std::string &text) {
  {
    std::lock_guard<std::mutex> g(mutex_);
    failText_ = text;
  }
  letGo(parts_);
  group_->flight().finished(seq_, false);
  letGo(copyBack_);
  letGo(keep_);
  finish(std::make_exception_ptr(
      c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, text)));
  settle();
}

void WorkChorus::settle() {
  auto self = c10::intrusive_ptr<WorkChorus>::reclaim_copy(this);
  if (!CollectFinished::take(self)) group_->completions().post(std::move(self));
}

void WorkChorus::postFuture() { group_->completions().post(c10::intrusive_ptr<WorkChorus>::reclaim_copy(this)); }

void WorkChorus::completeFuture() {
  if (futureClaimed_.exchange(true)) {
    // Another thread is setting it: its value is a moment away.
    if (!future_->completed()) future_->wait();
    return;
  }
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> g(mutex_);
    e = exception_;
  }
  if (e) future_->setError(e);
  else future_->markCompleted(c10::IValue(outputs_));
}

bool WorkChorus::isCompleted() {
  if (pendingInBlock()) return false;
  if (deferred_.load()) group_->flush();
  if (!done()) return false;
  completeFuture();  // here rather than later on a completion thread, so that its value is there
  return true;
}

bool WorkChorus::wait(std::chrono::milliseconds timeout) {
  // As torch's NCCL backend, whose Work inside a block has no end event
  // until the block ends: waiting returns at once, and the result is there
  // once the block has run. (torch waits so on a blocking call inside
  // _coalescing_manager, and raising there would strand the block open.)
  if (pendingInBlock()) return true;
  if (deferred_.load()) group_->flush();
  if (timeout == kNoTimeout && enqueued_.load()) {
    // Runs the stream up to this work on this thread: no thread switch.
    CollectFinished collect(this);
    ncclResult_t r = chorusEventSynchronize(event_);
    TORCH_CHECK(r == ncclSuccess, "chorus: ", name_, " #", seq_,
                ": Work.wait() cannot wait from inside a callback that runs on its own group's stream (",
                resultName(r), ")");
  }
  std::exception_ptr e;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      C10_THROW_ERROR(DistBackendError,
                      c10::str("chorus: ", name_, " (sequence number ", seq_, ") on rank ", group_->rank(),
                               " of group '", group_->name(), "': Work.wait: timeout after ", timeout.count(),
                               " ms, the operation is not done"));
    }
    e = exception_;
  }
  completeFuture();
  if (e) std::rethrow_exception(e);
  return true;
}

std::vector<at::Tensor> WorkChorus::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> WorkChorus::getFuture() { return future_; }

uint64_t WorkChorus::getSequencenumber() const { return seq_; }

int WorkChorus::sourceRank() const { return source_ >= 0 ? source_ : c10d::Work::sourceRank(); }

std::chrono::milliseconds WorkChorus::getTimeout() const { return group_->timeout(); }

}  // namespace chorus_torch
