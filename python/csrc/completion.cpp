#include "completion.hpp"

#include <c10/util/Exception.h>

#include "pyexit.hpp"
#include "work.hpp"

namespace chorus_torch {

namespace {
// Each callback blocked in a wait holds a thread (PowerSGD's hook: one per
// bucket in flight), so the pool grows while work waits and no thread is
// idle; this many is reported, as something that is likely to be stuck.
constexpr size_t kManyThreads = 64;
// Threads idle this long go, down to this many.
constexpr auto kRetireAfter = std::chrono::seconds(1);
constexpr size_t kKeepThreads = 2;
thread_local CollectFinished *collector = nullptr;
}  // namespace

Completions::Completions() : st_(std::make_shared<State>()) {}

Completions::~Completions() { stop(); }

void Completions::post(c10::intrusive_ptr<WorkChorus> w) {
  std::unique_lock<std::mutex> g(st_->mutex);
  if (st_->stop) {  // after the group's shutdown nothing runs its stream: here is safe
    g.unlock();
    w->completeFuture();
    return;
  }
  st_->queue.push_back(std::move(w));
  if (st_->queue.size() <= static_cast<size_t>(st_->idle + st_->starting)) {
    st_->wake.notify_one();
    return;
  }
  // More waiting than idle threads, or threads on their way (the busy ones
  // may be in callbacks that wait for this very work): one more, as gloo's
  // worker threads would be.
  st_->starting++;
  st_->threads.emplace_back(run, st_);
  if (st_->threads.size() == kManyThreads)
    TORCH_WARN("chorus: ", kManyThreads, " threads are completing futures at once: a burst of operations ended "
               "together (they go after a second idle), or callbacks that wait for later operations are piling up");
}

void Completions::run(std::shared_ptr<State> st) {
  std::unique_lock<std::mutex> g(st->mutex);
  st->starting--;
  for (;;) {
    if (st->queue.empty()) {
      if (st->stop) return;
      st->idle++;
      bool woken = st->wake.wait_for(g, kRetireAfter) == std::cv_status::no_timeout;
      st->idle--;
      if (!woken && st->queue.empty() && !st->stop && st->threads.size() > kKeepThreads) {
        // Idle for long and more threads than need be (a burst of
        // completions, callbacks that waited): this one goes.
        for (auto it = st->threads.begin(); it != st->threads.end(); ++it)
          if (it->get_id() == std::this_thread::get_id()) {
            it->detach();
            st->threads.erase(it);
            break;
          }
        return;
      }
      continue;
    }
    auto w = std::move(st->queue.front());
    st->queue.pop_front();
    g.unlock();
    {
      PythonSection python;  // the future's callbacks may be Python's
      if (python.exiting() && pythonFinalizing()) {
        (void)w.release();  // leaked (pyexit.hpp)
      } else {
        w->completeFuture();
        w.reset();
      }
    }
    g.lock();
  }
}

void Completions::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> g(st_->mutex);
    st_->stop = true;
    st_->wake.notify_all();
    threads.swap(st_->threads);
  }
  for (std::thread &t : threads)
    if (t.get_id() == std::this_thread::get_id()) t.detach();  // stopped from one of its own callbacks
    else t.join();
  // What was posted after the threads left (nothing, normally).
  std::unique_lock<std::mutex> g(st_->mutex);
  while (!st_->queue.empty()) {
    auto w = std::move(st_->queue.front());
    st_->queue.pop_front();
    g.unlock();
    w->completeFuture();
    g.lock();
  }
}

CollectFinished::CollectFinished(WorkChorus *mine) : mine_(mine), outer_(collector) { collector = this; }

CollectFinished::~CollectFinished() {
  collector = outer_;
  for (auto &w : works_)
    if (w.get() == mine_) w->completeFuture();
    else w->postFuture();
}

bool CollectFinished::take(const c10::intrusive_ptr<WorkChorus> &w) {
  if (!collector) return false;
  collector->works_.push_back(w);
  return true;
}

}  // namespace chorus_torch
