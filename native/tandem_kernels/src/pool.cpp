#include "pool.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tk {

namespace {

int available_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
#endif
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

// The calling thread's niceness (Linux: per thread), or 0 elsewhere.
int own_nice() {
#if defined(__linux__)
  errno = 0;
  const int n = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  return errno == 0 ? n : 0;
#else
  return 0;
#endif
}

// A helper takes at least the niceness of the lane whose job it runs (the
// lane's threads are niced so the GUI stays smooth; a helper started by a
// job at load, on the GUI's thread, would otherwise compete with it at 0).
// Only ever raised: an unprivileged thread cannot lower its niceness.
void follow_nice(int nice) {
#if defined(__linux__)
  if (nice > own_nice()) setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice);
#else
  (void)nice;
#endif
}

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

constexpr int SPIN = 4000;  // the caller's polls before it yields while helpers finish
// How long a worker polls for the next job before it sleeps: not at all by
// default. Polling 50 us made decode no faster (the bundled model and a 1.5B
// shape) and the GUI's p99 lateness ~1.3x worse with 16 streams; 1 ms made
// decode slower (on two cores a polling worker takes the core the stream and
// Python threads need). benchmarks/RESULTS.md.
constexpr int SPIN_US = 0;
std::atomic<int> spin_us_now{SPIN_US};

// Polls until `generation` moves on or `us` microseconds pass (the clock is
// read every 64 polls); true if it moved.
bool poll(const std::atomic<unsigned long>& generation, unsigned long seen, int us) {
  if (us <= 0) return generation.load() != seen;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (generation.load(std::memory_order_acquire) != seen) return true;
      relax();
    }
    if (std::chrono::steady_clock::now() >= until) return generation.load() != seen;
  }
}

class Pool {
 public:
  void run(int chunks, const std::function<void(int)>& fn) {
    std::lock_guard<std::mutex> one_job(job_mutex_);  // two CPU streams: one at a time
    const int want = std::min(threads_.load(), chunks);
    if (want <= 1) {
      for (int i = 0; i < chunks; ++i) fn(i);
      return;
    }
    grow(want - 1);
    const int nice = own_nice();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn;
      nice_ = nice;
      chunks_ = chunks;
      next_.store(0);
      helpers_ = want - 1;
      pending_.store(want - 1);
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    work();
    for (int spins = 0; pending_.load() != 0; ++spins) {
      if (spins > SPIN) std::this_thread::yield();
      relax();
    }
  }

  std::atomic<int> threads_{available_cpus()};

 private:
  void work() {
    for (int i = next_.fetch_add(1); i < chunks_; i = next_.fetch_add(1)) (*fn_)(i);
  }

  void grow(int helpers) {
    while (static_cast<int>(workers_.size()) < helpers) {
      const int index = static_cast<int>(workers_.size());
      // It starts from the generation before this job's: a thread that
      // begins after the job was posted must still see it as new.
      workers_.emplace_back([this, index, seen = generation_.load()] { loop(index, seen); });
      workers_.back().detach();
    }
  }

  void loop(int index, unsigned long seen) {
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "tandem-pool");
#endif
    while (true) {
      if (!poll(generation_, seen, spin_us_now.load(std::memory_order_relaxed))) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
      }
      int wanted, nice;
      {  // the job and its generation together: one turn per job, never two
        std::lock_guard<std::mutex> lock(mutex_);
        seen = generation_.load();
        wanted = helpers_;
        nice = nice_;
      }
      if (index < wanted) {  // the job counts on this worker (pending_)
        follow_nice(nice);
        work();
        pending_.fetch_sub(1);
      }
    }
  }

  std::mutex job_mutex_, mutex_;
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
  std::atomic<unsigned long> generation_{0};
  std::atomic<int> next_{0}, pending_{0};
  const std::function<void(int)>* fn_ = nullptr;
  int chunks_ = 0, helpers_ = 0, nice_ = 0;
};

Pool& pool() {
  static Pool* p = new Pool();  // leaked: never destroyed while threads may wait on it
  return *p;
}

}  // namespace

void set_threads(int n) { pool().threads_.store(n < 1 ? 1 : n); }

int threads() { return pool().threads_.load(); }

void set_spin_us(int us) { spin_us_now.store(us < 0 ? 0 : us); }

int spin_us() { return spin_us_now.load(); }

void parallel_for(int chunks, const std::function<void(int)>& fn) { pool().run(chunks, fn); }

}  // namespace tk
