#include "pyexit.hpp"

#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace chorus_torch {

namespace {
std::atomic<bool> exitingNow{false};
std::atomic<int> inSections{0};
}  // namespace

// Entered before the flag is read (both sequentially consistent): a section
// that read "not exiting" is counted by the time the exit could look.
PythonSection::PythonSection() {
  inSections.fetch_add(1);
  exiting_ = exitingNow.load();
}

PythonSection::~PythonSection() { inSections.fetch_sub(1); }

bool pythonExiting() { return exitingNow.load(); }

void pythonAtExit() {
  exitingNow.store(true);
  pybind11::gil_scoped_release nogil;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (inSections.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

}  // namespace chorus_torch
