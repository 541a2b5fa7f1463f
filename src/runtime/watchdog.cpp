// watchdog.cpp — see include/braid/watchdog.hpp.
#include "braid/watchdog.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace braid {

Watchdog::Watchdog(double seconds, int rank, std::function<void(const std::string&)> on_expire)
    : rank_(rank), on_expire_(std::move(on_expire)) {
  if (seconds > 0) {
    armed_ = true;
    seconds_ = seconds;
    deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(seconds));
  }
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::rearm(double seconds, const std::string& phase) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    phase_ = phase;
    armed_ = seconds > 0;
    seconds_ = seconds;
    if (armed_)
      deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                         std::chrono::duration<double>(seconds));
  }
  cv_.notify_all();
}

bool Watchdog::fired() const {
  std::lock_guard<std::mutex> lk(mu_);
  return fired_;
}

double Watchdog::seconds_from_env(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return end != v && s > 0 ? s : fallback;
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (stop_) return;
    if (!armed_ || fired_) {
      cv_.wait(lk);
      continue;
    }
    if (cv_.wait_until(lk, deadline_) != std::cv_status::timeout) continue;  // re-armed, stopped or spurious
    if (stop_ || !armed_ || std::chrono::steady_clock::now() < deadline_) continue;
    fired_ = true;
    char msg[512];
    std::snprintf(msg, sizeof msg,
                  "braid watchdog: rank %d: '%s' still running after %.0f s; ending the job (a hang that no bounded "
                  "wait caught: a host thread blocked in a driver call, or a dead peer)",
                  rank_, phase_.c_str(), seconds_);
    const std::string report = msg;
    if (on_expire_) {
      auto cb = on_expire_;
      lk.unlock();
      cb(report);
      lk.lock();
      continue;
    }
    std::fprintf(stderr, "%s\n", report.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    // No MPI_Abort: braid initialises MPI_THREAD_FUNNELED, so this thread may not call MPI. A rank that
    // exits without MPI_Finalize makes mpirun end every other rank of the job.
    std::_Exit(124);
  }
}

}  // namespace braid
