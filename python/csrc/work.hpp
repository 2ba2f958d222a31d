// A torch Work for one chorus operation (or a coalesced group of them). It
// completes on the group's stream, in order, through a chorus host
// function; wait() runs the stream up to it on the calling thread.
#pragma once
#include <chorus.h>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>

#include "group.hpp"

namespace chorus_torch {

class WorkChorus : public c10d::Work {
 public:
  WorkChorus(std::shared_ptr<Group> group, uint64_t seq, Launch &l);
  ~WorkChorus() override;

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override;
  std::chrono::milliseconds getTimeout() const override;

  // Puts the completion on the stream after the operation's calls (Group does).
  void enqueueCompletion(cudaStream_t stream);
  // Fails the work before it ran (its launch failed).
  void fail(const std::string &text);
  // Issued work whose launch is held back (point-to-point) flushes it first.
  void setDeferred(bool d) { deferred_.store(d); }

 private:
  static void onDone(void *self, ncclResult_t status);
  void complete(ncclResult_t status);

  std::shared_ptr<Group> group_;
  uint64_t seq_;
  const char *name_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copyBack_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  chorusEvent_t event_ = nullptr;
  std::atomic<bool> enqueued_{false};
  std::atomic<bool> deferred_{false};
};

}  // namespace chorus_torch
