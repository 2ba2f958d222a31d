// A torch Work for one chorus operation (or a coalesced group of them). It
// finishes on the group's stream, in order (Group queues one chorus host
// function per launch); wait() runs the stream up to it on the calling
// thread. Its Future is completed outside the stream (completion.hpp).
#pragma once
#include <chorus.h>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
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
  // A receive's peer (the group's rank it receives from), as gloo's; torch's
  // refusal for any other work.
  int sourceRank() const override;
  // When the last reference goes. c10 destroys an object only once its weak
  // references are gone too, and the group keeps weak ones to its works
  // (Group::inFlight_) until a later launch: the tensors and the future are
  // let go here, so that memory returns when the caller drops the work.
  void release_resources() override;

  // Group's side. The operation and its host function are on the stream;
  // the event marks the point after them.
  void markEnqueued(cudaStream_t stream);
  // Runs on the group's point-to-point communicator (set before any of it
  // is on a stream: its failure text comes from there).
  void setP2p(bool p2p) { p2p_ = p2p; }
  // On the stream, once the operation has run (status: its result).
  void complete(ncclResult_t status);
  // The launch failed: the work ends with this error without running.
  void fail(const std::string &text);
  // On the stream, before the operation runs: its input copies failed, so
  // it ends with this error whatever the operation returns.
  void stagingFailed(const std::string &text);
  // Point-to-point work held back: waiting for it launches it first.
  void setDeferred(bool d) { deferred_.store(d); }
  // Held by a coalescing block until its end: not to be waited for alone.
  void setCoalesced(bool c) { coalesced_.store(c); }
  // A batch's own work (batch_isend_irecv's, the only one torch hands
  // back), set before it is on a stream: it completes after its parts, on
  // other streams, and fails with the first of them that failed.
  void setParts(std::vector<c10::intrusive_ptr<WorkChorus>> parts) { parts_ = std::move(parts); }
  // The text this work failed with; empty while it has not failed.
  std::string failure();
  // Runs the stream up to this work (its error is left for wait()); false
  // from a host function of the same stream, which cannot wait for it.
  bool drain();
  // Finished (without launching held-back work, unlike isCompleted).
  bool done();
  // Sets the Future's value or error, once (completion.hpp calls it).
  void completeFuture();
  // Hands completeFuture to the group's completion threads.
  void postFuture();

 private:
  // Leaves completeFuture to the waiting thread or the completion threads.
  void settle();
  bool pendingInBlock();

  std::shared_ptr<Group> group_;
  uint64_t seq_;
  const char *name_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copyBack_;
  std::string stagingError_;  // set and read on the stream only
  std::vector<c10::intrusive_ptr<WorkChorus>> parts_;  // setParts
  std::string failText_;                               // fail, under mutex_
  bool p2p_ = false;          // setP2p
  int source_ = -1;           // a receive's peer (sourceRank)
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  chorusEvent_t event_ = nullptr;
  std::atomic<bool> enqueued_{false};
  std::atomic<bool> deferred_{false};
  std::atomic<bool> coalesced_{false};
  std::atomic<bool> futureClaimed_{false};
};

}  // namespace chorus_torch
