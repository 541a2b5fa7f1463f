// GpuClockSampler: the GPU's SM clock, power and clock-event reasons, read through NVML from a host thread.
//
// NVML is opened with dlopen (libnvidia-ml.so.1 ships with the driver, not the toolkit; CI has neither a GPU
// nor, usually, the library), and only its read-only queries are called. The few entry points are declared
// here by their documented C signatures: every one returns nvmlReturn_t (0 = NVML_SUCCESS), and a device
// handle is an opaque pointer.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include <cuda_runtime.h>

#include "braid/bench.hpp"
#include "braid/errors.hpp"

namespace braid::bench {

namespace {

struct Nvml {
  using InitFn = int (*)();
  using HandleFn = int (*)(const char*, void**);
  using ClockFn = int (*)(void*, int, unsigned*);
  using PowerFn = int (*)(void*, unsigned*);
  using ReasonsFn = int (*)(void*, unsigned long long*);
  HandleFn handle = nullptr;
  ClockFn clock = nullptr;
  PowerFn power = nullptr;
  ReasonsFn reasons = nullptr;
  bool ok = false;

  // Loaded and initialised once per process; never unloaded (samplers may outlive any one scope).
  static const Nvml& get() {
    static const Nvml n = [] {
      Nvml v;
      void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!lib) return v;
      auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
      v.handle = reinterpret_cast<HandleFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
      v.clock = reinterpret_cast<ClockFn>(dlsym(lib, "nvmlDeviceGetClockInfo"));
      v.power = reinterpret_cast<PowerFn>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
      v.reasons = reinterpret_cast<ReasonsFn>(dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons"));
      if (!v.reasons) v.reasons = reinterpret_cast<ReasonsFn>(dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons"));
      v.ok = init && v.handle && v.clock && init() == 0;
      return v;
    }();
    return n;
  }
};

constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM

}  // namespace

std::string ClockSummary::str() const {
  if (samples == 0) return "no samples";
  char buf[256];
  char power[32] = "power n/a";
  if (mean_w >= 0) std::snprintf(power, sizeof power, "%.0f W", mean_w);
  std::snprintf(buf, sizeof buf, "%.0f MHz (%.0f-%.0f), %s, power-capped %.0f%%, thermal %.0f%%, idle %.0f%%, %d samples",
                mean_mhz, min_mhz, max_mhz, power, 100 * power_capped, 100 * thermal, 100 * idle, samples);
  return buf;
}

ClockSummary summarize_clocks(const std::vector<ClockSample>& samples) {
  ClockSummary s;
  if (samples.empty()) return s;
  s.samples = int(samples.size());
  s.min_mhz = s.max_mhz = samples[0].sm_mhz;
  double mhz = 0, watts = 0;
  int powered = 0, capped = 0, hot = 0, idle = 0;
  for (const auto& x : samples) {
    mhz += x.sm_mhz;
    s.min_mhz = std::min(s.min_mhz, x.sm_mhz);
    s.max_mhz = std::max(s.max_mhz, x.sm_mhz);
    if (x.power_w >= 0) watts += x.power_w, ++powered;
    capped += (x.reasons & (kClockReasonSwPowerCap | kClockReasonHwPowerBrake)) != 0;
    hot += (x.reasons & (kClockReasonSwThermal | kClockReasonHwThermal)) != 0;
    idle += (x.reasons & kClockReasonIdle) != 0;
  }
  const double n = double(samples.size());
  s.mean_mhz = mhz / n;
  s.mean_w = powered ? watts / powered : -1;
  s.power_capped = capped / n, s.thermal = hot / n, s.idle = idle / n;
  return s;
}

struct GpuClockSampler::Window {
  std::atomic<bool> run{true};
  std::mutex m;
  std::vector<ClockSample> samples;
  std::thread th;
};

GpuClockSampler::GpuClockSampler(int cuda_device, int period_us) : period_us_(std::max(period_us, 100)) {
  const Nvml& n = Nvml::get();
  if (!n.ok) return;
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_device) != cudaSuccess) {
    cudaGetLastError();  // (not an error of the caller's: the sampler is just unavailable)
    return;
  }
  void* d = nullptr;
  if (n.handle(bus, &d) == 0) dev_ = d;
}

GpuClockSampler::~GpuClockSampler() {
  if (w_) stop();
}

void GpuClockSampler::start() {
  if (w_) stop();
  if (!dev_) return;
  w_ = std::make_unique<Window>();
  Window* w = w_.get();
  void* dev = dev_;
  const int period = period_us_;
  w->th = std::thread([w, dev, period] {
    const Nvml& n = Nvml::get();
    while (w->run.load(std::memory_order_relaxed)) {
      ClockSample x;
      unsigned v = 0;
      if (n.clock(dev, kNvmlClockSm, &v) == 0) {
        x.sm_mhz = v;
        unsigned mw = 0;
        x.power_w = n.power && n.power(dev, &mw) == 0 ? mw / 1000.0 : -1.0;
        unsigned long long r = 0;
        if (n.reasons && n.reasons(dev, &r) == 0) x.reasons = r;
        std::lock_guard<std::mutex> g(w->m);
        w->samples.push_back(x);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(period));
    }
  });
}

ClockSummary GpuClockSampler::stop() {
  if (!w_) return {};
  w_->run.store(false);
  if (w_->th.joinable()) w_->th.join();
  const ClockSummary s = summarize_clocks(w_->samples);
  w_.reset();
  return s;
}

}  // namespace braid::bench
