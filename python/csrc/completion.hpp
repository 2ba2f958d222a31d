// Where Futures are completed. A Future's callbacks (DDP's comm hooks, user
// .then()s) may issue and wait for later operations of the same group, so
// they never run inside the group's stream or under its lock: a work that
// finishes there is either collected by the thread that was waiting for it
// (Work.wait ran the stream up to it: no thread switch) or handed to the
// group's completion threads, of which there is always one free.
#pragma once
#include <ATen/core/ivalue.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus_torch {

class WorkChorus;

class Completions {
 public:
  Completions();
  ~Completions();
  // A finished work whose future still has to be completed.
  void post(c10::intrusive_ptr<WorkChorus> w);
  // Completes what is posted, then ends the threads.
  void stop();

 private:
  // Shared with the threads: one stopped from its own callback (which then
  // cannot be joined) still finds it after the group is gone.
  struct State {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<c10::intrusive_ptr<WorkChorus>> queue;
    int idle = 0;
    int starting = 0;  // started, not yet looking for work: each takes one
    std::vector<std::thread> threads;  // one that retires detaches itself and leaves
    bool stop = false;
  };
  static void run(std::shared_ptr<State> st);
  std::shared_ptr<State> st_;
};

// While one is alive on a thread, works that finish on that thread are
// collected. When it goes out of scope (the thread has stopped running the
// stream) the future of `mine`, the work the thread waited for, is completed
// there and then; the others go to their group's completion threads (one of
// their callbacks might wait for a work collected after it).
class CollectFinished {
 public:
  explicit CollectFinished(WorkChorus *mine = nullptr);
  ~CollectFinished();
  CollectFinished(const CollectFinished &) = delete;
  CollectFinished &operator=(const CollectFinished &) = delete;
  // Takes w when a collector is active on this thread.
  static bool take(const c10::intrusive_ptr<WorkChorus> &w);

 private:
  std::vector<c10::intrusive_ptr<WorkChorus>> works_;
  WorkChorus *mine_;
  CollectFinished *outer_;
};

}  // namespace chorus_torch
