// The only file that talks to SimGrid: builds the platform of a Network with the s4u C++ API,
// turns a Schedule into s4u Comm activities with dependencies, runs them and reports the makespan.
//
// Network model: CM02 (max-min fair sharing, bandwidth and latency factors 1, no cross-traffic).
// CM02 weighs a flow's share by its route latency (TCP RTT unfairness); a NoC arbitrates fairly,
// so every route is given the same nominal latency (1 s on the injection link) and the real
// latency (sum of the hops' latencies) is applied through the latency-factor callback. The TCP
// window bound (TCP-gamma / 2·latency) is disabled with a huge gamma.
//
// SimGrid allows one Engine per process, so each simulation runs in a forked child that sends
// its result back over a pipe.
//
// Version-specific calls (3.32 vs 4.x) are grouped in namespace compat below.
#include <simgrid/config.h>
#include <simgrid/kernel/resource/NetworkModelIntf.hpp>
#include <simgrid/s4u.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "braid/sim.hpp"

namespace sg4 = simgrid::s4u;

namespace braid::sim {
namespace {

namespace compat {
#if SIMGRID_VERSION_MAJOR >= 4
// SimGrid 4.x (not verified here: Debian 12 ships 3.32).
sg4::NetZone* full_zone(sg4::Engine& e) { return e.get_netzone_root()->add_netzone_full("braid"); }
sg4::Host* host(sg4::NetZone* z, const std::string& n, double speed) { return z->add_host(n, speed)->seal(); }
sg4::Link* link(sg4::NetZone* z, const std::string& n, double bw, double lat) {
  return z->add_link(n, bw)->set_latency(lat)->seal();
}
void start(const sg4::CommPtr& c) { c->start(); }
template <class Cb> void on_completion(Cb cb) { sg4::Comm::on_completion_cb([cb](const sg4::Comm& c) { cb(c); }); }
template <class Cb> void lat_factor(sg4::NetZone* z, Cb cb) { z->get_network_model()->set_lat_factor_cb(cb); }
#else
// SimGrid 3.32 .. 3.36.
sg4::NetZone* full_zone(sg4::Engine&) { return sg4::create_full_zone("braid"); }
sg4::Host* host(sg4::NetZone* z, const std::string& n, double speed) { return z->create_host(n, speed)->seal(); }
sg4::Link* link(sg4::NetZone* z, const std::string& n, double bw, double lat) {
  return z->create_link(n, bw)->set_latency(lat)->seal();
}
void start(const sg4::CommPtr& c) { c->start(); }
template <class Cb> void on_completion(Cb cb) { sg4::Activity::on_completion_cb(cb); }
template <class Cb> void lat_factor(sg4::NetZone* z, Cb cb) { z->get_network_model()->set_lat_factor_cb(cb); }
#endif
void route(sg4::NetZone* z, sg4::Host* a, sg4::Host* b, const std::vector<sg4::Link*>& links) {
  std::vector<sg4::LinkInRoute> r;
  r.reserve(links.size());
  for (const sg4::Link* l : links) r.emplace_back(l);
  z->add_route(a->get_netpoint(), b->get_netpoint(), nullptr, nullptr, r, false);
}
}  // namespace compat

constexpr double kNominalLatency = 1.0;  // s, the same on every route (see the header comment)

// Runs in the child: returns the simulated makespan.
double run_simgrid(const Network& net, const Schedule& s, bool verbose) {
  std::vector<std::string> args = {"braid-sim", "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
                                   "--cfg=network/TCP-gamma:1e30", "--cfg=network/weight-S:0"};
  // CM02's latency and bandwidth factors default to 1 (setting them explicitly would conflict with
  // the latency-factor callback below).
  if (!verbose) args.push_back("--log=root.thresh:critical");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = int(argv.size());
  argv.push_back(nullptr);
  sg4::Engine e(&argc, argv.data());

  sg4::NetZone* zone = compat::full_zone(e);
  std::vector<sg4::Host*> hosts(net.nodes());
  // Names built by appending: GCC 12's -Wrestrict misfires on `"n" + std::to_string(i)`.
  const auto named = [](char c, int i) {
    std::string s(1, c);
    s += std::to_string(i);
    return s;
  };
  for (int i = 0; i < net.nodes(); ++i) hosts[i] = compat::host(zone, named('n', i), 1e9);
  // Links are created on first use (a 1024-node grid has ~6000, most schedules touch fewer).
  std::vector<sg4::Link*> links(net.links().size(), nullptr);
  std::unordered_map<const sg4::Link*, double> latency;  // the real latency of each link
  // An injection link is only ever the first link of a route: it carries the nominal latency.
  const auto get_link = [&](int id, bool injection) {
    if (!links[id]) {
      const Network::Link& l = net.links()[id];
      links[id] = compat::link(zone, named('l', id), l.bw, injection ? kNominalLatency : 0);
      latency[links[id]] = l.lat;
    }
    return links[id];
  };
  std::set<std::pair<int, int>> pairs;
  for (const Flow& f : s.flows) pairs.emplace(f.src, f.dst);
  for (const auto& [a, b] : pairs) {
    std::vector<sg4::Link*> r;
    for (int id : net.route(a, b)) r.push_back(get_link(id, r.empty()));
    compat::route(zone, hosts[a], hosts[b], r);
  }
  compat::lat_factor(zone, [&latency](double, const sg4::Host*, const sg4::Host*, const std::vector<sg4::Link*>& r,
                                      const std::unordered_set<sg4::NetZone*>&) {
    double sum = 0;
    for (const sg4::Link* l : r) sum += latency.at(l);
    return sum / kNominalLatency;
  });
  zone->seal();

  // Comms are created when their dependencies are met: SimGrid 3.32 keeps every detached comm in
  // a list that is scanned on each completion, so creating all of them up front is quadratic.
  const size_t nf = s.flows.size();
  std::vector<int> waiting(nf);
  std::vector<std::vector<int>> successors(nf);
  for (size_t i = 0; i < nf; ++i) {
    waiting[i] = int(s.flows[i].after.size());
    for (int d : s.flows[i].after) successors[d].push_back(int(i));
  }
  std::vector<sg4::CommPtr> comms(nf);
  std::vector<int> ids(nf);
  const auto launch = [&](int i) {
    const Flow& f = s.flows[i];
    ids[i] = i;
    comms[i] = sg4::Comm::sendto_init(hosts[f.src], hosts[f.dst]);
    comms[i]->set_payload_size(uint64_t(f.bytes + 0.5));
    comms[i]->set_data(&ids[i]);
    compat::start(comms[i]);
  };
  compat::on_completion([&](const sg4::Activity& a) {
    const int* id = static_cast<const int*>(a.get_data<void>());
    if (!id) return;
    for (int j : successors[*id])
      if (--waiting[j] == 0) launch(j);
  });
  for (size_t i = 0; i < nf; ++i)
    if (waiting[i] == 0) launch(int(i));
  e.run();
  return sg4::Engine::get_clock();
}

}  // namespace

SimResult simulate(const Network& net, const Schedule& s, bool verbose_simgrid) {
  const auto t0 = std::chrono::steady_clock::now();
  SimResult r;
  r.flows = s.flows.size();
  if (s.flows.empty()) return r;
  std::cout.flush();  // the child must not inherit (and later flush) pending output
  std::fflush(nullptr);
  int fd[2];
  if (pipe(fd) != 0) throw std::runtime_error("simulate: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("simulate: fork failed");
  if (pid == 0) {  // child: one SimGrid engine, then _exit without tearing it down
    close(fd[0]);
    double t = -1;
    try {
      t = run_simgrid(net, s, verbose_simgrid);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "braid simulate: SimGrid failed: %s\n", ex.what());
    }
    const ssize_t w = write(fd[1], &t, sizeof t);
    _exit(w == ssize_t(sizeof t) && t >= 0 ? 0 : 1);
  }
  close(fd[1]);
  double t = -1;
  const ssize_t got = read(fd[0], &t, sizeof t);
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != ssize_t(sizeof t) || t < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("simulate: the SimGrid child failed (status " + std::to_string(status) + ")");
  r.seconds = t;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace braid::sim
