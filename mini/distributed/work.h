// work.h — how Gloo's collectives run: queued in call order on a worker thread of their group
// (torch's ProcessGroupGloo keeps such threads), while the caller holds a Work for each.
//
// In:  jobs (functions that run one collective on raw pointers) and the tensors they touch.
// Out: a QueuedWork per job: wait() blocks until the job has run and raises its error;
//      is_completed() asks without blocking.
// Guarantees: jobs run one at a time, first queued first (so every rank runs its collectives
// in the order it called them); a job never owns a Tensor, so no tensor (nor the Python object
// a numpy-backed one keeps) is freed on the worker thread: the QueuedWork keeps them, and its
// destructor waits for the job first. Jobs still queued when the queue is destroyed fail with
// an error saying so.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "distributed/process_group.h"

namespace mini::distributed {

class Completion {  // shared by a queued job and its Work
 public:
  void finish(std::exception_ptr error);  // the job is over (error: null when it succeeded)
  void wait();                            // until finish(); raises its error
  void wait_quietly();                    // until finish(); keeps its error
  bool done();

 private:
  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::exception_ptr error_;
};

class WorkQueue {
 public:
  WorkQueue();   // starts the worker thread
  ~WorkQueue();  // fails what is still queued, lets the running job end, joins the thread
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `job`; the Completion is finished when it returns or throws.
  std::shared_ptr<Completion> submit(std::function<void()> job);

 private:
  struct Entry {
    std::function<void()> job;
    std::shared_ptr<Completion> completion;
  };
  void run();

  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Entry> entries_;
  bool stopping_ = false;
  std::thread thread_;
};

class QueuedWork : public Work {
 public:
  QueuedWork(std::shared_ptr<Completion> completion, std::vector<Tensor> tensors)
      : completion_(std::move(completion)), tensors_(std::move(tensors)) {}
  ~QueuedWork() override { completion_->wait_quietly(); }  // the job may still write tensors_
  void wait() override { completion_->wait(); }
  bool is_completed() override { return completion_->done(); }

 private:
  std::shared_ptr<Completion> completion_;
  std::vector<Tensor> tensors_;  // alive until the job is over
};

}  // namespace mini::distributed
