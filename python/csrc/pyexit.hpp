// The interpreter's exit and chorus's own threads. A thread that takes the
// GIL once Python is finalizing is ended by the interpreter on the spot; in
// a destructor (a work's tensors dropped by the stream's thread, their
// Python objects released) that aborts the process ("terminate called
// without an active exception"), as it did for a script that left async
// works unwaited and never called destroy_process_group. So the code of
// chorus's threads that may touch Python (dropping works and their
// tensors, completing futures, whose callbacks may be Python) runs inside a
// PythonSection; at exit (Python's atexit, registered by the module) the
// sections see exiting() and leak what they hold instead, and the exit waits
// for the sections already under way (without the GIL, which they may
// need), 2 s at most.
#pragma once

namespace chorus_torch {

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

// Python's atexit handler (module.cpp registers it); called with the GIL.
void pythonAtExit();

}  // namespace chorus_torch
