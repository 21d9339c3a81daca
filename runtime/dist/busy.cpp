// Busy work on a thread of its own, the census answered meanwhile (busy.h).
#include "runtime/dist/busy.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/dist/watchdog.h"

namespace shardtune::dist {

void while_busy(const std::string& what, const std::function<void()>& work) {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::exception_ptr error;
  std::thread worker([&] {
    try {
      work();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(mutex);
    done = true;
    finished.notify_one();
  });
  for (;;) {
    Watchdog::answer_busy(what);
    std::unique_lock lock(mutex);
    if (finished.wait_for(lock, std::chrono::milliseconds(20), [&] { return done; })) break;
  }
  worker.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace shardtune::dist
