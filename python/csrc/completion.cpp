#include "completion.hpp"

#include "work.hpp"

namespace chorus_torch {

namespace {
// Each callback blocked in a wait holds one (PowerSGD's hook: one per bucket
// in flight); past this many the rest queue.
constexpr size_t kMaxThreads = 64;
thread_local CollectFinished *collector = nullptr;
}  // namespace

Completions::~Completions() { stop(); }

void Completions::post(c10::intrusive_ptr<WorkChorus> w) {
  std::unique_lock<std::mutex> g(mutex_);
  queue_.push_back(std::move(w));
  if (idle_ > 0) {
    wake_.notify_one();
  } else if (threads_.size() < kMaxThreads && !stop_) {
    // Every thread is busy (maybe in a callback that waits for this very
    // work): one more, as gloo's several worker threads would.
    threads_.emplace_back([this] { run(); });
  }
}

void Completions::run() {
  std::unique_lock<std::mutex> g(mutex_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) return;
      idle_++;
      wake_.wait(g);
      idle_--;
      continue;
    }
    auto w = std::move(queue_.front());
    queue_.pop_front();
    g.unlock();
    w->completeFuture();
    w.reset();
    g.lock();
  }
}

void Completions::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> g(mutex_);
    stop_ = true;
    wake_.notify_all();
    threads.swap(threads_);
  }
  for (std::thread &t : threads)
    if (t.get_id() == std::this_thread::get_id()) t.detach();  // stopped from one of its own callbacks
    else t.join();
  // Whatever was posted after the threads left (nothing normally).
  std::unique_lock<std::mutex> g(mutex_);
  while (!queue_.empty()) {
    auto w = std::move(queue_.front());
    queue_.pop_front();
    g.unlock();
    w->completeFuture();
    g.lock();
  }
}

CollectFinished::CollectFinished() : outer_(collector) { collector = this; }

CollectFinished::~CollectFinished() {
  collector = outer_;
  for (auto &w : works_) w->completeFuture();
}

bool CollectFinished::take(const c10::intrusive_ptr<WorkChorus> &w) {
  if (!collector) return false;
  collector->works_.push_back(w);
  return true;
}

}  // namespace chorus_torch
