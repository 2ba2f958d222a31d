#include "group.hpp"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "convert.hpp"
#include "pyexit.hpp"
#include "work.hpp"

namespace chorus_torch {

namespace {

// Point-to-point operations wait this long for company before they are
// launched (Work.wait, the next collective or shutdown launch them sooner):
// those to one peer in one direction that come together then run as one
// chorus group, on their lane (Group::lanes_), beside the other lanes' work.
constexpr auto kP2pQuiet = std::chrono::microseconds(200);
constexpr auto kP2pMaxDelay = std::chrono::milliseconds(1);  // however often more come

// At most this many collectives on a group's stream. A launch puts up to four
// items on the stream (an order point, its input copies, its calls, and one
// completion for all its works); past 512 items chorus makes the issuing
// thread run the oldest itself, which it would do here holding the group's
// lock, where a completion's callback (a comm hook that issues the next
// all_reduce) could not take it again. Later collectives wait in the
// group's backlog, and the call returns at once, as gloo's queue takes any
// number: the caller may go on to a call its peers need first (a receive,
// another group's collective) before their collectives can end.
constexpr size_t kMaxInFlight = 120;
// How often the flusher looks for room while the backlog holds launches.
constexpr auto kBacklogPoll = std::chrono::microseconds(200);

// One completion for all the works of a launch. It copies results back into
// the caller's tensors on the stream's thread, with the issuing thread's
// torch state (inference mode: its staging buffers are inference tensors).
struct Batch {
  std::vector<c10::intrusive_ptr<WorkChorus>> works;
  at::ThreadLocalState tls;
  static void done(void *self, ncclResult_t status) {
    PythonSection python;  // left after the batch is gone (its tensors may have Python objects)
    std::unique_ptr<Batch> b(static_cast<Batch *>(self));
    at::ThreadLocalStateGuard g(b->tls);
    for (auto &w : b->works) w->complete(status);
    if (python.exiting()) (void)b.release();  // kept for good, with its works (pyexit.hpp)
  }
};

// The staging copies of a batch's inputs, made on the stream just before
// its calls run (Launch::copyIn). A copy that fails (short of memory) fails
// the batch's works, whatever their calls then do.
struct CopyIn {
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;
  std::vector<c10::intrusive_ptr<WorkChorus>> works;
  at::ThreadLocalState tls;  // the issuing thread's (see Batch)
  static void run(void *self, ncclResult_t status) {
    PythonSection python;  // left after the copy-in is gone
    std::unique_ptr<CopyIn> c(static_cast<CopyIn *>(self));
    if (status == ncclSuccess) c->copy();  // else the work fails with the stream's error anyway
    if (python.exiting()) (void)c.release();  // kept for good (pyexit.hpp)
  }
  void copy() {
    at::ThreadLocalStateGuard g(tls);
    try {
      for (auto &[dst, src] : pairs) dst.copy_(src);
    } catch (const std::exception &e) {
      std::string text = c10::str("chorus: copying the input to a staging buffer failed: ", e.what());
      for (auto &w : works) w->stagingFailed(text);
    }
  }
};

[[noreturn]] void throwBackend(const std::string &text) { C10_THROW_ERROR(DistBackendError, text); }

std::mutex liveGroupsMutex;
std::vector<std::weak_ptr<Group>> liveGroups;  // every group made, for leaveIdleAtExit

}  // namespace

void Group::track(const std::shared_ptr<Group> &g) {
  // At the process's exit, after every Python atexit handler (one may still
  // use a group) and the interpreter's finalization: registered after the
  // registry's own statics, so it runs before they are destroyed.
  static std::once_flag once;
  std::call_once(once, [] { std::atexit([] { leaveIdleAtExit(); }); });
  std::lock_guard<std::mutex> lock(liveGroupsMutex);
  liveGroups.erase(std::remove_if(liveGroups.begin(), liveGroups.end(),
                                  [](const std::weak_ptr<Group> &w) { return w.expired(); }),
                   liveGroups.end());
  liveGroups.push_back(g);
}

bool Group::idle() {
  std::lock_guard<std::mutex> g(mutex_);
  if (closed_.load() || tearingDown_ || coalescing_ || !deferred_.empty() || !backlog_.empty()) return false;
  for (auto &[key, lane] : lanes_)
    if (lane && chorusStreamQuery(lane) == ncclInProgress) return false;
  for (cudaStream_t s : {p2pStream_, stream_})
    if (s && chorusStreamQuery(s) == ncclInProgress) return false;
  return true;
}

void Group::leaveIdleAtExit() {
  std::vector<std::shared_ptr<Group>> groups;
  {
    // Not waited for: in a child forked while another thread held it, it
    // stays held (then nothing leaves, as before).
    std::unique_lock<std::mutex> lock(liveGroupsMutex, std::try_to_lock);
    if (!lock) return;
    for (const auto &w : liveGroups)
      if (auto g = w.lock()) groups.push_back(std::move(g));
  }
  // A forked child's groups are its parent's (their threads and locks are
  // the parent's, and the library refuses their communicators there).
  for (auto &g : groups)
    if (g->pid_ == getpid() && g->idle()) g->shutdown();
}

Group::Group(ncclComm_t comm, int rank, int size, std::chrono::milliseconds timeout, std::string name)
    : comm_(comm), rank_(rank), size_(size), timeoutMs_(timeout.count()), name_(std::move(name)) {
  ncclResult_t r = chorusCommSetTimeout(comm_, timeout.count());
  if (r == ncclSuccess) r = chorusStreamCreate(&stream_);
  if (r != ncclSuccess) {
    ncclCommAbort(comm_);
    throwBackend(c10::str("chorus: group '", name_, "': cannot set up its stream: ", resultName(r)));
  }
}

Group::~Group() {
  try {
    shutdown();
  } catch (...) {
  }
}

namespace {
// comm's state once it stops saying ncclInProgress, or ncclInProgress once
// deadline has passed; the looks further apart as it goes (20 us to 2 ms).
ncclResult_t pollState(ncclComm_t comm, std::chrono::steady_clock::time_point deadline) {
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclCommGetAsyncError(comm, &state);
    if (state != ncclInProgress || std::chrono::steady_clock::now() > deadline) return state;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}
}  // namespace

ncclComm_t Group::finishInit(ncclComm_t comm, ncclResult_t r, std::chrono::milliseconds timeout,
                             const std::string &what, const std::function<std::string()> &missing) {
  if (r != ncclSuccess && r != ncclInProgress)
    throwBackend(c10::str("chorus: ", what, " failed", outcomeText(r), ": ", ncclGetLastError(nullptr)));
  if (comm == nullptr) return nullptr;
  ncclResult_t state = pollState(comm, std::chrono::steady_clock::now() + timeout);
  if (state == ncclSuccess) return comm;
  std::string text = ncclGetLastError(comm);
  ncclCommAbort(comm);
  if (state != ncclInProgress) throwBackend(c10::str("chorus: ", what, " failed", outcomeText(state), ": ", text));
  throwBackend(c10::str("chorus: ", what, " timed out after ", timeout.count(),
                        " ms (the process group's timeout): not every rank joined", missing ? missing() : ""));
}

ncclResult_t Group::awaitChild(ncclComm_t parent, ncclResult_t r, std::chrono::milliseconds timeout) {
  if (r != ncclSuccess && r != ncclInProgress) return r;
  // the job's waits end at the parent's timeout (set to this one); twice that is a bound that should not be met
  return pollState(parent, std::chrono::steady_clock::now() + 2 * timeout + std::chrono::seconds(5));
}

void Group::childFailed(ncclComm_t parent, ncclResult_t r, const std::string &what) {
  if (r == ncclSuccess) return;
  if (r == ncclInProgress) throwBackend(c10::str("chorus: ", what, " did not end within twice its timeout"));
  throwBackend(c10::str("chorus: ", what, " failed", outcomeText(r), ": ", ncclGetLastError(parent)));
}

std::shared_ptr<Group> Group::rendezvous(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                                         std::chrono::milliseconds timeout, std::string name) {
  // The store outlives a destroyed group, and a group made again (init_process_group after
  // destroy_process_group under torchrun, the same store passed again) gets the same prefix:
  // a rank reading a fixed key could find the last init's id, whose rendezvous has ended.
  // So each init has a key of its own, numbered by a counter every rank adds to first: a
  // rank reaches its next init only after this one completed, which every rank joined
  // after its add, so the counter's values for init k all come before those for k + 1.
  int64_t count = store->add("chorus_inits", 1);
  const std::string key = c10::str("chorus_unique_id_", (count - 1) / size);
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) throwBackend(c10::str("chorus: ncclGetUniqueId failed: ", ncclGetLastError(nullptr)));
    store->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
  } else {
    std::vector<uint8_t> v = store->get(key);
    TORCH_CHECK(v.size() == sizeof id.internal, "chorus: group '", name, "': the store holds a ", v.size(),
                "-byte id under '", key, "', not ", sizeof id.internal, " bytes");
    std::memcpy(id.internal, v.data(), sizeof id.internal);
  }
  // Who came, in the store too: ranks that give up at the timeout name
  // the ones that never did, and say they gave up, which a rank that comes
  // later reads (its own rendezvous would only find the root gone).
  std::string what = c10::str("init of group '", name, "' (rank ", rank, " of ", size, ")");
  // Named after this init's id: a store outlives a destroyed group, and the
  // next one (after destroy_process_group) may get the same prefix.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : id.internal) h = (h ^ c) * 0x100000001b3ull;
  std::string tag = c10::str(std::hex, h);
  std::string gaveUp = c10::str("chorus_gave_up_", tag);
  try {
    store->set(c10::str("chorus_joined_", tag, "_", rank), std::vector<uint8_t>{1});
    if (store->check({gaveUp}))
      throwBackend(c10::str("chorus: ", what, ": the other ranks gave up waiting for this one after the process "
                            "group's timeout (", timeout.count(), " ms)"));
  } catch (const c10::DistBackendError &) {
    throw;
  } catch (const std::exception &) {  // a store that fails here fails the rendezvous below as well
  }
  auto missing = [store, size, tag, gaveUp]() -> std::string {
    std::string list;
    int n = 0;
    try {
      store->set(gaveUp, std::vector<uint8_t>{1});
      for (int r = 0; r < size && n <= 8; r++)
        if (!store->check({c10::str("chorus_joined_", tag, "_", r)})) list += c10::str(n++ ? ", " : "", r);
    } catch (const std::exception &) {
      return "";
    }
    if (n == 0) return "";
    return c10::str(": rank", n > 1 ? "s " : " ", list, n > 8 ? ", ..." : "", " never came");
  };
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // bounded by the group's timeout below
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  comm = finishInit(comm, r, timeout, what, missing);
  std::shared_ptr<Group> g(new Group(comm, rank, size, timeout, std::move(name)));
  g->startP2p(timeout);
  track(g);
  return g;
}

void Group::startP2p(std::chrono::milliseconds timeout) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // bounded by the group's timeout
  ncclComm_t p2p = nullptr;
  std::string what = c10::str("the point-to-point communicator of group '", name_, "'");
  ncclResult_t r = awaitChild(comm_, ncclCommSplit(comm_, 0, rank_, &p2p, &config), timeout);
  childFailed(comm_, r, what);
  p2p = finishInit(p2p, r, timeout, what);
  {
    std::lock_guard<std::mutex> g(commMutex_);
    p2pComm_ = p2p;
  }
  r = chorusCommSetTimeout(p2pComm_, timeoutMs_);
  // Each lane keeps its own order: an irecv issued before an isend must not
  // hold the send back (gloo's semantics), which NCCL's one order per
  // communicator would.
  if (r == ncclSuccess) r = chorusCommSetStreamOrder(p2pComm_, 0);
  if (r == ncclSuccess) r = chorusStreamCreate(&p2pStream_);
  if (r != ncclSuccess) throwBackend(c10::str("chorus: group '", name_, "': cannot set up its point-to-point stream"));
}

std::shared_ptr<Group> Group::derive(const char *origin, const std::string &what, std::chrono::milliseconds timeout,
                                     std::string name, const Derive &make) {
  ncclComm_t child = nullptr;
  ncclResult_t r;
  for (;;) {
    // The backlog first, without the lock: the split holds it while it
    // waits for the peers, who may wait for this rank's held-back
    // collectives first.
    drainBacklog();
    std::lock_guard<std::mutex> g(mutex_);
    checkOpenLocked(origin);
    flushLocked();
    if (!backlog_.empty()) continue;  // another thread's launches came meanwhile
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // the child's rendezvous is bounded by finishInit's timeout
    // The parent's ranks agree on the split over the parent's connections,
    // on the job that make starts (as NCCL's, it runs after the call):
    // within the new group's timeout, so that a member that never comes
    // fails the others at that timeout. The lock keeps this rank's other
    // calls off the parent until the job is done, as chorus refuses them.
    chorusCommSetTimeout(comm_, timeout.count());
    r = awaitChild(comm_, make(comm_, &child, &config), timeout);
    chorusCommSetTimeout(comm_, timeoutMs_);
    break;
  }
  childFailed(comm_, r, what);
  child = finishInit(child, r, timeout, what);
  if (child == nullptr) return nullptr;  // a split this rank takes no part in
  int crank = 0, csize = 0;
  ncclCommUserRank(child, &crank);
  ncclCommCount(child, &csize);
  std::shared_ptr<Group> g(new Group(child, crank, csize, timeout, std::move(name)));
  g->origin_ = origin;
  g->startP2p(timeout);
  track(g);
  return g;
}

std::shared_ptr<Group> Group::split(int color, int key, std::chrono::milliseconds timeout, std::string name) {
  std::string what = c10::str("split of group '", name_, "' into '", name, "'");
  return derive("split", what, timeout, std::move(name), [&](ncclComm_t parent, ncclComm_t *child, ncclConfig_t *c) {
    return ncclCommSplit(parent, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, child, c);
  });
}

std::shared_ptr<Group> Group::subset(const std::vector<int> &excluded, std::chrono::milliseconds timeout,
                                     std::string name) {
  std::string what = c10::str("subgroup '", name, "' of group '", name_, "'");
  std::vector<int> ex(excluded);
  return derive("shrink", what, timeout, std::move(name), [&](ncclComm_t parent, ncclComm_t *child, ncclConfig_t *c) {
    return ncclCommShrink(parent, ex.data(), static_cast<int>(ex.size()), child, c, NCCL_SHRINK_DEFAULT);
  });
}

void Group::checkOpenLocked(const char *name) {
  if (closed_)
    C10_THROW_ERROR(DistBackendError, c10::str("chorus: ", name, " on group '", name_,
                                               "', which has been shut down or aborted"));
}

bool Group::usable() const { return !closed_; }

void Group::setTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> g(mutex_);
  checkOpenLocked("setTimeout");
  timeoutMs_ = timeout.count();
  chorusCommSetTimeout(comm_, timeout.count());
  if (p2pComm_) chorusCommSetTimeout(p2pComm_, timeout.count());
}

c10::intrusive_ptr<WorkChorus> Group::newWork(Launch &l) {
  uint64_t seq = ++seq_;
  flight_.issued(seq, l.name, l.inputs, l.outputs);
  return c10::make_intrusive<WorkChorus>(shared_from_this(), seq, l);
}

void Group::feedBacklogLocked() {
  while (!inFlight_.empty()) {
    auto oldest = inFlight_.front().lock();
    if (oldest && !oldest->done()) break;
    inFlight_.pop_front();
  }
  while (!backlog_.empty() && inFlight_.size() < kMaxInFlight) {
    std::vector<Item> items = std::move(backlog_.front());
    backlog_.pop_front();
    issueLocked(items, false, stream_);  // a refusal fails its works, as any launch's failure
  }
}

void Group::drainBacklog() {
  for (;;) {
    c10::intrusive_ptr<WorkChorus> oldest;
    {
      std::lock_guard<std::mutex> g(mutex_);
      feedBacklogLocked();
      if (backlog_.empty() || inFlight_.empty()) return;
      oldest = inFlight_.front().lock();  // not done: feedBacklogLocked stopped at it
    }
    if (!oldest || !oldest->drain()) return;  // on this thread, without the lock
  }
}

void Group::issueOrHoldLocked(std::vector<Item> &items) {
  feedBacklogLocked();
  if (backlog_.empty() && inFlight_.size() < kMaxInFlight) return issueLocked(items, true, stream_);
  for (Item &it : items) {
    it.work->setCoalesced(false);  // an ended block's: waited for as any launch's
    it.work->setDeferred(true);    // waiting for it feeds the backlog
  }
  backlog_.push_back(std::move(items));
  startFlusherLocked();
}

void Group::startFlusherLocked() {
  if (!flusher_.joinable()) flusher_ = std::thread([this] { flusherMain(); });
  flusherWake_.notify_one();
}

c10::intrusive_ptr<c10d::Work> Group::launch(Launch l) {
  std::unique_lock<std::mutex> g(mutex_);
  checkOpenLocked(l.name);
  auto calls = std::move(l.calls);
  auto copyIn = std::move(l.copyIn);
  bool recv = l.type == c10d::OpType::RECV;
  auto work = newWork(l);
  std::vector<Item> items;
  items.push_back({std::move(calls), work, recv, l.p2p, std::move(copyIn), l.peer});
  if (coalescing_) {
    work->setCoalesced(true);
    coalesced_.push_back(std::move(items[0]));
    return work;
  }
  if (l.p2p) {
    work->setDeferred(true);
    lastDeferred_ = std::chrono::steady_clock::now();
    if (deferred_.empty()) firstDeferred_ = lastDeferred_;
    deferred_.push_back(std::move(items[0]));
    startFlusherLocked();
    return work;
  }
  flushLocked();
  issueOrHoldLocked(items);
  return work;
}

namespace {
struct OrderPoint {
  chorusEvent_t event;
  static void wait(void *self, ncclResult_t) {
    auto *p = static_cast<OrderPoint *>(self);
    chorusEventSynchronize(p->event);  // a failure there fails the work behind it on its own
    chorusEventDestroy(p->event);
    delete p;
  }
};

// An event at what has been issued on stream so far, or nullptr (short of memory).
chorusEvent_t pointNow(cudaStream_t stream) {
  chorusEvent_t e = nullptr;
  if (chorusEventCreate(&e) != ncclSuccess) return nullptr;
  if (chorusEventRecord(e, stream) == ncclSuccess) return e;
  chorusEventDestroy(e);
  return nullptr;
}
}  // namespace

void Group::failLocked(std::vector<Item> &items, const std::string &text, bool throwOnError) {
  for (Item &it : items) {
    it.work->setDeferred(false);
    it.work->fail(text);
  }
  if (throwOnError) throwBackend(text);
}

bool Group::orderAfterLocked(cudaStream_t stream, chorusEvent_t point) {
  auto *p = new OrderPoint{point};
  if (chorusLaunchHostFunc(stream, OrderPoint::wait, p) != ncclSuccess) {
    chorusEventDestroy(point);
    delete p;
    return false;
  }
  return true;
}

void Group::issueLocked(std::vector<Item> &items, bool throwOnError, cudaStream_t stream) {
  if (items.empty()) return;
  bool p2p = stream != stream_;
  ncclComm_t comm = p2p ? p2pComm_ : comm_;
  for (const Item &it : items) it.work->setP2p(p2p);  // before anything of it is on the stream, which may complete it at once
  auto *copyIn = new CopyIn{{}, {}, items.front().tls};
  for (Item &it : items) {
    for (auto &pair : it.copyIn) copyIn->pairs.push_back(std::move(pair));
    copyIn->works.push_back(it.work);
  }
  if (copyIn->pairs.empty()) {
    delete copyIn;
  } else if (chorusLaunchHostFunc(stream, CopyIn::run, copyIn) != ncclSuccess) {  // short of memory only
    delete copyIn;
    return failLocked(items, c10::str("chorus: group '", name_, "': cannot queue the input copies"), throwOnError);
  }
  ncclResult_t first = ncclGroupStart();
  for (Item &it : items) {
    ncclResult_t r = it.calls(comm, stream);
    if (first == ncclSuccess) first = r;
  }
  ncclResult_t end = ncclGroupEnd();  // drops the whole group when a call failed
  if (first == ncclSuccess) first = end;
  if (first != ncclSuccess) {
    std::string text = c10::str("chorus: ", items.size() > 1 ? "a group of operations" : "the operation",
                                " on group '", name_, "' was refused", outcomeText(first), ": ",
                                ncclGetLastError(comm), rankMap_);
    return failLocked(items, text, throwOnError);
  }
  auto *batch = new Batch{{}, items.front().tls};
  for (Item &it : items) batch->works.push_back(it.work);
  ncclResult_t r = chorusLaunchHostFunc(stream, Batch::done, batch);
  if (r != ncclSuccess) {  // cannot happen short of memory: the calls are queued, their completion is not
    delete batch;
    return failLocked(items, c10::str("chorus: group '", name_, "': cannot queue a completion: ", resultName(r)),
                      throwOnError);
  }
  for (Item &it : items) {
    it.work->markEnqueued(stream);
    // Only collectives (stream_) count against kMaxInFlight: a send or
    // receive ends only when its peer issues the match, which may come after
    // any number of other calls (an irecv posted before 130 all_reduces, 100
    // isends before their irecvs), and runs on a lane of its own.
    if (stream == stream_) inFlight_.emplace_back(it.work);
  }
}

void Group::issueOnLanesLocked(std::vector<Item> &items, bool throwOnError, std::vector<cudaStream_t> *used) {
  // Each lane's operations, in issue order.
  std::vector<std::pair<std::pair<bool, int>, std::vector<Item>>> byLane;
  for (Item &it : items) {
    // A rank's sends to itself and receives from itself share one lane: a
    // pair of them must be in one chorus group to match (as in a batch
    // with both, which torch's NCCL backend runs).
    std::pair<bool, int> key{it.recv && it.peer != rank_, it.peer};
    auto at = std::find_if(byLane.begin(), byLane.end(), [&](const auto &e) { return e.first == key; });
    if (at == byLane.end()) at = byLane.insert(byLane.end(), {key, {}});
    at->second.push_back(std::move(it));
  }
  items.clear();
  for (auto &[key, laneItems] : byLane) {
    cudaStream_t &lane = lanes_[key];
    if (!lane && chorusStreamCreate(&lane) != ncclSuccess) {
      lane = nullptr;
      failLocked(laneItems, c10::str("chorus: group '", name_, "': cannot create a stream for its ",
                                     key.first ? "receives from" : "sends to", " rank ", key.second), throwOnError);
      continue;
    }
    issueLocked(laneItems, throwOnError, lane);
    if (used) used->push_back(lane);
  }
}

void Group::flushLocked() {
  if (deferred_.empty()) return;
  issueOnLanesLocked(deferred_, false, nullptr);
}

void Group::flush() {
  std::lock_guard<std::mutex> g(mutex_);
  flushLocked();
  feedBacklogLocked();
}

void Group::flusherMain() {
  std::unique_lock<std::mutex> g(mutex_);
  while (!flusherStop_) {
    auto now = std::chrono::steady_clock::now();
    if (!backlog_.empty()) {
      PythonSection python;  // a launch refused, or the last reference to a work dropped: pyexit.hpp
      feedBacklogLocked();
    }
    // With a backlog, a look for room every kBacklogPoll: a completion on
    // the stream's thread cannot take the lock to say so (an issuing thread
    // holding it may be running the stream).
    auto next = backlog_.empty() ? std::chrono::steady_clock::time_point::max() : now + kBacklogPoll;
    if (deferred_.empty()) {
      if (next == std::chrono::steady_clock::time_point::max()) flusherWake_.wait(g);
      else flusherWake_.wait_until(g, next);
      continue;
    }
    auto due = std::min(lastDeferred_ + kP2pQuiet, firstDeferred_ + kP2pMaxDelay);
    if (now < due) {
      flusherWake_.wait_until(g, std::min(due, next));
      continue;
    }
    PythonSection python;
    flushLocked();
  }
}

void Group::startCoalescing() {
  std::lock_guard<std::mutex> g(mutex_);
  checkOpenLocked("startCoalescing");
  TORCH_CHECK(!coalescing_, "chorus: group '", name_, "': startCoalescing while already coalescing");
  abandoned_.clear();
  flushLocked();
  coalescing_ = true;
}

void Group::abandonBlock() {
  std::lock_guard<std::mutex> g(mutex_);
  if (!coalescing_) return;
  std::string text = c10::str("chorus: group '", name_, "': a call in the coalescing block was refused, so the ",
                              "block ended there and none of the operations issued in it before ran");
  for (Item &it : coalesced_) it.work->fail(text);
  coalesced_.clear();
  coalescing_ = false;
  abandoned_ = text;  // for its endCoalescing, if the caller caught the refusal and carried on
}

c10::intrusive_ptr<c10d::Work> Group::endCoalescing() {
  std::lock_guard<std::mutex> g(mutex_);
  if (!coalescing_ && !abandoned_.empty()) {
    std::string text = std::move(abandoned_);
    abandoned_.clear();
    throwBackend(text);
  }
  TORCH_CHECK(coalescing_, "chorus: group '", name_, "': endCoalescing without startCoalescing");
  coalescing_ = false;
  checkOpenLocked("endCoalescing");
  std::vector<Item> items;
  items.swap(coalesced_);
  // The coalesced group's own Work completes after all of its operations.
  Launch whole;
  whole.type = c10d::OpType::COALESCED;
  whole.name = "Coalesced";
  for (Item &it : items)
    for (const at::Tensor &t : it.work->result()) whole.outputs.push_back(t);
  // A batch of sends and receives only (batch_isend_irecv) runs on the
  // point-to-point communicator; one with collectives in it on comm_.
  bool p2p = !items.empty();
  for (const Item &it : items) p2p &= it.p2p;
  auto work = newWork(whole);
  std::vector<Item> last;
  last.push_back({[](ncclComm_t, cudaStream_t) { return ncclSuccess; }, work, false, p2p});
  if (!p2p) {  // one chorus group with its collectives
    items.push_back(std::move(last[0]));
    issueOrHoldLocked(items);
    return work;
  }
  // Each send and receive on its lane, as when launched alone (a batch
  // that waited for earlier work on all its lanes before any of it began
  // could wait for a peer that waits for the batch); its own Work on
  // p2pStream_, after each lane's part.
  std::vector<c10::intrusive_ptr<WorkChorus>> parts;
  for (const Item &it : items) parts.push_back(it.work);
  work->setParts(std::move(parts));
  std::vector<cudaStream_t> used;
  issueOnLanesLocked(items, true, &used);
  for (cudaStream_t lane : used) {
    chorusEvent_t part = pointNow(lane);
    if (!part || !orderAfterLocked(p2pStream_, part))  // short of memory only (the order point owns the event)
      failLocked(last, c10::str("chorus: group '", name_, "': cannot order the batch's completion"), true);
  }
  issueLocked(last, true, p2pStream_);
  return work;
}

void Group::setGlobalRanks(const std::vector<uint64_t> &ranks) {
  bool identity = true;
  for (size_t i = 0; i < ranks.size(); i++) identity = identity && ranks[i] == i;
  if (identity) return;  // rank numbers are global already
  std::string map = c10::str(" (ranks above are group '", name_, "''s: ");
  for (size_t i = 0; i < ranks.size() && i < 16; i++) map += c10::str(i ? ", " : "", i, " is global ", ranks[i]);
  if (ranks.size() > 16) map += ", ...";
  rankMap_ = map + ")";
}

std::string Group::failureText(const char *name, uint64_t seq, ncclResult_t r, bool p2p) {
  std::string why;
  {
    std::lock_guard<std::mutex> g(commMutex_);
    ncclComm_t comm = p2p ? p2pComm_ : comm_;
    why = comm ? ncclGetLastError(comm) : "the group was aborted";
  }
  return c10::str("chorus: ", name, " (sequence number ", seq, ") on rank ", rank_, " of group '", name_, "' failed",
                  outcomeText(r), ": ", why, rankMap_);
}

void Group::logFlightRecorder(const char *why) {
  {
    std::lock_guard<std::mutex> g(commMutex_);
    if (flightDumped_) return;  // once: the work behind a timeout fails with it
    flightDumped_ = true;
  }
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  std::string text = c10::str(host, ":", getpid(), " [", rank_, "] chorus_torch ERROR flight recorder of group '",
                              name_, "' (", why, "), oldest first:\n", flight_.dump());
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

void Group::closeLocked(const char *why) {
  closed_ = true;
  flusherStop_ = true;
  flusherWake_.notify_all();
  std::string text = c10::str("chorus: group '", name_, "' was ", why, " before the operation was launched");
  for (Item &it : deferred_) it.work->fail(text);
  for (Item &it : coalesced_) it.work->fail(text);
  for (auto &items : backlog_)
    for (Item &it : items) it.work->fail(text);
  deferred_.clear();
  coalesced_.clear();
  backlog_.clear();
  coalescing_ = false;
}

std::pair<ncclComm_t, ncclComm_t> Group::takeComms() {
  std::lock_guard<std::mutex> g(commMutex_);
  std::pair<ncclComm_t, ncclComm_t> comms{comm_, p2pComm_};
  comm_ = p2pComm_ = nullptr;
  return comms;
}

void Group::finishTeardown() {
  if (flusher_.joinable()) flusher_.join();
  {
    CollectFinished collect;  // what finishes here goes to the completion threads
    for (auto &[key, lane] : lanes_)
      if (lane) chorusStreamDestroy(lane);
    if (p2pStream_) chorusStreamDestroy(p2pStream_);
    chorusStreamDestroy(stream_);
  }
  stream_ = p2pStream_ = nullptr;
  lanes_.clear();
  completions_.stop();
  std::lock_guard<std::mutex> g(mutex_);
  inFlight_.clear();
}

void Group::shutdown() {
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (tearingDown_) return;
    tearingDown_ = true;
    flushLocked();
  }
  drainBacklog();  // what was launched runs, as what is on the stream
  {
    std::lock_guard<std::mutex> g(mutex_);
    closeLocked("shut down");
  }
  // Everything issued finishes (or fails within the timeout; at once after a
  // failure, or when abort() takes the communicator meanwhile).
  if (flusher_.joinable()) flusher_.join();
  {
    CollectFinished collect;
    for (auto &[key, lane] : lanes_)
      if (lane) chorusStreamSynchronize(lane);
    if (p2pStream_) chorusStreamSynchronize(p2pStream_);
    chorusStreamSynchronize(stream_);
  }
  auto [comm, p2pComm] = takeComms();
  for (ncclComm_t c : {p2pComm, comm}) {  // the split-off one first
    if (!c) continue;
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(c, &state);
    if (state == ncclSuccess) ncclCommDestroy(c);
    else ncclCommAbort(c);  // a failed communicator leaves without waiting for its peers
  }
  finishTeardown();
}

void Group::abort() {
  bool owner;
  {
    std::lock_guard<std::mutex> g(mutex_);
    owner = !tearingDown_;
    tearingDown_ = true;
    if (!closed_) closeLocked("aborted");
  }
  // Running and queued operations fail at once (this also ends a shutdown()
  // that waits for them).
  auto [comm, p2pComm] = takeComms();
  if (p2pComm) ncclCommAbort(p2pComm);
  if (comm) ncclCommAbort(comm);
  if (owner) finishTeardown();
}

}  // namespace chorus_torch
