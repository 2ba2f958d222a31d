#include "work.hpp"

#include <c10/util/Exception.h>

#include "convert.hpp"

namespace chorus_torch {

WorkChorus::WorkChorus(std::shared_ptr<Group> group, uint64_t seq, Launch &l)
    : c10d::Work(group->rank(), l.type, nullptr, std::optional<std::vector<at::Tensor>>(l.inputs)),
      group_(std::move(group)),
      seq_(seq),
      name_(l.name),
      outputs_(l.outputs),
      keep_(std::move(l.keep)),
      copyBack_(std::move(l.copyBack)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
  ncclResult_t r = chorusEventCreate(&event_);
  TORCH_CHECK(r == ncclSuccess, "chorus: cannot create an event: ", resultName(r));
}

WorkChorus::~WorkChorus() {
  if (event_) chorusEventDestroy(event_);
}

void WorkChorus::enqueueCompletion(cudaStream_t stream) {
  // The stream's host function holds a reference until it has run.
  c10::raw::intrusive_ptr::incref(this);
  ncclResult_t r = chorusLaunchHostFunc(stream, onDone, this);
  if (r != ncclSuccess) {
    c10::raw::intrusive_ptr::decref(this);
    fail(c10::str("chorus: ", name_, ": cannot queue its completion: ", resultName(r)));
    return;
  }
  chorusEventRecord(event_, stream);
  enqueued_.store(true);
}

void WorkChorus::onDone(void *self, ncclResult_t status) {
  auto *w = static_cast<WorkChorus *>(self);
  w->complete(status);
  c10::raw::intrusive_ptr::decref(w);
}

void WorkChorus::complete(ncclResult_t status) {
  if (status == ncclSuccess) {
    try {
      for (auto &[dst, src] : copyBack_) dst.copy_(src);
    } catch (const std::exception &e) {
      fail(c10::str("chorus: ", name_, ": copying the result back failed: ", e.what()));
      return;
    }
    copyBack_.clear();
    keep_.clear();
    group_->flight().finished(seq_, true);
    finish();
    future_->markCompleted(c10::IValue(outputs_));
    return;
  }
  if (status == ncclTimeout) group_->logFlightRecorder(c10::str(name_, " #", seq_, " timed out").c_str());
  fail(group_->failureText(name_, seq_, status));
}

void WorkChorus::fail(const std::string &text) {
  group_->flight().finished(seq_, false);
  copyBack_.clear();
  keep_.clear();
  auto e = std::make_exception_ptr(c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, text));
  finish(e);
  future_->setError(e);
}

bool WorkChorus::isCompleted() {
  if (deferred_.load()) group_->flush();
  return c10d::Work::isCompleted();
}

bool WorkChorus::wait(std::chrono::milliseconds timeout) {
  if (deferred_.load()) group_->flush();
  if (timeout == kNoTimeout && enqueued_.load()) {
    // Runs the stream up to this work on this thread: no thread switch.
    ncclResult_t r = chorusEventSynchronize(event_);
    TORCH_CHECK(r == ncclSuccess, "chorus: ", name_, " #", seq_,
                ": Work.wait() cannot wait from inside a callback that runs on its own group's stream (",
                resultName(r), ")");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    C10_THROW_ERROR(DistBackendError, c10::str("chorus: ", name_, " (sequence number ", seq_, ") on rank ",
                                               group_->rank(), " of group '", group_->name(),
                                               "': Work.wait timed out after ", timeout.count(), " ms"));
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> WorkChorus::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> WorkChorus::getFuture() { return future_; }

uint64_t WorkChorus::getSequencenumber() const { return seq_; }

std::chrono::milliseconds WorkChorus::getTimeout() const { return group_->timeout(); }

}  // namespace chorus_torch
