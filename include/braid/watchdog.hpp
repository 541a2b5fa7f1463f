// braid/watchdog.hpp — the last line of the no-hang contract. Every device wait in braid is bounded
// and Team::synchronize is bounded, but a host thread can still block where no timeout applies: inside
// a driver call (e.g. a lazily loaded kernel whose load waits for a stream that waits for that kernel,
// docs/t3.md), or in a collective whose peer process died. A Watchdog runs a thread that, if it is not
// re-armed or destroyed within `seconds`, reports what was running and ends the process with exit code
// 124 (std::_Exit; under mpirun a rank that exits without MPI_Finalize ends the whole job, so no rank is
// left waiting for the dead one).
//
//   braid::Watchdog wd(braid::Watchdog::seconds_from_env("BRAID_DEADLINE_S", 0), rank);
//   wd.rearm(60, "bench gemm-rs 16384x8192x1024");   // each phase gets its own budget
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace braid {

class Watchdog {
 public:
  // seconds <= 0: disarmed until rearm(). on_expire (tests): called with the report instead of aborting.
  explicit Watchdog(double seconds, int rank = 0, std::function<void(const std::string&)> on_expire = {});
  ~Watchdog();  // disarms and joins
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Restarts the countdown (seconds <= 0 disarms) and names what runs now.
  void rearm(double seconds, const std::string& phase);
  void disarm() { rearm(0, phase_); }
  bool fired() const;

  // A positive number of seconds from the environment variable `name`, else `fallback`.
  static double seconds_from_env(const char* name, double fallback);

 private:
  void loop();
  int rank_;
  std::function<void(const std::string&)> on_expire_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false, fired_ = false;
  double seconds_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::string phase_ = "braid";
  std::thread thread_;
};

}  // namespace braid
