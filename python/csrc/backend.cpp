#include "backend.hpp"

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <numeric>

#include "convert.hpp"
#include "work.hpp"

namespace chorus_torch {

namespace {

void checkTensor(const at::Tensor &t, const char *call) {
  TORCH_CHECK(t.defined(), "chorus: ", call, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "chorus: ", call, ": tensors must be on the CPU (chorus moves host memory), got one on ",
              t.device());
  TORCH_CHECK(t.layout() == at::kStrided, "chorus: ", call, ": only dense (strided) tensors are supported, got ",
              t.layout());
}

const at::Tensor &single(const std::vector<at::Tensor> &ts, const char *call) {
  TORCH_CHECK(ts.size() == 1, "chorus: ", call, ": expects one tensor per process, got ", ts.size());
  checkTensor(ts[0], call);
  return ts[0];
}

void checkRoot(int64_t root, int size, const char *call) {
  TORCH_CHECK(root >= 0 && root < size, "chorus: ", call, ": invalid root rank ", root, " (group of ", size, ")");
}

void checkPeer(int peer, int size, const char *call) {
  TORCH_CHECK(peer >= 0 && peer < size, "chorus: ", call, ": invalid peer rank ", peer, " (group of ", size, ")");
}

void checkLike(const at::Tensor &t, const at::Tensor &ref, const char *call, const char *what, const char *refName) {
  checkTensor(t, call);
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "chorus: ", call, ": ", what, " has dtype ", t.scalar_type(),
              " but the ", refName, " has ", ref.scalar_type());
  TORCH_CHECK(t.numel() == ref.numel(), "chorus: ", call, ": ", what, " has ", t.numel(), " elements but the ", refName,
              " has ", ref.numel());
}

// Every tensor of a list has ref's dtype (their sizes may differ).
void checkDtypes(const std::vector<at::Tensor> &ts, const at::Tensor &ref, const char *call, const char *what,
                 const char *refName) {
  for (const at::Tensor &t : ts)
    TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "chorus: ", call, ": ", what, " has dtype ", t.scalar_type(),
                " but the ", refName, " has ", ref.scalar_type());
}

// 1 when every tensor of a list has as many elements as ref.
bool sameSizes(const std::vector<at::Tensor> &ts, const at::Tensor &ref) {
  return std::all_of(ts.begin(), ts.end(), [&](const at::Tensor &t) { return t.numel() == ref.numel(); });
}

// Tensors as chorus reads and writes them: contiguous. An input that is not
// gets a contiguous buffer that the stream fills right before the operation
// runs (Launch::copyIn: earlier operations in flight may still write the
// input); an output that is not gets one copied into it once the operation
// is done.
at::Tensor contiguousLike(const at::Tensor &t) {
  return at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
}
// Always a staging copy made on the stream, contiguous or not (inBeside).
at::Tensor staged(Launch &l, const at::Tensor &t) {
  at::Tensor c = contiguousLike(t);
  l.keep.push_back(c);
  l.copyIn.emplace_back(c, t);
  return c;
}
at::Tensor in(Launch &l, const at::Tensor &t) { return t.is_contiguous() ? t : staged(l, t); }
// An input for an operation that writes its outputs as it reads its inputs
// (all-to-all): staged when it shares memory with any of them, not only
// its own peer's (a list whose outputs are the inputs rotated: the receive
// into one peer's output would overwrite another's input before it went).
at::Tensor inBeside(Launch &l, const at::Tensor &t, const std::vector<at::Tensor> &outputs) {
  for (const at::Tensor &o : outputs)
    if (o.is_alias_of(t)) return staged(l, t);
  return in(l, t);
}
// An output whose elements share memory (an expanded, stride-0 view) cannot
// take a result per element: refused before anything runs (torch's NCCL
// backend asks for non-overlapping, dense tensors).
void checkWritable(const Launch &l, const at::Tensor &t) {
  TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, "chorus: ", l.name,
              ": an output tensor has elements that share memory (an expanded or stride-0 view); pass one whose "
              "elements are distinct (.contiguous() or .clone())");
}
at::Tensor out(Launch &l, const at::Tensor &t) {
  checkWritable(l, t);
  if (t.is_contiguous()) return t;
  at::Tensor c = contiguousLike(t);
  l.keep.push_back(c);
  l.copyBack.emplace_back(t, c);
  return c;
}
at::Tensor inout(Launch &l, const at::Tensor &t) {
  checkWritable(l, t);
  if (t.is_contiguous()) return t;
  at::Tensor c = staged(l, t);
  l.copyBack.emplace_back(t, c);
  return c;
}
// A flat buffer of n blocks shaped like t.
at::Tensor flat(Launch &l, const at::Tensor &t, int n) {
  at::Tensor f = at::empty({static_cast<int64_t>(n) * t.numel()}, t.options().memory_format(at::MemoryFormat::Contiguous));
  l.keep.push_back(f);
  return f;
}
at::Tensor block(const at::Tensor &f, int64_t i, const at::Tensor &like) {
  return f.narrow(0, i * like.numel(), like.numel()).view(like.sizes());
}
// An AllGather's output for a list form: a flat buffer of one block per
// rank, copied into perRank[r] once the operation is done.
at::Tensor gathered(Launch &l, const std::vector<at::Tensor> &perRank, const at::Tensor &like) {
  at::Tensor all = flat(l, like, static_cast<int>(perRank.size()));
  for (size_t r = 0; r < perRank.size(); r++) {
    checkWritable(l, perRank[r]);
    l.copyBack.emplace_back(perRank[r], block(all, static_cast<int64_t>(r), perRank[r]));
  }
  return all;
}

Launch make(c10d::OpType type, const char *name, std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs) {
  Launch l;
  l.type = type;
  l.name = name;
  l.inputs = std::move(inputs);
  l.outputs = std::move(outputs);
  return l;
}

template <class Fn>
void withoutGil(Fn fn) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release nogil;
    fn();
  } else {
    fn();
  }
}

std::mutex worldMutex;
std::weak_ptr<Group> worldGroup;  // the default group's, for new_group's subgroups

c10::intrusive_ptr<c10d::Backend::Options> optionsFor(std::chrono::milliseconds timeout, const std::string &name,
                                                      const std::vector<uint64_t> &ranks) {
  auto o = c10::make_intrusive<c10d::Backend::Options>("chorus", timeout);
  o->group_name = name;
  o->global_ranks_in_group = ranks;
  return o;
}

}  // namespace

ProcessGroupChorus::ProcessGroupChorus(std::shared_ptr<Group> group, c10::intrusive_ptr<Options> options)
    : c10d::Backend(group->rank(), group->size()), group_(std::move(group)), options_(std::move(options)) {
  group_->setGlobalRanks(options_->global_ranks_in_group);
}

ProcessGroupChorus::~ProcessGroupChorus() {
  withoutGil([&] { group_->shutdown(); });
}

c10::intrusive_ptr<ProcessGroupChorus> ProcessGroupChorus::create(const c10::intrusive_ptr<c10d::Store> &store,
                                                                  int rank, int size, std::chrono::milliseconds timeout,
                                                                  const std::string &groupName,
                                                                  const std::vector<int64_t> &globalRanks,
                                                                  const c10::intrusive_ptr<c10d::Backend> &splitFrom) {
  std::vector<uint64_t> granks(globalRanks.begin(), globalRanks.end());
  if (splitFrom) {
    auto *parent = dynamic_cast<ProcessGroupChorus *>(splitFrom.get());
    TORCH_CHECK(parent != nullptr, "chorus: group '", groupName, "' would split from a ", splitFrom->getBackendName(),
                " group; chorus splits only chorus groups");
    std::vector<int> ranks(globalRanks.begin(), globalRanks.end());
    auto child = parent->split(store, ranks, optionsFor(timeout, groupName, granks));
    TORCH_CHECK(child, "chorus: group '", groupName, "': rank ", parent->getRank(), " is not one of its ranks");
    return c10::static_intrusive_pointer_cast<ProcessGroupChorus>(child);
  }
  std::shared_ptr<Group> group;
  bool isWorld = globalRanks.empty();
  if (!isWorld) {
    std::shared_ptr<Group> world;
    {
      std::lock_guard<std::mutex> g(worldMutex);
      world = worldGroup.lock();
    }
    bool ordered = std::is_sorted(globalRanks.begin(), globalRanks.end()) &&
                   std::adjacent_find(globalRanks.begin(), globalRanks.end()) == globalRanks.end();
    if (world && world->usable() && ordered && globalRanks.back() < world->size() &&
        static_cast<int>(globalRanks.size()) == size && globalRanks[rank] == world->rank()) {
      // The members alone make it from the default group's communicator.
      if (size == world->size()) {
        group = world->split(0, rank, timeout, groupName);
      } else {
        std::vector<int> excluded;
        for (int r = 0; r < world->size(); r++)
          if (!std::binary_search(globalRanks.begin(), globalRanks.end(), static_cast<int64_t>(r))) excluded.push_back(r);
        group = world->subset(excluded, timeout, groupName);
      }
    }
  }
  if (!group) group = Group::rendezvous(store, rank, size, timeout, groupName);
  if (isWorld) {
    std::lock_guard<std::mutex> g(worldMutex);
    worldGroup = group;
  }
  return c10::make_intrusive<ProcessGroupChorus>(std::move(group), optionsFor(timeout, groupName, granks));
}

void ProcessGroupChorus::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = timeout;
  group_->setTimeout(timeout);
}

// Ends the group's coalescing block when the call it guards throws
// (Group::abandonBlock); the first line of every operation torch calls.
class BlockGuard {
 public:
  explicit BlockGuard(Group &g) : g_(g), uncaught_(std::uncaught_exceptions()) {}
  ~BlockGuard() {
    if (std::uncaught_exceptions() > uncaught_) g_.abandonBlock();
  }

 private:
  Group &g_;
  int uncaught_;
};

void ProcessGroupChorus::startCoalescing() { group_->startCoalescing(); }

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::endCoalescing() { return group_->endCoalescing(); }

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor> &tensors,
                                                             const c10d::BroadcastOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "broadcast";
  const at::Tensor &t = single(tensors, call);
  checkRoot(opts.rootRank, size_, call);
  TORCH_CHECK(opts.rootTensor == 0, "chorus: broadcast: rootTensor must be 0, got ", opts.rootTensor);
  Launch l = make(c10d::OpType::BROADCAST, "Broadcast", tensors, tensors);
  at::Tensor b = inout(l, t);
  Moved m = moved(b);
  void *p = b.data_ptr();
  int root = static_cast<int>(opts.rootRank);
  l.calls = [=](ncclComm_t c, cudaStream_t s) { return ncclBroadcast(p, p, m.count, m.dtype, root, c, s); };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor> &tensors,
                                                             const c10d::AllreduceOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "all_reduce";
  const at::Tensor &t = single(tensors, call);
  Reduction red = Reduction::of(opts.reduceOp, t, call);
  Launch l = make(c10d::OpType::ALLREDUCE, "AllReduce", tensors, tensors);
  at::Tensor b = inout(l, t);
  void *p = b.data_ptr();
  size_t n = red.count(b);
  l.calls = [=](ncclComm_t c, cudaStream_t s) {
    return red.run(c, [&](ncclRedOp_t op) { return ncclAllReduce(p, p, n, red.dtype, op, c, s); });
  };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                                                       const c10d::AllreduceCoalescedOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "all_reduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "chorus: ", call, ": no tensors");
  Launch l = make(c10d::OpType::ALLREDUCE_COALESCED, "AllReduce", tensors, tensors);
  struct Part {
    void *p;
    size_t n;
    Reduction red;
  };
  std::vector<Part> parts;
  for (const at::Tensor &t : tensors) {
    checkTensor(t, call);
    Reduction red = Reduction::of(opts.reduceOp, t, call);
    at::Tensor b = inout(l, t);
    parts.push_back({b.data_ptr(), red.count(b), red});
  }
  l.calls = [parts](ncclComm_t c, cudaStream_t s) {
    ncclResult_t first = ncclSuccess;
    for (const Part &x : parts) {
      ncclResult_t r = x.red.run(c, [&](ncclRedOp_t op) { return ncclAllReduce(x.p, x.p, x.n, x.red.dtype, op, c, s); });
      if (first == ncclSuccess) first = r;
    }
    return first;
  };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor> &tensors,
                                                          const c10d::ReduceOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "reduce";
  const at::Tensor &t = single(tensors, call);
  checkRoot(opts.rootRank, size_, call);
  TORCH_CHECK(opts.rootTensor == 0, "chorus: reduce: rootTensor must be 0, got ", opts.rootTensor);
  Reduction red = Reduction::of(opts.reduceOp, t, call);
  Launch l = make(c10d::OpType::REDUCE, "Reduce", tensors, tensors);
  at::Tensor b = inout(l, t);
  void *p = b.data_ptr();
  size_t n = red.count(b);
  int root = static_cast<int>(opts.rootRank);
  l.calls = [=](ncclComm_t c, cudaStream_t s) {
    return red.run(c, [&](ncclRedOp_t op) { return ncclReduce(p, p, n, red.dtype, op, root, c, s); });
  };
  return group_->launch(std::move(l));
}

// The list forms with blocks of different sizes, as torch's NCCL backend
// runs them: one group of a Broadcast from each rank (all_gather: output i
// gets rank i's input) or of a Reduce to each rank (reduce_scatter: rank
// i's output gets the sum of every rank's input i). Each rank checks its
// own block; a block another rank sizes differently is a mismatch there.
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgatherUneven(std::vector<at::Tensor> &outs,
                                                                   const at::Tensor &input) {
  const char *call = "all_gather";
  checkLike(outs[rank_], input, call, "this rank's output tensor", "input");
  checkDtypes(outs, input, call, "an output tensor", "input");
  std::vector<at::Tensor> inputs{input};
  Launch l = make(c10d::OpType::ALLGATHER, "AllGather", inputs, outs);
  std::vector<const void *> sp(size_);
  std::vector<void *> rp(size_);
  std::vector<size_t> n(size_);
  ncclDataType_t dtype = moved(input).dtype;
  // The broadcasts run together: an input that is another rank's output
  // (not its own, the in-place layout) is staged before they write it.
  std::vector<at::Tensor> others;
  for (int i = 0; i < size_; i++)
    if (i != rank_) others.push_back(outs[i]);
  at::Tensor src = inBeside(l, input, others);
  for (int i = 0; i < size_; i++) {
    at::Tensor dst = out(l, outs[i]);
    rp[i] = dst.data_ptr();
    n[i] = moved(dst).count;
    sp[i] = i == rank_ ? src.data_ptr() : rp[i];
  }
  l.calls = [=](ncclComm_t c, cudaStream_t s) {
    ncclResult_t first = ncclSuccess;
    for (int i = 0; i < static_cast<int>(n.size()); i++) {
      ncclResult_t r = ncclBroadcast(sp[i], rp[i], n[i], dtype, i, c, s);
      if (first == ncclSuccess) first = r;
    }
    return first;
  };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduceScatterUneven(const at::Tensor &output,
                                                                       std::vector<at::Tensor> &ins,
                                                                       const Reduction &red) {
  const char *call = "reduce_scatter";
  checkLike(ins[rank_], output, call, "this rank's input tensor", "output");
  checkDtypes(ins, output, call, "an input tensor", "output");
  std::vector<at::Tensor> outputs{output};
  Launch l = make(c10d::OpType::REDUCE_SCATTER, "ReduceScatter", ins, outputs);
  std::vector<const void *> sp(size_);
  std::vector<size_t> n(size_);
  for (int i = 0; i < size_; i++) {
    // The reduces run together: another rank's input that is this rank's
    // output is staged before the reduce to this rank writes it (its own
    // is the in-place layout).
    at::Tensor src = i == rank_ ? in(l, ins[i]) : inBeside(l, ins[i], {output});
    sp[i] = src.data_ptr();
    n[i] = red.count(src);
  }
  void *rp = out(l, output).data_ptr();
  int me = rank_;
  l.calls = [=](ncclComm_t c, cudaStream_t s) {
    ncclResult_t first = ncclSuccess;
    for (int i = 0; i < static_cast<int>(n.size()); i++) {
      ncclResult_t r = red.run(c, [&](ncclRedOp_t op) {
        return ncclReduce(sp[i], i == me ? rp : nullptr, n[i], red.dtype, op, i, c, s);
      });
      if (first == ncclSuccess) first = r;
    }
    return first;
  };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                                             std::vector<at::Tensor> &inputs,
                                                             const c10d::AllgatherOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "all_gather";
  const at::Tensor &t = single(inputs, call);
  TORCH_CHECK(outputs.size() == 1, "chorus: all_gather: expects one output list per process, got ", outputs.size());
  std::vector<at::Tensor> &outs = outputs[0];
  TORCH_CHECK(static_cast<int>(outs.size()) == size_, "chorus: all_gather: the output list must have ", size_,
              " tensors (the group's size), got ", outs.size());
  for (const at::Tensor &o : outs) checkTensor(o, call);
  if (!sameSizes(outs, t)) return allgatherUneven(outs, t);
  for (const at::Tensor &o : outs) checkLike(o, t, call, "an output tensor", "input");
  Launch l = make(c10d::OpType::ALLGATHER, "AllGather", inputs, outs);
  at::Tensor src = in(l, t), all = gathered(l, outs, t);
  Moved m = moved(src);
  const void *sp = src.data_ptr();
  void *rp = all.data_ptr();
  l.calls = [=](ncclComm_t c, cudaStream_t s) { return ncclAllGather(sp, rp, m.count, m.dtype, c, s); };
  return group_->launch(std::move(l));
}

namespace {
// Several AllGathers in one launch (one chorus group): each part gathers
// every rank's count elements at sp into rp.
struct GatherPart {
  const void *sp;
  void *rp;
  Moved m;
};
std::function<ncclResult_t(ncclComm_t, cudaStream_t)> gatherAll(std::vector<GatherPart> parts) {
  return [parts = std::move(parts)](ncclComm_t c, cudaStream_t s) {
    ncclResult_t first = ncclSuccess;
    for (const GatherPart &x : parts) {
      ncclResult_t r = ncclAllGather(x.sp, x.rp, x.m.count, x.m.dtype, c, s);
      if (first == ncclSuccess) first = r;
    }
    return first;
  };
}

// One _allgather_base / _reduce_scatter_base: the big side has size blocks of the small side.
void checkBlocks(const at::Tensor &big, const at::Tensor &small, int size, const char *call, const char *bigName) {
  checkTensor(big, call);
  checkTensor(small, call);
  TORCH_CHECK(big.scalar_type() == small.scalar_type(), "chorus: ", call, ": input and output dtypes differ (",
              big.scalar_type(), " vs ", small.scalar_type(), ")");
  TORCH_CHECK(big.numel() == small.numel() * size, "chorus: ", call, ": the ", bigName, " tensor must have ", size,
              " x ", small.numel(), " elements (the group's size times the other tensor's), got ", big.numel());
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(at::Tensor &output, at::Tensor &input,
                                                                   const c10d::AllgatherOptions &opts) {
  BlockGuard guard(*group_);
  std::vector<at::Tensor> outs{output}, ins{input};
  return allgather_into_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                                                   std::vector<at::Tensor> &inputs,
                                                                                   const c10d::AllgatherOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "all_gather_into_tensor";
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(), "chorus: ", call, ": ", inputs.size(),
              " inputs but ", outputs.size(), " outputs");
  Launch l = make(inputs.size() > 1 ? c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED : c10d::OpType::_ALLGATHER_BASE,
                  "AllGather", inputs, outputs);
  std::vector<GatherPart> parts;
  for (size_t i = 0; i < inputs.size(); i++) {
    checkBlocks(outputs[i], inputs[i], size_, call, "output");
    at::Tensor src = in(l, inputs[i]), dst = out(l, outputs[i]);
    parts.push_back({src.data_ptr(), dst.data_ptr(), moved(src)});
  }
  l.calls = gatherAll(std::move(parts));
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(
    std::vector<std::vector<at::Tensor>> &outputLists, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "all_gather_coalesced";
  TORCH_CHECK(!inputs.empty(), "chorus: ", call, ": no input tensors");
  TORCH_CHECK(static_cast<int>(outputLists.size()) == size_, "chorus: ", call, ": the output must have ", size_,
              " lists (one per rank of the group), got ", outputLists.size());
  std::vector<at::Tensor> outs;
  for (const std::vector<at::Tensor> &list : outputLists) {
    TORCH_CHECK(list.size() == inputs.size(), "chorus: ", call, ": each output list must have ", inputs.size(),
                " tensors (one per input), got ", list.size());
    outs.insert(outs.end(), list.begin(), list.end());
  }
  Launch l = make(c10d::OpType::ALLGATHER_COALESCED, "AllGather", inputs, outs);
  std::vector<GatherPart> parts;
  for (size_t i = 0; i < inputs.size(); i++) {
    checkTensor(inputs[i], call);
    std::vector<at::Tensor> perRank;
    for (const std::vector<at::Tensor> &list : outputLists) {
      checkLike(list[i], inputs[i], call, "an output tensor", "input");
      perRank.push_back(list[i]);
    }
    at::Tensor src = in(l, inputs[i]), all = gathered(l, perRank, inputs[i]);
    parts.push_back({src.data_ptr(), all.data_ptr(), moved(src)});
  }
  l.calls = gatherAll(std::move(parts));
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(std::vector<std::vector<at::Tensor>> &outputs,
                                                          std::vector<at::Tensor> &inputs,
                                                          const c10d::GatherOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "gather";
  const at::Tensor &t = single(inputs, call);
  checkRoot(opts.rootRank, size_, call);
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, "chorus: gather: the root expects one output list, got ", outputs.size());
    outs = outputs[0];
    TORCH_CHECK(static_cast<int>(outs.size()) == size_, "chorus: gather: the root's output list must have ", size_,
                " tensors (the group's size), got ", outs.size());
    for (const at::Tensor &o : outs) checkLike(o, t, call, "an output tensor", "input");
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "chorus: gather: only the root (rank ", root, ") passes output tensors");
  }
  Launch l = make(c10d::OpType::GATHER, "Gather", inputs, outs);
  at::Tensor src = in(l, t);
  void *rp = nullptr;
  if (rank_ == root) {
    at::Tensor all = flat(l, t, size_);
    for (int i = 0; i < size_; i++) {
      checkWritable(l, outs[i]);
      l.copyBack.emplace_back(outs[i], block(all, i, outs[i]));
    }
    rp = all.data_ptr();
  }
  Moved m = moved(src);
  const void *sp = src.data_ptr();
  l.calls = [=](ncclComm_t c, cudaStream_t s) { return ncclGather(sp, rp, m.count, m.dtype, root, c, s); };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(std::vector<at::Tensor> &outputs,
                                                           std::vector<std::vector<at::Tensor>> &inputs,
                                                           const c10d::ScatterOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "scatter";
  const at::Tensor &t = single(outputs, call);
  checkRoot(opts.rootRank, size_, call);
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "chorus: scatter: the root expects one input list, got ", inputs.size());
    ins = inputs[0];
    TORCH_CHECK(static_cast<int>(ins.size()) == size_, "chorus: scatter: the root's input list must have ", size_,
                " tensors (the group's size), got ", ins.size());
    for (const at::Tensor &i : ins) checkLike(i, t, call, "an input tensor", "output");
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "chorus: scatter: only the root (rank ", root, ") passes input tensors");
  }
  Launch l = make(c10d::OpType::SCATTER, "Scatter", ins, outputs);
  const void *sp = nullptr;
  if (rank_ == root) {
    at::Tensor all = flat(l, t, size_);
    for (int i = 0; i < size_; i++) l.copyIn.emplace_back(block(all, i, ins[i]), ins[i]);
    sp = all.data_ptr();
  }
  at::Tensor dst = out(l, t);
  Moved m = moved(dst);
  void *rp = dst.data_ptr();
  l.calls = [=](ncclComm_t c, cudaStream_t s) { return ncclScatter(sp, rp, m.count, m.dtype, root, c, s); };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(std::vector<at::Tensor> &outputs,
                                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                                  const c10d::ReduceScatterOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "reduce_scatter";
  const at::Tensor &t = single(outputs, call);
  TORCH_CHECK(inputs.size() == 1, "chorus: reduce_scatter: expects one input list per process, got ", inputs.size());
  std::vector<at::Tensor> &ins = inputs[0];
  TORCH_CHECK(static_cast<int>(ins.size()) == size_, "chorus: reduce_scatter: the input list must have ", size_,
              " tensors (the group's size), got ", ins.size());
  for (const at::Tensor &i : ins) checkTensor(i, call);
  Reduction red = Reduction::of(opts.reduceOp, t, call);
  if (!sameSizes(ins, t)) return reduceScatterUneven(t, ins, red);
  for (const at::Tensor &i : ins) checkLike(i, t, call, "an input tensor", "output");
  Launch l = make(c10d::OpType::REDUCE_SCATTER, "ReduceScatter", ins, outputs);
  at::Tensor all = flat(l, t, size_);
  for (int i = 0; i < size_; i++) l.copyIn.emplace_back(block(all, i, ins[i]), ins[i]);
  at::Tensor dst = out(l, t);
  const void *sp = all.data_ptr();
  void *rp = dst.data_ptr();
  size_t n = red.count(dst);
  l.calls = [=](ncclComm_t c, cudaStream_t s) {
    return red.run(c, [&](ncclRedOp_t op) { return ncclReduceScatter(sp, rp, n, red.dtype, op, c, s); });
  };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                                        const c10d::ReduceScatterOptions &opts) {
  BlockGuard guard(*group_);
  std::vector<at::Tensor> outs{output}, ins{input};
  return reduce_scatter_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs, const c10d::ReduceScatterOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "reduce_scatter_tensor";
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(), "chorus: ", call, ": ", inputs.size(),
              " inputs but ", outputs.size(), " outputs");
  Launch l = make(inputs.size() > 1 ? c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED : c10d::OpType::_REDUCE_SCATTER_BASE,
                  "ReduceScatter", inputs, outputs);
  struct Part {
    const void *sp;
    void *rp;
    size_t n;
    Reduction red;
  };
  std::vector<Part> parts;
  for (size_t i = 0; i < inputs.size(); i++) {
    checkBlocks(inputs[i], outputs[i], size_, call, "input");
    Reduction red = Reduction::of(opts.reduceOp, outputs[i], call);
    at::Tensor src = in(l, inputs[i]), dst = out(l, outputs[i]);
    parts.push_back({src.data_ptr(), dst.data_ptr(), red.count(dst), red});
  }
  l.calls = [parts](ncclComm_t c, cudaStream_t s) {
    ncclResult_t first = ncclSuccess;
    for (const Part &x : parts) {
      ncclResult_t r =
          x.red.run(c, [&](ncclRedOp_t op) { return ncclReduceScatter(x.sp, x.rp, x.n, x.red.dtype, op, c, s); });
      if (first == ncclSuccess) first = r;
    }
    return first;
  };
  return group_->launch(std::move(l));
}

namespace {
// Sends and receives as one chorus group: (pointer, count) per peer.
struct Exchange {
  std::vector<const void *> sp;
  std::vector<size_t> sn;
  std::vector<void *> rp;
  std::vector<size_t> rn;
  ncclDataType_t dtype;
  ncclResult_t operator()(ncclComm_t c, cudaStream_t s) const {
    ncclResult_t first = ncclSuccess;
    for (size_t p = 0; p < sp.size(); p++) {
      ncclResult_t a = ncclSend(sp[p], sn[p], dtype, static_cast<int>(p), c, s);
      ncclResult_t b = ncclRecv(rp[p], rn[p], dtype, static_cast<int>(p), c, s);
      if (first == ncclSuccess) first = a != ncclSuccess ? a : b;
    }
    return first;
  }
};

std::vector<int64_t> checkSplits(std::vector<int64_t> splits, const at::Tensor &t, int size, const char *call,
                                 const char *which) {
  if (splits.empty()) {
    TORCH_CHECK(t.dim() > 0 && t.size(0) % size == 0, "chorus: ", call, ": the ", which,
                " tensor's first dimension (", t.dim() ? t.size(0) : 0, ") must divide by the group's size ", size,
                " when no split sizes are given");
    return std::vector<int64_t>(size, t.size(0) / size);
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "chorus: ", call, ": ", which, " split sizes must have ", size,
              " entries (the group's size), got ", splits.size());
  int64_t sum = 0;
  for (int64_t x : splits) {
    TORCH_CHECK(x >= 0, "chorus: ", call, ": negative ", which, " split size ", x);
    sum += x;
  }
  TORCH_CHECK(t.dim() > 0 && sum == t.size(0), "chorus: ", call, ": ", which, " split sizes add up to ", sum,
              " but the tensor's first dimension is ", t.dim() ? t.size(0) : 0);
  return splits;
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(at::Tensor &output, at::Tensor &input,
                                                                 std::vector<int64_t> &outputSplitSizes,
                                                                 std::vector<int64_t> &inputSplitSizes,
                                                                 const c10d::AllToAllOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "all_to_all_single";
  checkTensor(output, call);
  checkTensor(input, call);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: ", call, ": input and output dtypes differ (",
              input.scalar_type(), " vs ", output.scalar_type(), ")");
  Launch l = make(c10d::OpType::ALLTOALL_BASE, "AlltoAll", {input}, {output});
  at::Tensor src = inBeside(l, input, {output});
  at::Tensor dst = out(l, output);
  if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
    TORCH_CHECK(input.numel() % size_ == 0 && output.numel() == input.numel(), "chorus: ", call,
                ": without split sizes input and output must have the same number of elements, a multiple of the "
                "group's size ",
                size_, " (got ", input.numel(), " and ", output.numel(), ")");
    // torch splits both along dim 0 (gloo's and NCCL's checkSplitSizes):
    // rows that do not divide by the group's size would be cut in the middle
    for (const at::Tensor *t : {&input, &output})
      TORCH_CHECK(t->dim() == 0 || t->size(0) % size_ == 0, "chorus: ", call, ": ", t == &input ? "input" : "output",
                  " tensor's dim 0 (", t->size(0), ") does not divide equally across group size ", size_);
    Moved m = moved(src);
    size_t n = m.count / size_;
    const void *sp = src.data_ptr();
    void *rp = dst.data_ptr();
    l.calls = [=](ncclComm_t c, cudaStream_t s) { return ncclAlltoAll(sp, rp, n, m.dtype, c, s); };
    return group_->launch(std::move(l));
  }
  std::vector<int64_t> ins = checkSplits(inputSplitSizes, input, size_, call, "input");
  std::vector<int64_t> outs = checkSplits(outputSplitSizes, output, size_, call, "output");
  int64_t inRow = input.size(0) ? input.numel() / input.size(0) : 0;
  int64_t outRow = output.size(0) ? output.numel() / output.size(0) : 0;
  TORCH_CHECK(input.size(0) == 0 || output.size(0) == 0 || inRow == outRow, "chorus: ", call,
              ": input rows have ", inRow, " elements but output rows ", outRow);
  size_t scale = movedPerElement(input.scalar_type());
  Exchange x;
  x.dtype = moved(src).dtype;
  const char *sbase = static_cast<const char *>(src.data_ptr());
  char *rbase = static_cast<char *>(dst.data_ptr());
  size_t esz = input.element_size();
  int64_t so = 0, ro = 0;
  for (int p = 0; p < size_; p++) {
    x.sp.push_back(sbase + so * inRow * esz);
    x.sn.push_back(static_cast<size_t>(ins[p] * inRow) * scale);
    x.rp.push_back(rbase + ro * outRow * esz);
    x.rn.push_back(static_cast<size_t>(outs[p] * outRow) * scale);
    so += ins[p];
    ro += outs[p];
  }
  l.calls = x;
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor> &outputs,
                                                            std::vector<at::Tensor> &inputs,
                                                            const c10d::AllToAllOptions &opts) {
  BlockGuard guard(*group_);
  const char *call = "all_to_all";
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_, "chorus: ", call,
              ": expects ", size_, " input and output tensors (the group's size), got ", inputs.size(), " and ",
              outputs.size());
  Launch l = make(c10d::OpType::ALLTOALL, "AlltoAll", inputs, outputs);
  Exchange x;
  for (int p = 0; p < size_; p++) {
    checkTensor(inputs[p], call);
    checkTensor(outputs[p], call);
    TORCH_CHECK(inputs[p].scalar_type() == inputs[0].scalar_type() && outputs[p].scalar_type() == inputs[0].scalar_type(),
                "chorus: ", call, ": all tensors must have one dtype (", inputs[0].scalar_type(), ")");
    at::Tensor src = inBeside(l, inputs[p], outputs);
    at::Tensor dst = out(l, outputs[p]);
    Moved ms = moved(src), mr = moved(dst);
    x.dtype = ms.dtype;
    x.sp.push_back(src.data_ptr());
    x.sn.push_back(ms.count);
    x.rp.push_back(dst.data_ptr());
    x.rn.push_back(mr.count);
  }
  l.calls = x;
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor> &tensors, int dstRank, int tag) {
  BlockGuard guard(*group_);
  const char *call = "send";
  const at::Tensor &t = single(tensors, call);
  checkPeer(dstRank, size_, call);
  Launch l = make(c10d::OpType::SEND, "Send", tensors, tensors);
  l.p2p = true;
  l.peer = dstRank;
  at::Tensor src = in(l, t);
  Moved m = moved(src);
  const void *p = src.data_ptr();
  l.calls = [=](ncclComm_t c, cudaStream_t s) { return chorusSendTag(p, m.count, m.dtype, dstRank, tag, c, s); };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor> &tensors, int srcRank, int tag) {
  BlockGuard guard(*group_);
  const char *call = "recv";
  const at::Tensor &t = single(tensors, call);
  checkPeer(srcRank, size_, call);
  Launch l = make(c10d::OpType::RECV, "Recv", {}, tensors);
  l.p2p = true;
  l.peer = srcRank;
  at::Tensor dst = out(l, t);
  Moved m = moved(dst);
  void *p = dst.data_ptr();
  l.calls = [=](ncclComm_t c, cudaStream_t s) { return chorusRecvTag(p, m.count, m.dtype, srcRank, tag, c, s); };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor> &tensors, int tag) {
  BlockGuard guard(*group_);
  TORCH_CHECK(false,
              "chorus: recv from any source is not supported (as with NCCL, a receive names its source: pass src)");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions &opts) {
  BlockGuard guard(*group_);
  // An allreduce of one byte, behind every collective issued before it
  // (point-to-point operations run on a communicator of their own, as with NCCL).
  at::Tensor one = at::zeros({1}, at::TensorOptions().dtype(at::kByte));
  Launch l = make(c10d::OpType::BARRIER, "Barrier", {}, {});
  l.keep.push_back(one);
  void *p = one.data_ptr();
  l.calls = [=](ncclComm_t c, cudaStream_t s) { return ncclAllReduce(p, p, 1, ncclUint8, ncclSum, c, s); };
  return group_->launch(std::move(l));
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupChorus::split(const c10::intrusive_ptr<c10d::Store> &store,
                                                            const std::vector<int> &ranks,
                                                            const c10::intrusive_ptr<Options> &opts) {
  auto me = std::find(ranks.begin(), ranks.end(), rank_);
  // The color is a hash of the sorted ranks (as torch's NCCL backend makes
  // it), so that groups made at once from one parent split apart even when
  // they overlap (use_local_synchronization); a collision is caught below.
  std::vector<int> sorted(ranks);
  std::sort(sorted.begin(), sorted.end());
  uint32_t hash = 2166136261u;  // FNV-1a
  for (int r : sorted)
    for (int b = 0; b < 4; b++) hash = (hash ^ ((static_cast<uint32_t>(r) >> (8 * b)) & 0xff)) * 16777619u;
  int color = me == ranks.end() ? -1 : static_cast<int>(hash & 0x7fffffff);
  int key = static_cast<int>(me - ranks.begin());
  std::chrono::milliseconds timeout = opts ? opts->timeout : options_->timeout;
  std::string name = opts && !opts->group_name.empty() ? opts->group_name : c10::str(options_->group_name, ":split");
  std::shared_ptr<Group> child;
  withoutGil([&] { child = group_->split(color, key, timeout, name); });
  if (!child) return nullptr;
  if (child->size() != static_cast<int>(ranks.size())) {
    int got = child->size();
    withoutGil([&] { child->shutdown(); });
    C10_THROW_ERROR(DistBackendError,
                    c10::str("chorus: split of group '", options_->group_name, "' into '", name, "' made a group of ",
                             got, " ranks where ", ranks.size(),
                             " were given: the ranks given did not all take part in this split (groups that overlap, "
                             "made at once with use_local_synchronization?)"));
  }
  std::vector<uint64_t> granks;
  for (int r : ranks) granks.push_back(r < static_cast<int>(options_->global_ranks_in_group.size())
                                           ? options_->global_ranks_in_group[r]
                                           : static_cast<uint64_t>(r));
  return c10::make_intrusive<ProcessGroupChorus>(std::move(child), optionsFor(timeout, name, granks));
}

void ProcessGroupChorus::performNocolorSplit() {
  withoutGil([&] { group_->split(-1, 0, options_->timeout, ""); });
}

void ProcessGroupChorus::shutdown() {
  withoutGil([&] { group_->shutdown(); });
}

void ProcessGroupChorus::abort() {
  withoutGil([&] { group_->abort(); });
}

}  // namespace chorus_torch
