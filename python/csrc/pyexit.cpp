#include "pyexit.hpp"

#include <pthread.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace chorus_torch {

namespace {
std::atomic<bool> exitingNow{false};
std::atomic<int> inSections{0};
// A child forked while a chorus thread was inside a section has no such
// thread: its count starts again.
const int forkRegistered = pthread_atfork(nullptr, nullptr, [] { inSections.store(0); });
}  // namespace

// Entered before the flag is read (both sequentially consistent): a section
// that read "not exiting" is counted by the time the exit could look.
PythonSection::PythonSection() {
  inSections.fetch_add(1);
  exiting_ = exitingNow.load();
}

PythonSection::~PythonSection() { inSections.fetch_sub(1); }

bool pythonExiting() { return exitingNow.load(); }

bool pythonFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

void pythonAtExit() {
  exitingNow.store(true);
  pybind11::gil_scoped_release nogil;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (inSections.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

}  // namespace chorus_torch
