// The Python module chorus_torch._C: the backend class and the creator
// torch.distributed calls for each process group.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/utils/pybind.h>

#include "backend.hpp"
#include "pyexit.hpp"

namespace py = pybind11;
using chorus_torch::ProcessGroupChorus;

PYBIND11_MODULE(_C, m) {
  m.doc() = "chorus as a torch.distributed backend";
  py::module::import("torch.distributed");  // c10d's Store and Backend types first
  py::class_<ProcessGroupChorus, c10d::Backend, c10::intrusive_ptr<ProcessGroupChorus>>(m, "ProcessGroupChorus")
      .def(
          "perform_nocolor_split", [](ProcessGroupChorus &b, py::object) { b.performNocolorSplit(); },
          py::arg("device") = py::none())
      .def("_origin", [](ProcessGroupChorus &b) { return std::string(b.group()->origin()); })
      .def("_flight_recorder", [](ProcessGroupChorus &b) {
        auto now = std::chrono::steady_clock::now();
        py::list out;
        for (const chorus_torch::FlightEntry &e : b.group()->flight().snapshot()) {
          py::dict d;
          d["seq"] = e.seq;
          d["op"] = e.op;
          d["input_sizes"] = e.inputSizes;
          d["output_sizes"] = e.outputSizes;
          d["dtype"] = e.dtype;
          d["state"] = e.state;
          d["issued_ms_ago"] = std::chrono::duration<double, std::milli>(now - e.issued).count();
          out.append(d);
        }
        return out;
      });
  m.def("_python_at_exit", &chorus_torch::pythonAtExit);
  m.def(
      "_create_backend",
      [](const c10::intrusive_ptr<c10d::Store> &store, int rank, int size, std::chrono::duration<double> timeout,
         const std::string &groupName, const std::vector<int64_t> &globalRanks, py::object splitFrom) {
        c10::intrusive_ptr<c10d::Backend> parent;
        if (!splitFrom.is_none()) parent = splitFrom.cast<c10::intrusive_ptr<c10d::Backend>>();
        py::gil_scoped_release nogil;
        return ProcessGroupChorus::create(store, rank, size,
                                          std::chrono::duration_cast<std::chrono::milliseconds>(timeout), groupName,
                                          globalRanks, parent);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("group_name"),
      py::arg("global_ranks"), py::arg("split_from") = py::none());
}
