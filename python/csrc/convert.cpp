#include "convert.hpp"

#include <c10/util/Exception.h>

#include <cstring>

namespace chorus_torch {

std::optional<ncclDataType_t> chorusType(at::ScalarType t) {
  switch (t) {
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kBool: return ncclUint8;
    case at::kInt: return ncclInt32;
    case at::kUInt32: return ncclUint32;
    case at::kLong: return ncclInt64;
    case at::kUInt64: return ncclUint64;
    case at::kHalf: return ncclFloat16;
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kBFloat16: return ncclBfloat16;
    case at::kFloat8_e4m3fn: return ncclFloat8e4m3;
    case at::kFloat8_e5m2: return ncclFloat8e5m2;
    default: return std::nullopt;
  }
}

size_t movedPerElement(at::ScalarType t) { return chorusType(t) ? 1 : c10::elementSize(t); }

Moved moved(const at::Tensor &t) {
  auto d = chorusType(t.scalar_type());
  return {d ? *d : ncclUint8, static_cast<size_t>(t.numel()) * movedPerElement(t.scalar_type())};
}

const char *reduceOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

Reduction Reduction::of(const c10d::ReduceOp &rop, const at::Tensor &t, const char *call) {
  Reduction red;
  auto kind = rop.op_;
  at::ScalarType st = t.scalar_type();
  red.complex = at::isComplexType(st);
  at::ScalarType real = red.complex ? c10::toRealValueType(st) : st;
  auto d = chorusType(real);
  TORCH_CHECK(d.has_value(), "chorus: ", call, ": cannot reduce ", st,
              " tensors (chorus reduces int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, "
              "float64, float8_e4m3fn, float8_e5m2, bool and complex of the float types)");
  red.dtype = *d;
  bool isBool = st == at::kBool;
  switch (kind) {
    // bool as torch's NCCL backend reduces it: sum is "any", product "all".
    case c10d::ReduceOp::SUM: red.op = isBool ? ncclMax : ncclSum; break;
    case c10d::ReduceOp::PRODUCT: red.op = isBool ? ncclMin : ncclProd; break;
    case c10d::ReduceOp::MIN: red.op = ncclMin; break;
    case c10d::ReduceOp::MAX: red.op = ncclMax; break;
    case c10d::ReduceOp::AVG: red.op = ncclAvg; break;
    case c10d::ReduceOp::PREMUL_SUM: red.premul = true; break;
    // bitwise as gloo's, on integer and bool tensors (bool's bytes are 0 or 1)
    case c10d::ReduceOp::BAND: red.bitwise = chorusBand; break;
    case c10d::ReduceOp::BOR: red.bitwise = chorusBor; break;
    case c10d::ReduceOp::BXOR: red.bitwise = chorusBxor; break;
    default:
      TORCH_CHECK(false, "chorus: ", call, ": ReduceOp.", reduceOpName(kind),
                  " is not supported (chorus reduces with SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM, BAND, BOR and BXOR)");
  }
  TORCH_CHECK(!red.bitwise || red.dtype < ncclFloat16, "chorus: ", call, ": ReduceOp.",
              reduceOpName(kind), " cannot reduce ", st, " tensors (bitwise reductions take integer and bool tensors)");
  TORCH_CHECK(!isBool || (kind != c10d::ReduceOp::AVG && kind != c10d::ReduceOp::PREMUL_SUM), "chorus: ", call,
              ": ReduceOp.", reduceOpName(kind), " cannot reduce bool tensors");
  TORCH_CHECK(!red.complex || kind == c10d::ReduceOp::SUM || kind == c10d::ReduceOp::AVG ||
                  kind == c10d::ReduceOp::PREMUL_SUM,
              "chorus: ", call, ": ReduceOp.", reduceOpName(kind), " cannot reduce complex tensors");
  if (!red.premul) return red;
  auto *sup = dynamic_cast<c10d::PreMulSumSupplement *>(rop.supplement_.get());
  TORCH_CHECK(sup != nullptr, "chorus: ", call, ": PREMUL_SUM without its factor");
  at::Tensor f;
  if (sup->tensor_factor.defined()) {
    TORCH_CHECK(sup->tensor_factor.numel() == 1, "chorus: ", call, ": the PREMUL_SUM factor must have one element, not ",
                sup->tensor_factor.numel());
    // Its real type is what multiplies (a complex tensor's too, part by
    // part): a complex factor would lose its imaginary part.
    TORCH_CHECK(!sup->tensor_factor.is_complex(), "chorus: ", call, ": the PREMUL_SUM factor is complex (",
                sup->tensor_factor.scalar_type(), "): it must be real");
    f = sup->tensor_factor.to(at::kCPU).reshape({1}).to(real);
  } else {
    f = at::full({1}, sup->double_factor, at::TensorOptions().dtype(real));
  }
  f = f.contiguous();
  std::memcpy(red.factor, f.data_ptr(), f.element_size());
  return red;
}

const char *resultName(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    case ncclTimeout: return "ncclTimeout";
    default: return "unknown ncclResult_t";
  }
}

std::string outcomeText(ncclResult_t r) {
  return r == ncclTimeout ? " with a timeout error (ncclTimeout)" : std::string(": ") + resultName(r);
}

}  // namespace chorus_torch
