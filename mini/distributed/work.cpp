// work.cpp — see work.h.
#include "distributed/work.h"

#include "distributed/errors.h"

namespace mini::distributed {

void Completion::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = error;
  }
  finished_.notify_all();
}

void Completion::wait_quietly() {
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [this] { return done_; });
}

void Completion::wait() {
  wait_quietly();
  if (error_) std::rethrow_exception(error_);
}

bool Completion::done() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

WorkQueue::WorkQueue() : thread_([this] { run(); }) {}

WorkQueue::~WorkQueue() {
  std::deque<Entry> abandoned;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    abandoned.swap(entries_);
  }
  queued_.notify_all();
  for (Entry& e : abandoned) {
    try {
      fail_backend("the process group was destroyed before this collective ran");
    } catch (...) {
      e.completion->finish(std::current_exception());
    }
  }
  thread_.join();
}

std::shared_ptr<Completion> WorkQueue::submit(std::function<void()> job) {
  auto completion = std::make_shared<Completion>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back({std::move(job), completion});
  }
  queued_.notify_one();
  return completion;
}

void WorkQueue::run() {
  for (;;) {
    Entry e;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [this] { return stopping_ || !entries_.empty(); });
      if (entries_.empty()) return;  // stopping, nothing left
      e = std::move(entries_.front());
      entries_.pop_front();
    }
    std::exception_ptr error;
    try {
      e.job();
    } catch (...) {
      error = std::current_exception();
    }
    e.completion->finish(error);
  }
}

}  // namespace mini::distributed
