// torch.distributed's Backend for chorus: each torch operation becomes
// chorus calls on the group's communicator (group.hpp launches them).
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <memory>

#include "convert.hpp"
#include "group.hpp"

namespace chorus_torch {

class ProcessGroupChorus : public c10d::Backend {
 public:
  // The creator torch calls for every group (default group, new_group,
  // split_group): from the parent's communicator where that can be done
  // (ncclCommSplit / ncclCommShrink), else a rendezvous through store.
  static c10::intrusive_ptr<ProcessGroupChorus> create(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                                      int size, std::chrono::milliseconds timeout,
                                                      const std::string &groupName,
                                                      const std::vector<int64_t> &globalRanks,
                                                      const c10::intrusive_ptr<c10d::Backend> &splitFrom);

  ProcessGroupChorus(std::shared_ptr<Group> group, c10::intrusive_ptr<Options> options);
  ~ProcessGroupChorus() override;

  const std::string getBackendName() const override { return "chorus"; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  uint64_t getSequenceNumberForGroup() override { return group_->seq(); }
  void setTimeout(std::chrono::milliseconds timeout) override;

  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor> &tensors,
      const c10d::AllreduceCoalescedOptions &opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
      const c10d::AllgatherOptions &opts = c10d::AllgatherOptions()) override;
  // Gloo's list form of coalesced all-gathers: outputLists[r][i] gets rank
  // r's inputs[i] (torch.distributed.all_gather_coalesced).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>> &outputLists, std::vector<at::Tensor> &inputs,
      const c10d::AllgatherOptions &opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
      const c10d::ReduceScatterOptions &opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor &output, at::Tensor &input,
      const c10d::ReduceScatterOptions &opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
      const c10d::ReduceScatterOptions &opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &outputSplitSizes,
                                               std::vector<int64_t> &inputSplitSizes,
                                               const c10d::AllToAllOptions &opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts = c10d::BarrierOptions()) override;

  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store> &store, const std::vector<int> &ranks,
                                          const c10::intrusive_ptr<Options> &opts) override;
  // A rank outside every new group still takes part in the parent's split
  // (torch calls this on it for new_group when the parent can be split).
  void performNocolorSplit();
  void shutdown() override;
  void abort() override;

  const std::shared_ptr<Group> &group() const { return group_; }

 private:
  c10::intrusive_ptr<c10d::Work> allgatherUneven(std::vector<at::Tensor> &outs, const at::Tensor &input);
  c10::intrusive_ptr<c10d::Work> reduceScatterUneven(const at::Tensor &output, std::vector<at::Tensor> &ins,
                                                     const Reduction &red);

  std::shared_ptr<Group> group_;
  c10::intrusive_ptr<Options> options_;
};

}  // namespace chorus_torch
