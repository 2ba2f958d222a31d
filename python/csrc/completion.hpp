// Where Futures are completed. A Future's callbacks (DDP's comm hooks, user
// .then()s) may issue and wait for later operations of the same group, so
// they never run inside the group's stream or under its lock: a work that
// finishes there is either collected by the thread that was waiting for it
// (Work.wait ran the stream up to it: no thread switch) or handed to the
// group's completion threads, of which there is always one free.
#pragma once
#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus_torch {

class WorkChorus;

class Completions {
 public:
  ~Completions();
  // A finished work whose future still has to be completed.
  void post(c10::intrusive_ptr<WorkChorus> w);
  // Completes what is posted, then ends the threads.
  void stop();

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<c10::intrusive_ptr<WorkChorus>> queue_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool stop_ = false;
};

// While one is alive on a thread, works that finish on that thread are
// collected; their futures are completed when it goes out of scope (once
// the thread has stopped running the stream).
class CollectFinished {
 public:
  CollectFinished();
  ~CollectFinished();
  CollectFinished(const CollectFinished &) = delete;
  CollectFinished &operator=(const CollectFinished &) = delete;
  // Takes w when a collector is active on this thread.
  static bool take(const c10::intrusive_ptr<WorkChorus> &w);

 private:
  std::vector<c10::intrusive_ptr<WorkChorus>> works_;
  CollectFinished *outer_;
};

}  // namespace chorus_torch
