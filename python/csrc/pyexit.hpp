// The interpreter's exit and chorus's own threads. A thread that takes the
// GIL once Python is finalizing is ended by the interpreter on the spot; in
// a destructor (a work's tensors dropped by the stream's thread, their
// Python objects released) that aborts the process ("terminate called
// without an active exception"), as it did for a script that left async
// works unwaited and never called destroy_process_group. So the code of
// chorus's threads that may touch Python (dropping works and their
// tensors, completing futures, whose callbacks may be Python) runs inside a
// PythonSection; at exit (Python's atexit, registered when the backend is,
// at `import torch` or `import chorus_torch`: so it runs after the
// handlers a program registers later) the sections see exiting() and leak
// what they hold instead (works still run and complete: a collective
// issued by an earlier-registered handler still gets its result, and its
// future completes while Python is not yet finalizing), and the exit waits
// for the sections already under way (without the GIL, which they may
// need), 2 s at most: a callback that waits longer (for later work) can
// still meet the finalization.
#pragma once

#include <utility>

namespace chorus_torch {

// Whether the interpreter is exiting (pythonAtExit has run), and whether it
// is finalizing (past its atexit handlers: no thread may take the GIL).
bool pythonExiting();
bool pythonFinalizing();

// Empties held (a container of tensors or works); once the interpreter is
// exiting its contents are kept for good instead of dropped.
template <class T>
void letGo(T &held) {
  if (pythonExiting()) new T(std::move(held));  // leaked on purpose
  held.clear();
}

class PythonSection {
 public:
  PythonSection();
  ~PythonSection();
  PythonSection(const PythonSection &) = delete;
  PythonSection &operator=(const PythonSection &) = delete;
  // The interpreter is exiting: touch nothing of Python (leak it).
  bool exiting() const { return exiting_; }

 private:
  bool exiting_;
};

// Python's atexit handler (chorus_torch's register() registers it, through
// the module's _python_at_exit); called with the GIL.
void pythonAtExit();

}  // namespace chorus_torch
