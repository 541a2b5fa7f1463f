// `braid info`: build, driver and library versions; GPUs; NVLink/PCIe links; probed peer access.
#include "braid/info.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>

#include <iomanip>
#include <string>
#include <vector>

#include "braid/errors.hpp"
#include "braid/runtime.hpp"

namespace braid {
namespace {

// NVML is loaded at run time: CI machines have no driver, so linking it would stop binaries starting.
struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*by_index)(unsigned, void**) = nullptr;
  int (*nvlink_state)(void*, unsigned, int*) = nullptr;
  int (*nvlink_remote_pci)(void*, unsigned, void*) = nullptr;
  int (*driver_version)(char*, unsigned) = nullptr;
  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    by_index = reinterpret_cast<int (*)(unsigned, void**)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    nvlink_state = reinterpret_cast<int (*)(void*, unsigned, int*)>(dlsym(lib, "nvmlDeviceGetNvLinkState"));
    driver_version = reinterpret_cast<int (*)(char*, unsigned)>(dlsym(lib, "nvmlSystemGetDriverVersion"));
    if (!init || init() != 0) lib = nullptr;
  }
  // Active NVLinks of GPU `index` (NVML index order may differ from CUDA's; we report per NVML index).
  int active_links(unsigned index) const {
    if (!lib || !by_index || !nvlink_state) return -1;
    void* dev = nullptr;
    if (by_index(index, &dev) != 0) return -1;
    int n = 0;
    for (unsigned l = 0; l < 18; ++l) {
      int st = 0;
      if (nvlink_state(dev, l, &st) == 0 && st == 1) ++n;
    }
    return n;
  }
  std::string driver() const {
    char buf[96] = {0};
    if (lib && driver_version && driver_version(buf, sizeof buf) == 0) return buf;
    return "unknown";
  }
};

std::string version_str(int v) {  // CUDA encodes 1000*major + 10*minor
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

int print_info(std::ostream& out, bool probe) {
  out << "braid " << BRAID_COMMIT << "\n";
  int rt = 0, drv = 0, nccl = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  cudaGetLastError();
  ncclGetVersion(&nccl);
  char mpiv[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(mpiv, &len);
  std::string mpis(mpiv, len);
  if (auto nl = mpis.find_first_of("\n,"); nl != std::string::npos) mpis = mpis.substr(0, nl);
  Nvml nvml;
  out << "  CUDA runtime " << version_str(rt) << ", driver API " << (drv ? version_str(drv) : "none")
      << ", driver " << nvml.driver() << "\n";
  out << "  NCCL " << nccl / 10000 << "." << (nccl % 10000) / 100 << "." << nccl % 100 << " (linked)\n";
  out << "  MPI  " << mpis << "\n";
  const int n = visible_gpu_count();
  if (n == 0) {
    out << "GPUs: none visible (no driver or no device). GPU tests and benchmarks are skipped here.\n";
    return 0;
  }
  out << "GPUs: " << n << "\n";
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    BRAID_CUDA_CHECK(cudaGetDeviceProperties(&p, d));
    char bus[32] = {0};
    cudaDeviceGetPCIBusId(bus, sizeof bus, d);
    out << "  [" << d << "] " << p.name << "  sm_" << p.major << p.minor << "  " << p.multiProcessorCount << " SMs  "
        << (p.totalGlobalMem >> 20) << " MiB  L2 " << (p.l2CacheSize >> 20) << " MiB  smem/block "
        << (p.sharedMemPerBlockOptin >> 10) << " KiB  pci " << bus;
    const int links = nvml.active_links(d);
    if (links >= 0) out << "  NVLinks active " << links;
    out << "\n";
  }
  out << "Peer access (driver attributes; probe = a kernel's remote stores verified by the owner):\n";
  out << "  " << std::left << std::setw(10) << "from->to" << std::setw(8) << "access" << std::setw(9) << "atomics"
      << std::setw(8) << "rank" << "probe\n";
  std::vector<PeerLink> links;
  if (probe) links = probe_local_peers();
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      int access = 0, atom = 0, perf = 0;
      cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, a, b);
      cudaDeviceGetP2PAttribute(&atom, cudaDevP2PAttrNativeAtomicSupported, a, b);
      cudaDeviceGetP2PAttribute(&perf, cudaDevP2PAttrPerformanceRank, a, b);
      std::string pr = "not run";
      for (const auto& l : links)
        if (l.from == a && l.to == b) pr = (l.probe_ok ? "ok: " : "FAILED: ") + l.detail;
      out << "  " << std::setw(10) << (std::to_string(a) + "->" + std::to_string(b)) << std::setw(8)
          << (access ? "yes" : "no") << std::setw(9) << (atom ? "yes" : "no") << std::setw(8) << perf << pr << "\n";
    }
  return n;
}

}  // namespace braid
