// One process group's chorus side: its communicator and streams, and the one
// way operations are launched on them. Operations run in issue order on the
// group's chorus stream; each is followed on the stream by a host function
// that completes its Work (and the Future DDP waits on) and by an event that
// Work.wait() runs the stream up to, on the waiting thread. Point-to-point
// operations run on a communicator of their own (p2pComm_), are held back
// briefly and launched together (see kP2pQuiet), each on the stream of its
// peer and direction, so that no send or receive waits for another peer's
// (see lanes_).
#pragma once
#include <chorus.h>
#include <nccl.h>

#include <ATen/ATen.h>
#include <ATen/ThreadLocalState.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "completion.hpp"
#include "flight.hpp"

namespace chorus_torch {

class WorkChorus;

// What an operation needs besides its chorus calls.
struct Launch {
  c10d::OpType type = c10d::OpType::UNKNOWN;
  const char *name = "";  // "AllReduce", as chorus names its calls
  std::vector<at::Tensor> inputs, outputs;  // as torch passed them; outputs are the Future's value
  std::vector<at::Tensor> keep;             // staging buffers, contiguous copies: alive until done
  // (staging dst, src) copied on the group's stream right before the calls
  // run, not when they are issued: an earlier operation still in flight
  // may write src (an async all_reduce, then a reduce_scatter of its output).
  std::vector<std::pair<at::Tensor, at::Tensor>> copyIn;
  std::vector<std::pair<at::Tensor, at::Tensor>> copyBack;  // (dst, src) copied once done
  // The chorus calls, made inside a group; must not throw.
  std::function<ncclResult_t(ncclComm_t, cudaStream_t)> calls;
  bool p2p = false;
  int peer = -1;  // a send's or receive's peer
};

class Group : public std::enable_shared_from_this<Group> {
 public:
  // A communicator from a unique id passed through store (rank 0 sets it).
  static std::shared_ptr<Group> rendezvous(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                                           std::chrono::milliseconds timeout, std::string name);
  // ncclCommSplit of this group: every rank of it calls; color < 0 for none (returns nullptr).
  std::shared_ptr<Group> split(int color, int key, std::chrono::milliseconds timeout, std::string name);
  // ncclCommShrink of this group to the ranks not excluded, in this group's order; only those call.
  std::shared_ptr<Group> subset(const std::vector<int> &excluded, std::chrono::milliseconds timeout,
                                std::string name);
  ~Group();
  // At the process's exit (std::atexit), every group with nothing in
  // flight leaves as destroy_process_group would have it leave: its
  // communicators say goodbye (what they sent stays theirs to take), so
  // that the peers of a script that never called destroy_process_group
  // take what it sent last and go on among themselves. They had failed on
  // the next call with "rank 1 exited", whatever it concerned, where gloo
  // delivers. A group with work in flight is left as it is (its peers wait
  // for that work: they fail naming this rank).
  static void leaveIdleAtExit();

  c10::intrusive_ptr<c10d::Work> launch(Launch l);
  // Between these, launches are collected and run as one chorus group (torch's coalescing manager).
  void startCoalescing();
  c10::intrusive_ptr<c10d::Work> endCoalescing();
  // A call refused inside a coalescing block: its exception leaves torch's
  // _coalescing_manager without endCoalescing, so the block ends here, what
  // it had collected failed, and later calls run as they come (they had
  // joined a block nobody would end: returned at once, buffers untouched).
  // A caller that caught the refusal and went on gets the error from
  // endCoalescing (the calls after the refusal ran on their own).
  void abandonBlock();
  // Launches the point-to-point operations held back (Work.wait does).
  void flush();
  // Waits for everything issued, then destroys the communicator (abort it when it has failed).
  void shutdown();
  // Ends everything at once: running and queued operations fail.
  void abort();

  // The text of an operation's failure, with chorus's explanation (names the
  // rank at fault), from the communicator it ran on.
  std::string failureText(const char *name, uint64_t seq, ncclResult_t r, bool p2p);
  void logFlightRecorder(const char *why);
  FlightRecorder &flight() { return flight_; }
  Completions &completions() { return completions_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string &name() const { return name_; }
  // How the communicator was made: "rendezvous" (through the store), "split" or "shrink" (of a parent's).
  const char *origin() const { return origin_; }
  uint64_t seq() const { return seq_.load(); }
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeoutMs_.load()); }
  void setTimeout(std::chrono::milliseconds timeout);
  // The global rank of each of the group's ranks (torch's
  // global_ranks_in_group; empty for the default group): a subgroup's
  // failure texts number ranks within the group, and say which those are.
  void setGlobalRanks(const std::vector<uint64_t> &ranks);
  bool usable() const;

 private:
  Group(ncclComm_t comm, int rank, int size, std::chrono::milliseconds timeout, std::string name);
  // A child communicator made from this one by make (ncclCommSplit or
  // ncclCommShrink, nonblocking), as a Group whose origin() is origin.
  using Derive = std::function<ncclResult_t(ncclComm_t, ncclComm_t *, ncclConfig_t *)>;
  std::shared_ptr<Group> derive(const char *origin, const std::string &what, std::chrono::milliseconds timeout,
                                std::string name, const Derive &make);
  // Waits for a nonblocking init/split/shrink (bounded by the timeout, then
  // aborted); at the timeout, missing() (when given) says who never came.
  static ncclComm_t finishInit(ncclComm_t comm, ncclResult_t r, std::chrono::milliseconds timeout,
                               const std::string &what,
                               const std::function<std::string()> &missing = nullptr);
  // A nonblocking parent's split or shrink (r: what the call returned) runs
  // after the call, as NCCL's: its outcome once the parent stops saying
  // ncclInProgress (the new handle is given by then), ncclInProgress if it
  // has not within twice timeout. childFailed throws where it failed (a
  // failure the parent keeps, as in NCCL).
  static ncclResult_t awaitChild(ncclComm_t parent, ncclResult_t r, std::chrono::milliseconds timeout);
  static void childFailed(ncclComm_t parent, ncclResult_t r, const std::string &what);
  struct Item {
    std::function<ncclResult_t(ncclComm_t, cudaStream_t)> calls;
    c10::intrusive_ptr<WorkChorus> work;
    bool recv = false;  // a point-to-point receive
    bool p2p = false;   // a point-to-point operation: runs on p2pComm_
    std::vector<std::pair<at::Tensor, at::Tensor>> copyIn;  // Launch::copyIn
    int peer = -1;                                          // Launch::peer
    // The calling thread's torch state (inference mode), for its copies and
    // completion, which a backlogged launch's issuing thread does not share.
    at::ThreadLocalState tls;
  };
  // Splits comm_ into p2pComm_ and makes its stream (every rank of the
  // group calls this as it makes the group).
  void startP2p(std::chrono::milliseconds timeout);
  c10::intrusive_ptr<WorkChorus> newWork(Launch &l);
  // Issues items as one chorus group on stream: stream_ (collectives, on
  // comm_), a lane (sends to or receives from one peer, on p2pComm_) or
  // p2pStream_ (a batch's completion, on p2pComm_).
  void issueLocked(std::vector<Item> &items, bool throwOnError, cudaStream_t stream);
  // Issues point-to-point items on their lanes, each lane's as one chorus
  // group (items is emptied); the lanes used are added to *used.
  void issueOnLanesLocked(std::vector<Item> &items, bool throwOnError, std::vector<cudaStream_t> *used);
  // Fails items that were not launched (and throws when asked to).
  void failLocked(std::vector<Item> &items, const std::string &text, bool throwOnError);
  // Makes stream wait for the point of another stream that event marks (the
  // wait owns the event).
  bool orderAfterLocked(cudaStream_t stream, chorusEvent_t point);
  void flushLocked();
  void flusherMain();
  // Issues the backlog's oldest launches while fewer than kMaxInFlight
  // collectives are on the stream (inFlight_).
  void feedBacklogLocked();
  // The whole backlog issued, its oldest launches waited for on this
  // thread as room is needed (shutdown).
  void drainBacklog();
  void startFlusherLocked();
  // Issues a launch of collectives (throwing a refusal), or holds it in the
  // backlog behind earlier ones while kMaxInFlight are on the stream.
  void issueOrHoldLocked(std::vector<Item> &items);
  // Stops launches; fails what was never launched (held back, coalesced or
  // in the backlog).
  void closeLocked(const char *why);
  // The communicators (comm_, p2pComm_), taken by whichever of shutdown and
  // abort gets them first.
  std::pair<ncclComm_t, ncclComm_t> takeComms();
  // The rest of a teardown: the stream, the completion threads.
  void finishTeardown();
  void checkOpenLocked(const char *name);

  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
  // Point-to-point operations (send, recv, their coalesced batches) run on a
  // communicator of their own, split from comm_ as the group is made, as
  // torch's NCCL backend gives them communicators of their own: a large
  // send that waits for its receiver then never holds up a later
  // collective, which the receiver may call first, and a pending receive is
  // never matched against a collective's traffic (all_to_all, gather and
  // scatter move over point-to-point connections too).
  ncclComm_t p2pComm_ = nullptr;
  // Sends and receives run on a stream per peer and direction (a lane),
  // made with its first operation: one waits only for the earlier ones to
  // the same peer in the same direction, as gloo's pairs are independent
  // (on one stream for all sends, a send to rank 1 waited behind a large
  // one to rank 2 that waited for rank 1, and receives likewise); so does
  // each operation of a coalesced batch (batch_isend_irecv), whose own
  // Work completes on p2pStream_ after them. A connection never carries
  // two sends or two receives at once.
  std::map<std::pair<bool, int>, cudaStream_t> lanes_;  // (receive, peer): its lane
  cudaStream_t p2pStream_ = nullptr;
  int rank_, size_;
  std::atomic<int64_t> timeoutMs_;
  std::string name_;
  std::string rankMap_;  // " (in group 'g', rank 0 is global rank 1, ...)" for a subgroup, else empty
  const char *origin_ = "rendezvous";
  FlightRecorder flight_;

  std::mutex mutex_;  // serializes calls into chorus on comm_, and the state below
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> closed_{false};  // no more launches (shut down or aborted)
  bool tearingDown_ = false;         // shutdown() or abort() owns the teardown
  bool idle();                       // nothing issued that has yet to finish
  const pid_t pid_ = getpid();       // the process that made it (leaveIdleAtExit)
  static void track(const std::shared_ptr<Group> &g);
  bool flightDumped_ = false;
  bool coalescing_ = false;
  std::string abandoned_;  // why the block ended early (abandonBlock), until the next one starts
  std::vector<Item> coalesced_;
  std::vector<Item> deferred_;
  // Collectives issued on stream_, oldest first (weak: a work nobody holds
  // any more has completed).
  std::deque<c10::weak_intrusive_ptr<WorkChorus>> inFlight_;
  // Launches of collectives held back while kMaxInFlight are on the stream,
  // oldest first, each issued as one chorus group when room comes (the
  // flusher's thread, a wait on one of them, shutdown).
  std::deque<std::vector<Item>> backlog_;
  std::chrono::steady_clock::time_point firstDeferred_, lastDeferred_;
  std::condition_variable flusherWake_;
  std::thread flusher_;
  bool flusherStop_ = false;

  std::mutex commMutex_;  // guards comm_ and p2pComm_ against being freed while a completion reads their errors
  Completions completions_;
};

}  // namespace chorus_torch
