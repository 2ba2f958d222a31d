// What torch calls things and what chorus calls them: datatypes, reductions,
// results. Every refusal is a c10::Error whose text says what chorus
// supports instead.
#pragma once
#include <chorus.h>
#include <nccl.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>

namespace chorus_torch {

// chorus's datatype for a torch dtype, if it has one (bool travels as uint8).
std::optional<ncclDataType_t> chorusType(at::ScalarType t);

// How a tensor's elements travel when nothing is reduced: in chorus's own
// datatype where it has one (so that mismatch detection compares the
// datatype), else as bytes (int16, complex, ...).
struct Moved {
  ncclDataType_t dtype;
  size_t count;
};
Moved moved(const at::Tensor &t);
// chorus elements per torch element of type t when moved (1, or its size in bytes).
size_t movedPerElement(at::ScalarType t);

// A reduction as chorus runs it on a tensor: the operator and datatype,
// checked when the torch call is made. PREMUL_SUM's factor is read then and
// kept; its chorus operator, like BAND's, BOR's and BXOR's (chorus's bitwise
// operators, as gloo's), is created on the communicator, inside the chorus
// group, only for the call that uses it (run) and destroyed right after.
struct Reduction {
  ncclRedOp_t op = ncclSum;
  ncclDataType_t dtype = ncclFloat;
  bool premul = false;
  std::optional<chorusBitwiseOp_t> bitwise;
  bool complex = false;  // complex tensors reduce as pairs of reals
  alignas(8) unsigned char factor[8] = {};

  static Reduction of(const c10d::ReduceOp &op, const at::Tensor &t, const char *call);
  // Elements as chorus counts them.
  size_t count(const at::Tensor &t) const { return static_cast<size_t>(t.numel()) * (complex ? 2 : 1); }
  // fn(op) with the operator to pass to the chorus call.
  template <class Fn>
  ncclResult_t run(ncclComm_t comm, Fn fn) const {
    if (!premul && !bitwise) return fn(op);
    ncclRedOp_t made;
    ncclResult_t r =
        bitwise ? chorusRedOpCreateBitwise(&made, *bitwise, dtype, comm)
                : ncclRedOpCreatePreMulSum(&made, const_cast<unsigned char *>(factor), dtype, ncclScalarHostImmediate, comm);
    if (r != ncclSuccess) return r;
    r = fn(made);
    ncclRedOpDestroy(made, comm);  // the call has lowered it already
    return r;
  }
};

const char *resultName(ncclResult_t r);
// How a failed call ended, to follow "failed" or "was refused": ": ncclX", or
// for a timeout " with a timeout error (ncclTimeout)", in the words scripts
// and torch's own tests look for (gloo's "Timed out", NCCL's "timeout").
std::string outcomeText(ncclResult_t r);
const char *reduceOpName(c10d::ReduceOp::RedOpType op);

}  // namespace chorus_torch
